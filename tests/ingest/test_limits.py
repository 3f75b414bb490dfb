"""What the store cannot hold and what cannot have been measured yet, on both engines.

* a count beyond the 32-bit ``INTEGER`` of its column (``n_sticks``, a defect count) is
  quarantined with its value as written -- PostgreSQL used to fail the whole file, a count of
  ``1e20`` used to wrap to ``-9223372036854775808`` with a numpy warning on stderr;
* a reading stamped later than the ingestion time plus ``connectors.future_tolerance_s`` is
  quarantined -- the year 2199 used to be stored (PostgreSQL created ``readings_p219912``);
* a long-layout file (it has a ``sensor`` column) without its ``value`` column: every row is
  quarantined as ``missing_column`` -- it used to be read as the wide layout, each row an
  ``unknown_sensor``.

Every ingestion here runs with warnings turned into errors, and the CLI cases run as real
processes whose stderr must stay empty.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import warnings
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from qcllp.ingest import IngestError, ingest_defect_counts, ingest_measurements, ingest_sql
from qcllp.ingest.measurements import read_readings
from qcllp.plant.config import ConfigError, parse_plant_config
from qcllp.store import Store
from qcllp.store.partitions import list_partitions
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import GOOD, accounted, quarantine_reasons, stored_readings, write_csv
from tests.service.forked import run_qcllp

COUNT_HEADER = "charge_id,n_sticks,crack,bend\n"
GOOD_COUNTS = "c1,20,1,1\nc3,30,0,2\n"
LARGEST = 2_147_483_647


def strict(ingest, *args, **kwargs):  # noqa: ANN001, ANN201
    """Run an ingestion with every warning an error (a numpy RuntimeWarning must not occur)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ingest(*args, **kwargs)


def stored_charges(store) -> list[tuple]:  # noqa: ANN001
    return [
        tuple(r) for r in store.execute_sql("SELECT charge_id, n_sticks FROM charges ORDER BY 1")
    ]


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------- counts beyond INTEGER
TOO_LARGE = [
    ("n_sticks", "2147483648"),
    ("n_sticks", "100000000000000000000"),
    ("n_sticks", "1e20"),
    ("crack", "2147483648"),
    ("bend", "9223372036854775808"),
    pytest.param("n_sticks", "1" + "0" * 400, id="n_sticks-401-digits"),  # a float's inf
]


@pytest.mark.parametrize(("column", "written"), TOO_LARGE)
def test_a_count_too_large_for_its_column_is_quarantined_with_its_value(
    column, written, store, tiny_config, tmp_path
):
    row = {"charge_id": "c2", "n_sticks": "20", "crack": "1", "bend": "0"} | {column: written}
    body = "c1,20,1,1\n" + ",".join(row.values()) + "\nc3,30,0,2\n"
    path = write_csv(tmp_path, "d.csv", body, header=COUNT_HEADER)
    report = strict(ingest_defect_counts, store, tiny_config, path)
    assert dict(report.quarantined) == {"count_too_large": 1}
    assert report.stored == 2 and accounted(report)
    assert quarantine_reasons(store) == [
        ("count_too_large", f"{column} {written} exceeds the largest storable {LARGEST}")
    ]
    assert stored_charges(store) == [("c1", 20), ("c3", 30)]


def test_the_largest_storable_count_is_stored(store, tiny_config, tmp_path):
    body = f"c1,{LARGEST},{LARGEST},0\n"
    path = write_csv(tmp_path, "d.csv", body, header=COUNT_HEADER)
    report = strict(ingest_defect_counts, store, tiny_config, path)
    assert report.stored == 1 and not report.quarantined
    assert stored_charges(store) == [("c1", LARGEST)]
    assert store.read_defect_counts(["crack", "bend"])["crack"].tolist() == [LARGEST]


@pytest.mark.parametrize(
    ("row", "reason", "detail"),
    [
        ("c2,-1e20,0,0\n", "non_positive_n_sticks", "n_sticks is -1e20"),
        ("c2,20,-100000000000000000000,0\n", "negative_count", "crack is -100000000000000000000"),
    ],
)
def test_a_huge_negative_count_keeps_its_value(row, reason, detail, store, tiny_config, tmp_path):
    path = write_csv(tmp_path, "d.csv", GOOD_COUNTS + row, header=COUNT_HEADER)
    report = strict(ingest_defect_counts, store, tiny_config, path)
    assert dict(report.quarantined) == {reason: 1} and report.stored == 2
    assert quarantine_reasons(store) == [(reason, detail)]


