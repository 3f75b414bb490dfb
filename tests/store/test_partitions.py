"""Monthly partitions of ``readings`` on PostgreSQL, their pruning, and retention (issue 20).

Real PostgreSQL (the session's server), real CSV files through the real ingestion.
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import create_engine

from qcllp.ingest.measurements import ingest_measurements
from qcllp.plant.config import ConfigError, parse_plant_config
from qcllp.store import Store, charge_time_bounds
from qcllp.store.migrate import upgrade
from qcllp.store.partitions import (
    detach_partition,
    ensure_partitions,
    is_partitioned,
    list_partitions,
)
from qcllp.store.retention import apply_retention
from tests.conftest import TINY_PLANT

MONTHS = ["2024-01-10T08:00:00Z", "2024-02-20T09:00:00Z", "2024-03-31T23:59:59.999978Z"]


def month_measurements(folder, charge: str, when: str, n_sticks: int = 3):
    """A long CSV: every sensor of both tiny stations for ``n_sticks`` sticks at ``when``."""
    t0 = pd.Timestamp(when)
    rows = []
    for k in range(n_sticks):
        for station, sensor, value in (
            ("furnace", "temperature", 1100.0 + k),
            ("furnace", "oxygen", 2.0 + k / 10),
            ("rolling", "force", 9000.0 + k),
            ("rolling", "temperature", 900.0 + k),
        ):
            for j in range(2):
                at = t0 + pd.Timedelta(microseconds=k * 10 + j)
                rows.append((charge, f"s{k}", station, at.isoformat(), sensor, value + j))
    path = folder / f"{charge}.csv"
    frame = pd.DataFrame(
        rows, columns=["charge_id", "stick_id", "station", "timestamp", "sensor", "value"]
    )
    frame.to_csv(path, index=False)
    return path


def _ingest_three_months(store, config, tmp_path):
    for i, when in enumerate(MONTHS):
        ingest_measurements(store, config, month_measurements(tmp_path, f"c{i}", when))


def test_ingestion_creates_the_months_it_needs_and_reads_back_exactly(
    pg_store, tiny_config, tmp_path
):
    _ingest_three_months(pg_store, tiny_config, tmp_path)
    with pg_store.engine.connect() as conn:
        assert is_partitioned(conn)
        assert [p.month for p in list_partitions(conn)] == ["2024-01", "2024-02", "2024-03"]
        # the last microsecond of March is in March, not in a partition of April
        bounds = charge_time_bounds(conn, ["c2"])
        assert bounds[1] == int(pd.Timestamp("2024-04-01T00:00:00Z").value // 1000) - 1
    readings = pg_store.read_readings(charge_ids=["c1"])
    assert len(readings) == 3 * 4 * 2
    assert readings["timestamp"].min() == pd.Timestamp("2024-02-20T09:00:00Z")
    assert len(pg_store.read_readings()) == 3 * 3 * 4 * 2


def test_a_bounded_read_touches_only_its_month(pg_store, tiny_config, tmp_path):
    _ingest_three_months(pg_store, tiny_config, tmp_path)
    with pg_store.engine.connect() as conn:
        lo, hi = charge_time_bounds(conn, ["c1"])
        plan = "\n".join(
            conn.exec_driver_sql(
                "EXPLAIN SELECT * FROM readings WHERE series_id IN (1, 2, 3) "
                f"AND ts_us BETWEEN {lo} AND {hi}"
            ).scalars()
        )
        unbounded = "\n".join(
            conn.exec_driver_sql(
                "EXPLAIN SELECT * FROM readings WHERE series_id IN (1, 2, 3)"
            ).scalars()
        )
    assert "readings_p202402" in plan
    assert "readings_p202401" not in plan and "readings_p202403" not in plan
    assert all(f"readings_p2024{m}" in unbounded for m in ("01", "02", "03"))


def test_migration_partitions_an_existing_database_and_keeps_every_reading(pg_server):
    url = pg_server.create_database("qcllp_partition_upgrade")
    engine = create_engine(url)
    upgrade(engine, "0005")
    ts = [1_704_877_200_000_000, 1_708_419_600_000_000, 1_708_419_600_000_001]  # Jan, Feb, Feb
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO series (id, station, charge_id, stick_id, sensor) VALUES "
            "(1, 'furnace', 'c0', 's0', 'oxygen'), (2, 'furnace', 'c1', 's0', 'oxygen')"
        )
        conn.exec_driver_sql(
            "INSERT INTO charges (charge_id, first_seen_us) VALUES "
            f"('c0', {ts[0]}), ('c1', {ts[1]}), ('c9', NULL)"
        )
        conn.exec_driver_sql(
            "INSERT INTO readings (series_id, ts_us, value, batch_id) VALUES "
            f"(1, {ts[0]}, 1.5, 1), (2, {ts[1]}, 2.5, 1), (2, {ts[2]}, 3.5, 1)"
        )
    upgrade(engine)
    with engine.connect() as conn:
        assert is_partitioned(conn)
        assert [p.month for p in list_partitions(conn)] == ["2024-01", "2024-02"]
        rows = conn.exec_driver_sql("SELECT * FROM readings ORDER BY ts_us").all()
        last = dict(conn.exec_driver_sql("SELECT charge_id, last_seen_us FROM charges").all())
    assert [tuple(r) for r in rows] == [(1, ts[0], 1.5, 1), (2, ts[1], 2.5, 1), (2, ts[2], 3.5, 1)]
    assert last == {"c0": ts[0], "c1": ts[2], "c9": None}
    engine.dispose()


def retention_config(tmp_path, url, **retention):
    raw = {**TINY_PLANT, "database_url": url, "retention": retention}
    return parse_plant_config(raw, base_dir=tmp_path)


def test_retention_archives_then_drops_whole_old_months(
    pg_store, pg_test_url, tiny_config, tmp_path
):
    _ingest_three_months(pg_store, tiny_config, tmp_path)
    config = retention_config(tmp_path, pg_test_url, readings_days=45, archive_dir="archive")
    now = datetime(2024, 4, 15, tzinfo=UTC)  # cutoff 2024-03-01: January and February go

    dry = apply_retention(pg_store, config, now=now, dry_run=True)
    assert dry.dropped == ["2024-01", "2024-02"] and dry.kept == ["2024-03"]
    assert len(pg_store.read_readings()) == 72  # a dry run changes nothing

    report = apply_retention(pg_store, config, now=now)
    assert report.dropped == ["2024-01", "2024-02"] and report.waiting == []
    with pg_store.engine.connect() as conn:
        assert [p.month for p in list_partitions(conn)] == ["2024-03"]
        assert list_partitions(conn, archiving=True) == []
    assert set(pg_store.read_readings()["charge_id"]) == {"c2"}

    # the archive is the measurements' long layout: it ingests back to the very same readings
    january = tmp_path / "archive" / "readings_2024-01.csv.gz"
    restored = tmp_path / "restored.csv"
    restored.write_bytes(gzip.decompress(january.read_bytes()))
    sqlite = Store.open(f"sqlite:///{tmp_path / 'restore.sqlite'}")
    ingest_measurements(sqlite, tiny_config, restored)
    original = pd.read_csv(tmp_path / "c0.csv")
    back = sqlite.read_readings()
    sqlite.close()
    assert len(back) == len(original) == 24
    assert back["timestamp"].sort_values().tolist() == sorted(
        pd.to_datetime(original["timestamp"], utc=True, format="ISO8601")
    )
    assert sorted(back["value"]) == sorted(original["value"])

    # nothing more is due; a late reading of January gets its month back and goes next time
    assert apply_retention(pg_store, config, now=now).dropped == []
    ingest_measurements(pg_store, tiny_config, month_measurements(tmp_path, "late", MONTHS[0], 1))
    assert apply_retention(pg_store, config, now=now).dropped == ["2024-01"]
    assert (tmp_path / "archive" / "readings_2024-01.2.csv.gz").exists()  # never overwritten


def test_retention_finishes_a_month_a_killed_run_left_detached(
    pg_store, pg_test_url, tiny_config, tmp_path
):
    _ingest_three_months(pg_store, tiny_config, tmp_path)
    with pg_store.write() as conn:  # what a run killed after step 1 leaves behind
        detach_partition(conn, list_partitions(conn)[0])
    assert "c0" not in set(pg_store.read_readings()["charge_id"])
    config = retention_config(tmp_path, pg_test_url, readings_days=10_000)  # nothing else due
    report = apply_retention(pg_store, config, now=datetime(2024, 4, 15, tzinfo=UTC))
    assert report.dropped == ["2024-01"] and report.archived == {}
    with pg_store.engine.connect() as conn:
        assert list_partitions(conn, archiving=True) == []
        assert len(list_partitions(conn)) == 2


def test_retention_gives_way_to_a_long_read(
    pg_store, pg_test_url, tiny_config, tmp_path, monkeypatch
):
    import qcllp.store.retention as retention

    monkeypatch.setattr(retention, "LOCK_TIMEOUT_S", 1)
    _ingest_three_months(pg_store, tiny_config, tmp_path)
    config = retention_config(tmp_path, pg_test_url, readings_days=45)
    reader = create_engine(pg_test_url)
    with reader.connect() as conn, conn.begin():
        conn.exec_driver_sql("SELECT count(*) FROM readings").scalar()  # holds its lock
        report = apply_retention(pg_store, config, now=datetime(2024, 4, 15, tzinfo=UTC))
    reader.dispose()
    assert report.dropped == [] and report.waiting == ["2024-01", "2024-02"]
    assert len(pg_store.read_readings()) == 72
    assert apply_retention(pg_store, config, now=datetime(2024, 4, 15, tzinfo=UTC)).dropped == [
        "2024-01",
        "2024-02",
    ]


def test_sqlite_has_one_readings_table_and_no_partitions(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'p.sqlite'}")
    with store.engine.begin() as conn:
        assert not is_partitioned(conn)
        assert ensure_partitions(conn, np.array([1_704_877_200_000_000])) == []
        assert list_partitions(conn) == []
    store.close()


def test_retention_is_refused_on_sqlite_and_checks_its_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"retention.readings_days.*PostgreSQL"):
        parse_plant_config({**TINY_PLANT, "retention": {"readings_days": 365}}, base_dir=tmp_path)
    pg = {**TINY_PLANT, "database_url": "postgresql+psycopg://qcllp@db/plant"}
    with pytest.raises(ConfigError, match=r"retention.readings_days.*>= 1"):
        parse_plant_config({**pg, "retention": {"readings_days": 0}}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"retention.cron"):
        parse_plant_config(
            {**pg, "retention": {"readings_days": 9, "cron": "every night"}}, base_dir=tmp_path
        )
    config = parse_plant_config(
        {**pg, "retention": {"readings_days": 730, "archive_dir": "old"}}, base_dir=tmp_path
    )
    assert config.retention.readings_days == 730
    assert config.retention.archive_dir == str((tmp_path / "old").resolve())
