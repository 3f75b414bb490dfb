"""One test per quarantine reason: the bad row is quarantined with that reason and a readable
detail, the good row next to it is stored, and every record is accounted for."""

import pytest

from qcllp.ingest import REASONS, ingest_defect_counts, ingest_measurements
from tests.ingest.helpers import GOOD, accounted, quarantine_reasons, stored_readings, write_csv

MEASUREMENT_CASES = {
    "malformed_row": ("c1,s2,furnace,2025-01-06T06:00:00Z,temperature\n", "expected 6 fields"),
    "missing_id": (",s2,furnace,2025-01-06T06:00:00Z,temperature,1100\n", "charge_id is empty"),
    "missing_timestamp": ("c1,s2,furnace,,temperature,1100\n", "timestamp is empty"),
    "unparseable_timestamp": ("c1,s2,furnace,06/01/2025 6am,temperature,1100\n", "ISO 8601"),
    "unknown_station": ("c1,s2,oven,2025-01-06T06:00:00Z,temperature,1100\n", "known: furnace"),
    "unknown_sensor": ("c1,s2,furnace,2025-01-06T06:00:00Z,force,1100\n", "no sensor 'force'"),
    "missing_value": ("c1,s2,furnace,2025-01-06T06:00:00Z,temperature,\n", "value is empty"),
    "non_numeric_value": ("c1,s2,furnace,2025-01-06T06:00:00Z,temperature,hot\n", "'hot'"),
    "value_out_of_range": (
        "c1,s2,furnace,2025-01-06T06:00:00Z,temperature,1500\n",
        "outside [900, 1300] degC of furnace.temperature",
    ),
    "conflicting_duplicate": (
        "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1101\n",
        "same key with value 1100.0",
    ),
}


@pytest.mark.parametrize("reason", sorted(MEASUREMENT_CASES))
def test_bad_reading_is_quarantined_with_its_reason(reason, store, tiny_config, tmp_path):
    bad, detail = MEASUREMENT_CASES[reason]
    report = ingest_measurements(store, tiny_config, write_csv(tmp_path, "m.csv", GOOD + bad))
    assert report.stored == 1 and dict(report.quarantined) == {reason: 1}
    assert accounted(report) and report.records == 2
    assert stored_readings(store) == 1
    [(stored_reason, stored_detail)] = quarantine_reasons(store)
    assert stored_reason == reason and detail in stored_detail
    assert reason in REASONS


def test_nonexistent_local_time_at_dst_change_is_quarantined_not_guessed(
    store, tiny_config, tmp_path
):
    # 2025-03-30 02:30 does not exist in Europe/Berlin (clocks jump 02:00 -> 03:00)
    path = write_csv(tmp_path, "m.csv", "c1,s1,furnace,2025-03-30 02:30:00,temperature,1100\n")
    report = ingest_measurements(store, tiny_config, path)
    assert dict(report.quarantined) == {"unparseable_timestamp": 1}
    assert "does not exist or is ambiguous in Europe/Berlin" in quarantine_reasons(store)[0][1]


def test_conflicting_duplicate_across_files_keeps_the_stored_value(store, tiny_config, tmp_path):
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "a.csv", GOOD))
    changed = GOOD.replace("1100", "1200")
    report = ingest_measurements(store, tiny_config, write_csv(tmp_path, "b.csv", changed))
    assert dict(report.quarantined) == {"conflicting_duplicate": 1} and report.stored == 0
    assert store.read_readings()["value"].tolist() == [1100.0]
    assert "stored with value 1100.0" in quarantine_reasons(store)[0][1]


def test_quarantine_keeps_the_raw_row_and_its_row_number(store, tiny_config, tmp_path):
    path = write_csv(tmp_path, "m.csv", GOOD + GOOD.replace("c1", "c2") + "c3,s1,oven,x,y,z\n")
    ingest_measurements(store, tiny_config, path)
    [(row_number, raw, source)] = store.execute_sql(
        "SELECT row_number, raw, source FROM quarantine"
    )
    assert row_number == 3 and source == str(path)
    assert '"station":"oven"' in raw and '"value":"z"' in raw