def test_a_too_large_count_from_parquet_is_quarantined(store, tiny_config, tmp_path):
    import pandas as pd

    path = tmp_path / "d.parquet"
    frame = pd.DataFrame(
        {"charge_id": ["c1", "c2"], "n_sticks": [20, 2**40], "crack": [1, 0], "bend": [0, 0]}
    )
    frame.to_parquet(path)
    report = strict(ingest_defect_counts, store, tiny_config, path)
    assert dict(report.quarantined) == {"count_too_large": 1} and report.stored == 1
    assert quarantine_reasons(store) == [
        ("count_too_large", f"n_sticks {2**40} exceeds the largest storable {LARGEST}")
    ]


# ------------------------------------------------------------------- readings from the future
def test_readings_beyond_the_future_tolerance_are_quarantined(store, tiny_config, tmp_path):
    now = datetime.now(UTC)
    soon, later = iso(now + timedelta(hours=1)), iso(now + timedelta(days=2))
    body = (
        GOOD
        + f"c1,s2,furnace,{soon},temperature,1100\n"
        + f"c1,s3,furnace,{later},temperature,1100\n"
        + "c1,s4,furnace,2199-12-31T00:00:00Z,temperature,1100\n"
    )
    before = _partition_names(store)
    report = strict(ingest_measurements, store, tiny_config, write_csv(tmp_path, "m.csv", body))
    assert report.stored == 2 and dict(report.quarantined) == {"future_timestamp": 2}
    assert accounted(report) and stored_readings(store) == 2
    details = [d for _, d in quarantine_reasons(store)]
    for written, detail in zip([later, "2199-12-31T00:00:00Z"], details, strict=True):
        assert detail.startswith(f"timestamp '{written}' is after 20"), detail
        assert "connectors.future_tolerance_s 86400 s" in detail
    new_partitions = _partition_names(store) - before
    assert not [name for name in new_partitions if name >= "readings_p2027"], new_partitions


def _partition_names(store) -> set[str]:  # noqa: ANN001
    with store.engine.connect() as conn:
        return {p.name for p in list_partitions(conn)}


def test_the_future_tolerance_comes_from_the_config(store, tmp_path):
    config = parse_plant_config(
        dict(TINY_PLANT, connectors={"future_tolerance_s": 60}), source="<t>", base_dir=tmp_path
    )
    now = datetime.now(UTC)
    body = (
        f"c1,s1,furnace,{iso(now - timedelta(minutes=5))},temperature,1100\n"
        f"c1,s2,furnace,{iso(now + timedelta(minutes=10))},temperature,1100\n"
    )
    report = strict(ingest_measurements, store, config, write_csv(tmp_path, "m.csv", body))
    assert report.stored == 1 and dict(report.quarantined) == {"future_timestamp": 1}
    assert "connectors.future_tolerance_s 60 s" in quarantine_reasons(store)[0][1]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1, "must be >= 0, got -1"),
        ("1d", "must be a number, got str '1d'"),
        (10**9, "must be at most 2678400 (31 days), got 1000000000"),
    ],
)
def test_a_bad_future_tolerance_is_a_config_error(value, problem, tmp_path):
    raw = dict(TINY_PLANT, connectors={"future_tolerance_s": value})
    with pytest.raises(ConfigError) as error:
        parse_plant_config(raw, source="<t>", base_dir=tmp_path)
    assert f"connectors.future_tolerance_s: {problem}" in str(error.value)


# ------------------------------------------------------------------- long file without value
NO_VALUE_HEADER = "charge_id,stick_id,station,timestamp,sensor\n"
NO_VALUE_ROWS = (
    "c1,s1,furnace,2025-01-06T06:00:00Z,temperature\nc1,s2,furnace,2025-01-06T06:00:01Z,oxygen\n"
)
NO_VALUE_DETAIL = (
    "the file has a sensor column but no value column (long layout: charge_id, stick_id, "
    "station, timestamp, sensor, value)"
)


@pytest.mark.parametrize("layout", [None, "long"])
def test_a_long_file_without_its_value_column_quarantines_every_row(
    layout, store, tiny_config, tmp_path
):
    path = write_csv(tmp_path, "m.csv", NO_VALUE_ROWS + "c1,s3\n", header=NO_VALUE_HEADER)
    report = strict(ingest_measurements, store, tiny_config, path, layout=layout)
    assert report.records == 3 and report.stored == 0 and accounted(report)
    assert dict(report.quarantined) == {"missing_column": 2, "malformed_row": 1}
    reasons = quarantine_reasons(store)
    assert reasons[1:] == [("missing_column", NO_VALUE_DETAIL)] * 2, reasons
    rows = store.execute_sql(
        "SELECT row_number, raw FROM quarantine WHERE reason = 'missing_column' ORDER BY id"
    )
    [(first, raw_first), (second, raw_second)] = rows
    assert (first, second) == (1, 2)
    assert '"sensor":"temperature"' in raw_first and '"stick_id":"s2"' in raw_second


