"""Formats: wide and long layouts, CSV and Parquet, naive and offset timestamps all land as the
same readings."""

import pandas as pd
import pytest

from qcllp.ingest import IngestError, ingest_measurements
from qcllp.ingest.measurements import read_readings
from tests.ingest.helpers import accounted, write_csv

WIDE_HEADER = "charge_id,stick_id,station,timestamp,temperature,oxygen,force\n"
WIDE = (
    "c1,s1,furnace,2025-01-06T06:00:00Z,1100,2.5,\n"
    "c1,s1,rolling,2025-01-06T06:05:00Z,1000,,5000\n"
    "c1,s2,furnace,2025-01-06T06:01:00Z,,,\n"
    "c1,s2,furnace,2025-01-06T06:02:00Z,1000,,7000\n"
)
LONG = (
    "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1100\n"
    "c1,s1,furnace,2025-01-06T06:00:00Z,oxygen,2.5\n"
    "c1,s1,rolling,2025-01-06T06:05:00Z,temperature,1000\n"
    "c1,s1,rolling,2025-01-06T06:05:00Z,force,5000\n"
    "c1,s2,furnace,2025-01-06T06:02:00Z,temperature,1000\n"
)


def test_wide_file_stores_the_same_readings_as_long(store, tiny_config, tmp_path):
    report = ingest_measurements(
        store, tiny_config, write_csv(tmp_path, "w.csv", WIDE, header=WIDE_HEADER)
    )
    # 5 valid cells, the all-empty row, and force at the furnace (not a furnace sensor)
    assert report.stored == 5 and accounted(report) and report.records == 7
    assert dict(report.quarantined) == {"missing_value": 1, "unknown_sensor": 1}
    quarantined = store.read_quarantine().sort_values("row_number")
    assert quarantined["row_number"].tolist() == [3, 4]
    assert quarantined["detail"].tolist() == [
        "all sensor cells are empty",
        "force: station 'furnace' has no sensor 'force'; known: temperature, oxygen",
    ]
    wide = store.read_readings()
    long_store_path = tmp_path / "long"
    long_store_path.mkdir()
    from qcllp.store import Store

    other = Store.open(f"sqlite:///{long_store_path / 'l.sqlite'}")
    ingest_measurements(other, tiny_config, write_csv(tmp_path, "l.csv", LONG))
    pd.testing.assert_frame_equal(wide, other.read_readings())
    other.close()


def test_parquet_with_typed_columns_and_naive_local_times(store, tiny_config, tmp_path):
    frame = pd.DataFrame(
        {
            "charge_id": ["c1", "c1", "c1"],
            "stick_id": ["s1", "s1", "s1"],
            "station": ["furnace", "furnace", "furnace"],
            "timestamp": pd.to_datetime(["2025-07-01 08:00", "2025-07-01 08:01", None]),
            "sensor": ["temperature", "oxygen", "oxygen"],
            "value": [1100.0, 99.0, 1.0],
        }
    )
    path = tmp_path / "m.parquet"
    frame.to_parquet(path)
    report = ingest_measurements(store, tiny_config, path)
    assert report.stored == 1 and accounted(report)
    assert dict(report.quarantined) == {"value_out_of_range": 1, "missing_timestamp": 1}
    # naive times are plant-local (Europe/Berlin, UTC+2 in July)
    assert store.read_readings()["timestamp"].tolist() == [
        pd.Timestamp("2025-07-01 06:00", tz="UTC")
    ]


@pytest.mark.parametrize(
    "stamp",
    ["2025-01-06T07:00:00+01:00", "2025-01-06T06:00:00Z", "2025-01-06 07:00:00",
     "2025-01-06T06:00:00.000+00:00"],
)  # fmt: skip
def test_timestamps_with_offset_or_plant_local_are_the_same_instant(stamp, tiny_config, tmp_path):
    from qcllp.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'p.sqlite'}")
    body = f"c1,s1,furnace,{stamp},temperature,1100\n"
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "m.csv", body))
    assert store.read_readings()["timestamp"].tolist() == [pd.Timestamp("2025-01-06 06:00Z")]
    store.close()


def test_file_without_required_columns_fails_whole_and_others_go_on(store, tiny_config, tmp_path):
    folder = tmp_path / "drop"
    folder.mkdir()
    write_csv(
        folder, "a.csv", "c1,s1,furnace,temperature\n", header="charge_id,stick_id,station,x\n"
    )
    write_csv(folder, "b.csv", "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1100\n")
    report = ingest_measurements(store, tiny_config, folder)
    [(failed, message)] = report.files_failed.items()
    assert failed.endswith("a.csv") and "missing column(s) timestamp" in message
    assert report.stored == 1


def test_reading_a_file_without_storing_checks_it_as_ingest_does(tiny_config, tmp_path):
    long = read_readings(tiny_config, write_csv(tmp_path, "l.csv", LONG))
    assert len(long) == 5 and str(long["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert long["value"].tolist() == [1100.0, 2.5, 1000.0, 5000.0, 1000.0]
    with pytest.raises(IngestError) as excinfo:
        read_readings(tiny_config, write_csv(tmp_path, "w.csv", WIDE, header=WIDE_HEADER))
    message = str(excinfo.value)
    assert "w.csv: 2 of 7 records invalid, nothing scored; " in message
    assert "row 3: missing_value: all sensor cells are empty; " in message
    assert "row 4: unknown_sensor: force: station 'furnace' has no sensor 'force'" in message


def test_reading_a_file_counts_a_repeated_reading_once_and_refuses_a_conflicting_one(
    tiny_config, tmp_path
):
    repeated = LONG + "c1,s1,furnace,2025-01-06T06:00:00Z,oxygen,2.5\n"
    long = read_readings(tiny_config, write_csv(tmp_path, "r.csv", repeated))
    assert long["value"].tolist() == [1100.0, 2.5, 1000.0, 5000.0, 1000.0]
    conflicting = repeated + "c1,s2,furnace,2025-01-06T06:02:00Z,temperature,1010\n"
    with pytest.raises(IngestError) as excinfo:
        read_readings(tiny_config, write_csv(tmp_path, "c.csv", conflicting))
    message = str(excinfo.value)
    assert "c.csv: 1 of 7 records invalid, nothing scored; " in message
    assert (
        "row 7: conflicting_duplicate: temperature: row 5 of this file has the same key "
        "with value 1000.0" in message
    )
    wide = (
        "".join(WIDE.splitlines(keepends=True)[:2]) + "c1,s1,rolling,2025-01-06T06:05:00Z,,,5001\n"
    )
    with pytest.raises(
        IngestError, match="1 of 5 records .* row 3: conflicting_duplicate: force: row 2 "
    ):
        read_readings(tiny_config, write_csv(tmp_path, "w.csv", wide, header=WIDE_HEADER))
