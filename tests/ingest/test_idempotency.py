"""Idempotency: the same file twice, a renamed copy, overlapping exports and a folder that
grows all store every reading exactly once."""

import pandas as pd

from qcllp.ingest import ingest_measurements
from tests.ingest.helpers import accounted, stored_readings, write_csv


def _rows(start: int, stop: int) -> str:
    return "".join(
        f"c1,s{i},furnace,2025-01-06T06:{i:02d}:00Z,temperature,{1000 + i}\n"
        for i in range(start, stop)
    )


def test_same_file_twice_stores_nothing_twice(store, tiny_config, tmp_path):
    path = write_csv(tmp_path, "m.csv", _rows(0, 10))
    first = ingest_measurements(store, tiny_config, path)
    second = ingest_measurements(store, tiny_config, path)
    assert first.stored == 10 and second.stored == 0
    assert second.files_skipped == [str(path)] and second.records == 0
    assert stored_readings(store) == 10


def test_renamed_copy_is_recognized_by_checksum(store, tiny_config, tmp_path):
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "a.csv", _rows(0, 5)))
    copy = write_csv(tmp_path, "a_copy.csv", _rows(0, 5))
    report = ingest_measurements(store, tiny_config, copy)
    assert report.files_skipped == [str(copy)] and stored_readings(store) == 5


def test_overlapping_exports_count_the_overlap_as_duplicates(store, tiny_config, tmp_path):
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "a.csv", _rows(0, 10)))
    report = ingest_measurements(store, tiny_config, write_csv(tmp_path, "b.csv", _rows(5, 15)))
    assert (report.stored, report.duplicates, report.quarantined_total) == (5, 5, 0)
    assert stored_readings(store) == 15 and accounted(report)


def test_duplicate_rows_within_one_file_are_stored_once(store, tiny_config, tmp_path):
    report = ingest_measurements(
        store, tiny_config, write_csv(tmp_path, "m.csv", _rows(0, 3) * 2), chunk_rows=2
    )
    assert (report.stored, report.duplicates) == (3, 3) and stored_readings(store) == 3


def test_folder_picks_up_only_new_files(store, tiny_config, tmp_path):
    folder = tmp_path / "drop"
    folder.mkdir()
    write_csv(folder, "001.csv", _rows(0, 4))
    (folder / "002.csv.part").write_text("half written")
    first = ingest_measurements(store, tiny_config, folder)
    write_csv(folder, "002.csv", _rows(4, 8))
    second = ingest_measurements(store, tiny_config, folder)
    assert [p.rsplit("/", 1)[1] for p in first.files_ingested] == ["001.csv"]
    assert [p.rsplit("/", 1)[1] for p in second.files_ingested] == ["002.csv"]
    assert [p.rsplit("/", 1)[1] for p in second.files_skipped] == ["001.csv"]
    assert stored_readings(store) == 8


def test_sticks_and_charges_record_first_seen_as_earliest_reading(store, tiny_config, tmp_path):
    later = "c1,s1,rolling,2025-01-06T07:00:00Z,force,5000\n"
    earlier = "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1100\n"
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "a.csv", later))
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "b.csv", earlier))
    sticks = store.read_sticks()
    assert sticks["first_seen"].tolist() == [pd.Timestamp("2025-01-06 06:00", tz="UTC")]
    assert store.execute_sql("SELECT first_seen_us FROM charges") == [
        (pd.Timestamp("2025-01-06 06:00", tz="UTC").value // 1000,)
    ]