def test_scoring_a_file_without_its_value_column_names_the_column(tiny_config, tmp_path):
    path = write_csv(tmp_path, "m.csv", NO_VALUE_ROWS, header=NO_VALUE_HEADER)
    with pytest.raises(IngestError) as error:
        read_readings(tiny_config, path)
    assert str(error.value) == f"{path}: {NO_VALUE_DETAIL}"


# ------------------------------------------------------------------- the CLI, a real process
def qcllp(store_url: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``qcllp --db URL --config tiny.yaml ARGS`` as a real process (stderr as it is)."""
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_PLANT))
    env = {k: v for k, v in os.environ.items() if k != "QCLLP_CONFIG"}
    return run_qcllp(["--config", str(config), "--db", store_url, *args], cwd=folder, env=env)


def test_the_cli_quarantines_huge_counts_and_future_readings_silently(store_url, tmp_path):
    counts = write_csv(
        tmp_path,
        "d.csv",
        "c1,20,1,1\nc2,2147483648,0,0\nc4,1e20,0,0\nc3,30,0,2\n",
        header=COUNT_HEADER,
    )
    result = qcllp(store_url, tmp_path, "ingest", "defects", str(counts))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == (
        "defect_counts: 4 records, 2 stored, 0 duplicates, 2 quarantined (count_too_large: 2)"
    )
    body = GOOD + "c1,s4,furnace,2199-12-31T00:00:00Z,temperature,1100\n"
    readings = write_csv(tmp_path, "m.csv", body)
    result = qcllp(store_url, tmp_path, "ingest", "measurements", str(readings))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == (
        "measurements: 2 records, 1 stored, 0 duplicates, 1 quarantined (future_timestamp: 1)"
    )
    missing = write_csv(tmp_path, "n.csv", NO_VALUE_ROWS, header=NO_VALUE_HEADER)
    result = qcllp(store_url, tmp_path, "ingest", "measurements", str(missing))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == (
        "measurements: 2 records, 0 stored, 0 duplicates, 2 quarantined (missing_column: 2)"
    )
    with Store.open(store_url) as store:  # rows in: 4 + 2 + 2 = stored 2 + 1, quarantined 5
        assert stored_charges(store) == [("c1", 20), ("c3", 30)] and stored_readings(store) == 1
        reasons = [reason for reason, _ in quarantine_reasons(store)]
    assert reasons == ["count_too_large"] * 2 + ["future_timestamp"] + ["missing_column"] * 2


# ------------------------------------------------------------------- a SQL source
def test_a_future_reading_does_not_move_a_timestamp_watermark(store, tiny_config, tmp_path):
    """The source's later rows are still read after a reading stamped 2199 (it used to set the
    watermark to 2199: nothing after it was ever read again)."""
    source = tmp_path / "historian.sqlite"
    spec = {"name": "hist", "url": f"sqlite:///{source}", "table": "r", "watermark": "timestamp"}
    _historian(source, [("s1", "2025-01-06T06:00:00Z"), ("s2", "2199-12-31T00:00:00Z")])
    first = strict(ingest_sql, store, tiny_config, spec)
    assert (first.stored, dict(first.quarantined)) == (1, {"future_timestamp": 1})
    _historian(source, [("s3", "2025-01-07T06:00:00Z")])
    second = strict(ingest_sql, store, tiny_config, spec)
    assert (second.stored, second.duplicates) == (1, 1) and accounted(second)
    sticks = store.execute_sql("SELECT stick_id FROM series ORDER BY stick_id")
    assert [s for (s,) in sticks] == ["s1", "s3"]
    [(mark,)] = store.execute_sql("SELECT value FROM watermarks WHERE source_name = 'hist'")
    assert "2025-01-07T06:00:00Z" in mark


def _historian(path: Path, rows: list[tuple[str, str]]) -> None:
    """Add readings (stick, timestamp) of c1 at the furnace to the source table ``r``."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS r (charge_id, stick_id, station, timestamp, sensor, value)"
        )
        conn.executemany("INSERT INTO r VALUES ('c1', ?, 'furnace', ?, 'temperature', 1100)", rows)
