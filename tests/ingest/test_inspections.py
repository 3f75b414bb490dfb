"""Inspections from files, on both engines: every quarantine reason with its readable detail,
idempotent re-ingestion, and the audit / lock-out marking against the station's flags (flag
rows inserted through the store: :mod:`tests.ingest.inspection_helpers`)."""

from __future__ import annotations

import pandas as pd
import pytest

from qcllp.ingest import REASONS, IngestError, ingest_inspections
from qcllp.store import IngestionBatch
from tests.ingest.helpers import accounted, quarantine_reasons
from tests.ingest.inspection_helpers import (
    inspections,
    measured_plant,
    write_inspections,
)

GOOD = "c1,s1,furnace,crack,2025-01-06T07:00:00Z\n"
CASES = {
    "missing_id": ("c1,,furnace,ok,\n", "stick_id is empty"),
    "id_too_long": (f"c1,{'s' * 200},furnace,ok,\n", "stick_id is 200 characters long"),
    "missing_field": ("c1,s2,furnace,,\n", "result is empty"),
    "unknown_station": ("c1,s2,oven,ok,\n", "unknown station 'oven'; known: furnace, rolling"),
    "unknown_result": (
        "c1,s2,furnace,Crack,\n",
        "result 'Crack' is not ok or a defect type (spelled 'crack' in the plant config); "
        "allowed: ok, crack, bend",
    ),
    "unparseable_timestamp": (
        "c1,s2,furnace,ok,yesterday\n",
        "inspected_at 'yesterday' is not an ISO 8601 time",
    ),
    "future_timestamp": ("c1,s2,furnace,ok,2199-01-01T00:00:00Z\n", "inspected_at '2199-01-01"),
    "unknown_stick": ("c1,s9,furnace,ok,\n", "no readings of stick 's9' of charge 'c1'"),
    "stick_not_at_station": (
        "c1,s5,furnace,ok,\n",
        "stick 's5' of charge 'c1' has no readings at station 'furnace'; it has at: rolling",
    ),
    "conflicting_inspection": (
        "c1,s1,furnace,ok,\n",
        "an inspection of stick 's1' of charge 'c1' at furnace was given earlier in this input "
        "with result 'crack'; this row: 'ok'",
    ),
}


@pytest.mark.parametrize("reason", sorted(CASES))
def test_a_bad_inspection_is_quarantined_with_its_reason(reason, store, tiny_config, tmp_path):
    measured_plant(store, tiny_config, tmp_path)
    bad, detail = CASES[reason]
    report = ingest_inspections(
        store, tiny_config, write_inspections(tmp_path, "i.csv", GOOD + bad)
    )
    assert (report.records, report.stored, dict(report.quarantined)) == (2, 1, {reason: 1})
    assert accounted(report) and reason in REASONS
    [(stored_reason, stored_detail)] = quarantine_reasons(store)
    assert stored_reason == reason and detail in stored_detail, stored_detail
    [(row_number,)] = store.execute_sql("SELECT row_number FROM quarantine")
    assert row_number == 2
    assert [r[:3] for r in inspections(store)] == [("s1", "furnace", "crack")]


def test_the_stored_inspection_is_kept_and_a_later_other_result_quarantined(
    store, tiny_config, tmp_path
):
    measured_plant(store, tiny_config, tmp_path)
    ingest_inspections(store, tiny_config, write_inspections(tmp_path, "a.csv", GOOD))
    later = "c1,s1,furnace,bend,\nc1,s1,furnace,crack,2025-01-07T07:00:00Z\n"
    report = ingest_inspections(store, tiny_config, write_inspections(tmp_path, "b.csv", later))
    assert (report.stored, report.duplicates, dict(report.quarantined)) == (
        0,
        1,
        {"conflicting_inspection": 1},
    )
    [(_, detail)] = quarantine_reasons(store)
    assert "at furnace is stored (batch 2) with result 'crack'; this row: 'bend'" in detail
    assert [r[2] for r in inspections(store)] == ["crack"]