COUNT_HEADER = "charge_id,n_sticks,crack,bend\n"
COUNT_CASES = {
    "missing_id": (",20,1,1\n", "charge_id is empty"),
    "non_numeric_count": ("c2,20,1.5,x\n", "crack '1.5' is not a whole number"),
    "non_positive_n_sticks": ("c2,0,0,0\n", "n_sticks is 0"),
    "negative_count": ("c2,20,-1,0\n", "crack is -1"),
    "counts_exceed_n_sticks": ("c2,5,3,3\n", "add up to 6 > n_sticks 5"),
    "conflicting_counts": ("c1,20,2,1\n", "reported earlier in this input with n_sticks=20"),
}


@pytest.mark.parametrize("reason", sorted(COUNT_CASES))
def test_bad_count_row_is_quarantined_with_its_reason(reason, store, tiny_config, tmp_path):
    bad, detail = COUNT_CASES[reason]
    path = write_csv(tmp_path, "d.csv", "c1,20,1,2\n" + bad, header=COUNT_HEADER)
    report = ingest_defect_counts(store, tiny_config, path)
    assert report.stored == 1 and dict(report.quarantined) == {reason: 1}
    assert accounted(report)
    [(stored_reason, stored_detail)] = quarantine_reasons(store)
    assert stored_reason == reason and detail in stored_detail


def test_charge_reported_again_with_other_counts_is_a_conflict_never_an_overwrite(
    store, tiny_config, tmp_path
):
    first = write_csv(tmp_path, "d1.csv", "c1,20,1,2\nc2,10,0,0\n", header=COUNT_HEADER)
    again = write_csv(tmp_path, "d2.csv", "c1,20,1,2\nc2,10,3,0\n", header=COUNT_HEADER)
    ingest_defect_counts(store, tiny_config, first)
    report = ingest_defect_counts(store, tiny_config, again)
    assert report.duplicates == 1 and dict(report.quarantined) == {"conflicting_counts": 1}
    counts = store.read_defect_counts(tiny_config.defect_types)
    assert counts.index.tolist() == ["c1"]  # c2 is held back until a person resolves it
    [(charge, n, stored)] = store.execute_sql(
        "SELECT charge_id, n_sticks, counts FROM defect_count_conflicts"
    )
    assert charge == "c2" and n == 10 and '"crack": 3' in str(stored).replace("'", '"')
    assert store.execute_sql("SELECT count FROM defect_counts WHERE charge_id = 'c2' "
                             "AND defect_type = 'crack'") == [(0,)]  # fmt: skip


@pytest.mark.parametrize(
    ("header", "message"),
    [("charge_id,n_sticks,crack\n", "missing column(s) bend"),
     ("charge_id,n_sticks,crack,bend,dent\n", "unknown column(s) dent")],
)  # fmt: skip
def test_count_file_with_wrong_defect_columns_fails_whole(
    header, message, store, tiny_config, tmp_path
):
    path = write_csv(tmp_path, "d.csv", "c1,20,1,2,0\n", header=header)
    report = ingest_defect_counts(store, tiny_config, path)
    assert message in report.files_failed[str(path)] and report.stored == 0
    assert store.read_defect_counts(tiny_config.defect_types).empty


def test_store_lists_batches_and_quarantine_for_reports(store, tiny_config, tmp_path):
    bad = "c1,s2,oven,2025-01-06T06:00:00Z,temperature,1100\n"
    report = ingest_measurements(store, tiny_config, write_csv(tmp_path, "m.csv", GOOD + bad))
    batches = store.read_batches("measurements")
    assert batches["id"].tolist() == report.batches
    row = batches.iloc[0]
    assert (row["status"], row["rows_read"], row["rows_stored"], row["rows_quarantined"]) == (
        "done",
        2,
        1,
        1,
    )
    quarantine = store.read_quarantine(batch_id=report.batches[0])
    assert quarantine["reason"].tolist() == ["unknown_station"]
    assert store.read_quarantine(reason="missing_id").empty
