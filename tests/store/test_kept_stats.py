"""The series statistics kept at ingest (``stick_stats``), on SQLite and PostgreSQL, through
the real ingestion of real files: readings split over files (a series spanning several), a
file re-sent with new and already stored rows, then the statistics read back give the
features of the readings within 1e-9, and equal what ``qcllp features rebuild`` computes
from the readings. The migration that creates the table fills it from the readings already
stored; retention's drop of a month takes its series' statistics with it, so the month's
archive ingested again is counted once."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine

from qcllp.cli import main
from qcllp.features import (
    apply_imputation,
    build_station_features,
    build_station_features_from_stats,
    features_of_sticks,
    station_features,
    station_pairs,
)
from qcllp.ingest.measurements import ingest_measurements
from qcllp.plant.config import load_plant_config
from qcllp.plant.simulate import simulate_plant
from qcllp.store import Store
from qcllp.store.kept_stats import (
    fetch_stick_stats,
    read_series_stats,
    rebuild_series_stats,
    stats_count,
)
from qcllp.store.migrate import upgrade
from qcllp.store.retention import apply_retention
from qcllp.store.series_stats import RECORD, STAT_COLUMNS, STATS_VERSION
from tests.store.test_partitions import _ingest_three_months, retention_config
from tests.support.plants import ROOT

RTOL = 1e-9
STATIONS = ["furnace", "rolling", "cooling"]


@pytest.fixture(scope="module")
def example():
    return load_plant_config(ROOT / "plant_config" / "example.yaml")


def write_files(readings: pd.DataFrame, folder, parts: int = 3) -> list:
    """The readings in ``parts`` CSV files, each row in a random one: series span files."""
    which = np.random.default_rng(1).integers(0, parts, len(readings))
    paths = []
    for k in range(parts):
        path = folder / f"part{k}.csv"
        readings[which == k].to_csv(path, index=False)
        paths.append(path)
    return paths


def stats_of(store: Store, stations) -> pd.DataFrame:
    with store.engine.connect() as conn:
        frame = read_series_stats(conn, stations)
    return frame.sort_values(["station", "charge_id", "stick_id", "sensor"], ignore_index=True)


def assert_close_frames(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(
        got.drop(columns=list(STAT_COLUMNS)), want.drop(columns=list(STAT_COLUMNS))
    )
    for column in STAT_COLUMNS:
        a, b = got[column].to_numpy(float), want[column].to_numpy(float)
        scale = np.abs(b).max() if len(b) else 0.0
        assert np.all(np.abs(a - b) <= RTOL * (np.abs(b) + scale)), column


def test_kept_statistics_give_the_features_of_the_readings(store, example, tmp_path):
    plant = simulate_plant(example, 6, random_state=2, missing_rate=0.1)
    paths = write_files(plant.readings, tmp_path)
    for path in paths:
        ingest_measurements(store, example, path)
    resent = tmp_path / "resent.csv"  # a third of part 0 again, and a late reading
    again = pd.read_csv(paths[0]).iloc[::3]
    late = again.iloc[:1].copy()
    late["timestamp"] = (pd.to_datetime(late["timestamp"]) + pd.Timedelta(hours=1)).astype(str)
    pd.concat([again, late]).to_csv(resent, index=False)
    report = ingest_measurements(store, example, resent)
    assert report.duplicates == len(again) and report.stored == 1

    kept = stats_of(store, STATIONS)
    readings = store.read_readings(stations=STATIONS)
    for station in STATIONS:
        raw = build_station_features(readings, example, station)
        ours = build_station_features_from_stats(kept, example, station)
        assert ours.X.index.equals(raw.X.index)
        want = raw.X.to_numpy()
        scale = np.abs(want).max(axis=0)
        assert np.all(np.abs(ours.X.to_numpy() - want) <= RTOL * (np.abs(want) + scale))
    assert kept["n"].sum() == len(readings)  # every reading counted once
    every = stats_of(store, example.station_names)
    with store.engine.connect() as conn:  # one row per stick and station, a record per series
        rows = conn.exec_driver_sql("SELECT count(*) FROM stick_stats").scalar()
        assert stats_count(conn) == len(every)
    assert rows == len(every[["station", "charge_id", "stick_id"]].drop_duplicates()) < len(every)

    with store.write() as conn:  # the rebuild from the readings writes the same rows
        rebuild_series_stats(conn)
    assert_close_frames(stats_of(store, STATIONS), kept)


def test_features_rebuild_recomputes_every_series_from_its_readings(
    store, store_url, example, tmp_path
):
    plant = simulate_plant(example, 3, random_state=4)
    for path in write_files(plant.readings, tmp_path, parts=2):
        ingest_measurements(store, example, path)
    kept = stats_of(store, example.station_names)
    with store.engine.begin() as conn:  # rows gone wrong: each given the first one's records
        conn.exec_driver_sql(
            "UPDATE stick_stats SET stats = (SELECT stats FROM stick_stats "
            "ORDER BY station, charge_id, stick_id LIMIT 1)"
        )
        conn.exec_driver_sql("DELETE FROM stick_stats WHERE station = 'furnace'")  # and lost
    assert not stats_of(store, example.station_names).equals(kept)
    args = ["--config", str(ROOT / "plant_config" / "example.yaml"), "--db", store_url]
    done = CliRunner().invoke(main, [*args, "features", "rebuild"])
    assert done.exit_code == 0, done.output
    series = kept.shape[0]
    assert done.output.startswith(f"rebuilt the statistics of {series:,} series from their")
    assert_close_frames(stats_of(store, example.station_names), kept)


def test_the_migration_computes_the_statistics_of_the_readings_already_stored(
    store_url, example, tmp_path
):
    store = Store.open(store_url)
    plant = simulate_plant(example, 2, random_state=5)
    for path in write_files(plant.readings, tmp_path, parts=2):
        ingest_measurements(store, example, path)
    kept = stats_of(store, example.station_names)
    store.close()
    engine = create_engine(store_url)
    with engine.begin() as conn:  # the database as revision 0010 left it
        for table in ("flag_deliveries", "stick_stats", "sensor_codes"):  # 0012's, 0013's
            conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0010'")
    upgrade(engine)
    engine.dispose()
    store = Store.open(store_url)
    assert_close_frames(stats_of(store, example.station_names), kept)
    store.close()


def test_a_dropped_month_takes_its_statistics_and_its_archive_counts_once(
    pg_store, pg_test_url, tiny_config, tmp_path
):
    _ingest_three_months(pg_store, tiny_config, tmp_path)
    stations = tiny_config.station_names
    before = stats_of(pg_store, stations)
    config = retention_config(tmp_path, pg_test_url, readings_days=45, archive_dir="archive")
    apply_retention(pg_store, config, now=datetime(2024, 4, 15, tzinfo=UTC))
    after = stats_of(pg_store, stations)
    assert set(after["charge_id"]) == {"c2"}  # January's and February's series went
    assert_close_frames(after, before[before["charge_id"] == "c2"].reset_index(drop=True))

    january = tmp_path / "restored.csv"
    january.write_bytes(
        gzip.decompress((tmp_path / "archive" / "readings_2024-01.csv.gz").read_bytes())
    )
    ingest_measurements(pg_store, tiny_config, january)
    back = stats_of(pg_store, stations)
    assert_close_frames(
        back, before[before["charge_id"] != "c1"].reset_index(drop=True)
    )  # counted once, as before the drop
    with pg_store.engine.connect() as conn:
        assert stats_count(conn) == len(back)


def test_a_scorers_read_of_its_sticks_gives_the_table_training_reads(store, example, tmp_path):
    """What a scorer reads for the sticks it decides (``fetch_stick_stats``, coded by the
    sticks' positions in the order asked, unknown sticks included) builds, row for row, the
    table training reads by charge, with the same imputation; and names no stick twice."""
    plant = simulate_plant(example, 4, random_state=6, missing_rate=0.15)
    for path in write_files(plant.readings, tmp_path):
        ingest_measurements(store, example, path)
    station = "cooling"
    trained = station_features(store, example, station)
    sticks = list(trained.X.index)
    order = np.random.default_rng(3).permutation(len(sticks))
    asked = [sticks[i] for i in order[:40]] + [("C-none", "C-none-01")] + [sticks[order[-1]]]
    pairs = station_pairs(example, station)
    with store.engine.connect() as conn:
        stats = fetch_stick_stats(conn, asked, pairs)
        assert len(fetch_stick_stats(conn, [], pairs)) == 0
    assert np.all(np.diff(stats.ids) > 0)  # sorted, one row per stick and pair
    got = features_of_sticks(stats, asked, example, station, imputation=trained.imputation).X
    assert list(got.index) == asked
    want = trained.X.reindex(pd.MultiIndex.from_tuples(asked, names=trained.X.index.names))
    none = ("C-none", "C-none-01")  # no series: no readings counted, every sensor missing
    want.loc[none, [c for c in want.columns if c.endswith(".count")]] = 0.0
    want.loc[none, [c for c in want.columns if c.endswith(".missing")]] = 1.0
    want = apply_imputation(want, trained.imputation)  # and the rest the imputation's
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12, atol=0)


def test_reads_refuse_statistics_of_another_version(store, example, tmp_path):
    plant = simulate_plant(example, 1, random_state=7)
    for path in write_files(plant.readings, tmp_path, parts=1):
        ingest_measurements(store, example, path)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE stick_stats SET version = version + 1")
    ids = plant.readings[["charge_id", "stick_id"]].drop_duplicates()
    sticks = list(ids.itertuples(index=False, name=None))
    with store.engine.connect() as conn, pytest.raises(ValueError, match="features rebuild"):
        fetch_stick_stats(conn, sticks, station_pairs(example, "rolling"))
    with store.engine.connect() as conn, pytest.raises(ValueError, match="features rebuild"):
        read_series_stats(conn, ["rolling"])  # training's read refuses them alike


def test_a_batch_into_rows_of_another_version_rebuilds_them_from_the_readings(
    store, example, tmp_path
):
    """Rows kept under another definition are not merged into: the sticks a new batch
    touches are recomputed from all their readings, the new ones included; the others stay
    as they were, and a read still refuses them."""
    plant = simulate_plant(example, 3, random_state=8)
    first, second = write_files(plant.readings, tmp_path, parts=2)
    ingest_measurements(store, example, first)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE stick_stats SET version = version + 1")
    later = pd.read_csv(second)
    touched = later["charge_id"] == later["charge_id"].iloc[0]  # one charge's share
    later[touched].to_csv(tmp_path / "one.csv", index=False)
    ingest_measurements(store, example, tmp_path / "one.csv")
    with store.engine.connect() as conn:
        versions = conn.exec_driver_sql(
            "SELECT charge_id, station, stick_id, version, stats FROM stick_stats"
        ).all()
    charge = later["charge_id"].iloc[0]
    sticks = set(later[touched][["station", "stick_id"]].itertuples(index=False, name=None))
    readings = store.read_readings(stations=example.station_names)
    counted = readings.groupby(["charge_id", "station", "stick_id"]).size()
    for charge_id, station, stick, version, stats in versions:
        rebuilt = charge_id == charge and (station, stick) in sticks
        assert (version == STATS_VERSION) == rebuilt, (charge_id, station, stick)
        if rebuilt:  # all of its readings, the first file's as well as the new ones
            n = np.frombuffer(stats, dtype=RECORD)["n"].sum()
            assert n == counted[(charge_id, station, stick)]
    with store.engine.connect() as conn, pytest.raises(ValueError, match="features rebuild"):
        read_series_stats(conn, STATIONS)
    with store.write() as conn:
        rebuild_series_stats(conn)
    kept = stats_of(store, STATIONS)
    readings = store.read_readings(stations=STATIONS)
    for station in STATIONS:
        raw = build_station_features(readings, example, station).X
        ours = build_station_features_from_stats(kept, example, station).X
        assert ours.index.equals(raw.index)
        np.testing.assert_allclose(ours.to_numpy(), raw.to_numpy(), rtol=1e-9, atol=1e-9)