def test_the_same_file_twice_stores_nothing_twice(store, tiny_config, tmp_path):
    measured_plant(store, tiny_config, tmp_path)
    path = write_inspections(tmp_path, "i.csv", GOOD + "c1,s2,furnace,ok,\n")
    first = ingest_inspections(store, tiny_config, path)
    again = ingest_inspections(store, tiny_config, path)
    assert first.stored == 2 and again.stored == 0 and again.files_skipped == [str(path)]
    copy = write_inspections(tmp_path, "copy.csv", "c1,s2,furnace,ok,\n" + GOOD)
    third = ingest_inspections(store, tiny_config, copy)  # other bytes, same inspections
    assert (third.stored, third.duplicates) == (0, 2)
    assert len(inspections(store)) == 2
    kinds = store.execute_sql("SELECT DISTINCT kind FROM ingestion_batches")
    assert sorted(kinds) == [("inspections",), ("measurements",)]


def test_audit_and_lock_out_are_marked_from_the_station_flags(store, tiny_config, tmp_path):
    flags = measured_plant(store, tiny_config, tmp_path)
    body = (
        "c1,s1,furnace,crack,2025-01-06T08:00:00+01:00\n"  # locked out
        "c1,s2,furnace,ok,2025-01-06 08:00:00\n"  # passed (local time, Europe/Berlin)
        "c1,s3,furnace,bend,\n"  # unscorable
        "c1,s4,furnace,ok,\n"  # not scored
        "c1,s5,rolling,ok,\n"  # no flag at rolling
    )
    report = ingest_inspections(store, tiny_config, write_inspections(tmp_path, "i.csv", body))
    assert (report.stored, report.audit_samples) == (5, 4)
    got = {r[0]: r for r in inspections(store)}
    assert {s: (r[3], r[4]) for s, r in got.items()} == {
        "s1": (flags["s1"], False),
        "s2": (flags["s2"], True),
        "s3": (flags["s3"], True),
        "s4": (None, True),
        "s5": (None, True),
    }
    assert pd.Timestamp(got["s1"][5]).tz_localize(None) == pd.Timestamp("2025-01-06T07:00:00")
    assert pd.Timestamp(got["s2"][5]).tz_localize(None) == pd.Timestamp("2025-01-06T07:00:00")
    assert got["s3"][5] is None
    assert report.as_dict()["audit_samples"] == 4


def test_a_file_without_inspected_at_is_stored_without_a_time(store, tiny_config, tmp_path):
    measured_plant(store, tiny_config, tmp_path)
    path = write_inspections(
        tmp_path, "i.csv", "c1,s2,furnace,ok\n", header="charge_id,stick_id,station,result\n"
    )
    assert ingest_inspections(store, tiny_config, path).stored == 1
    assert inspections(store)[0][5] is None


def test_a_parquet_file_is_read_with_its_types(store, tiny_config, tmp_path):
    measured_plant(store, tiny_config, tmp_path)
    frame = pd.DataFrame(
        {
            "charge_id": ["c1", "c1"],
            "stick_id": ["s1", "s2"],
            "station": ["furnace", "furnace"],
            "result": ["crack", "ok"],
            "inspected_at": pd.to_datetime(["2025-01-06T07:00:00Z", None], utc=True),
        }
    )
    frame.to_parquet(tmp_path / "i.parquet")
    report = ingest_inspections(store, tiny_config, tmp_path / "i.parquet")
    assert (report.stored, report.audit_samples) == (2, 1)


def test_a_missing_required_column_fails_the_file_naming_it(store, tiny_config, tmp_path):
    path = write_inspections(
        tmp_path, "i.csv", "c1,s1,furnace,\n", header="charge_id,stick_id,station,verdict\n"
    )
    report = ingest_inspections(store, tiny_config, path)
    assert report.files_failed == {
        str(path): f"{path}: missing column(s) result; expected charge_id, stick_id, station, "
        "result and optionally inspected_at"
    }
    assert store.count(IngestionBatch) == 0 and inspections(store) == []
    with pytest.raises(IngestError, match="no such file or folder"):
        ingest_inspections(store, tiny_config, tmp_path / "absent")


def test_a_stick_of_a_charge_never_measured_is_unknown(store, tiny_config, tmp_path):
    measured_plant(store, tiny_config, tmp_path)
    report = ingest_inspections(
        store, tiny_config, write_inspections(tmp_path, "i.csv", "c7,s1,furnace,ok,\n")
    )
    assert dict(report.quarantined) == {"unknown_stick": 1} and inspections(store) == []
