"""Station features: correct aggregates, no leakage of later stations, recorded imputation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qcllp.features import (
    SENSOR_STATS,
    apply_imputation,
    build_station_features,
    feature_names,
    station_features,
)
from qcllp.plant import ConfigError, simulate_plant, write_simulation


@pytest.fixture(scope="module")
def sim(config):
    return simulate_plant(config, 12, random_state=5)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(
        rows, columns=["charge_id", "stick_id", "station", "timestamp", "sensor", "value"]
    )
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    return frame


def test_aggregates_of_one_series_match_a_hand_computation(tiny_config):
    # furnace temperature of stick s1: 1000 @ 0 s, 1030 @ 60 s, 1010 @ 120 s (rows unsorted)
    readings = _frame(
        [
            ("c1", "s1", "furnace", "2026-01-01T00:02:00Z", "temperature", 1010.0),
            ("c1", "s1", "furnace", "2026-01-01T00:00:00Z", "temperature", 1000.0),
            ("c1", "s1", "furnace", "2026-01-01T00:01:00Z", "temperature", 1030.0),
            ("c1", "s1", "furnace", "2026-01-01T00:00:30Z", "oxygen", 2.0),
            ("c1", "s2", "furnace", "2026-01-01T00:05:00Z", "temperature", 1100.0),
            ("c1", "s2", "furnace", "2026-01-01T00:05:00Z", "oxygen", 3.0),
        ]
    )
    f = build_station_features(readings, tiny_config, "furnace")
    row = f.X.loc[("c1", "s1")]
    values = np.array([1000.0, 1030.0, 1010.0])
    assert row["furnace.temperature.mean"] == pytest.approx(values.mean())
    assert row["furnace.temperature.std"] == pytest.approx(values.std())  # ddof=0
    assert row["furnace.temperature.min"] == 1000.0
    assert row["furnace.temperature.max"] == 1030.0
    assert row["furnace.temperature.last"] == 1010.0  # latest timestamp, not last row
    assert row["furnace.temperature.count"] == 3
    assert row["furnace.temperature.slope"] == pytest.approx(10.0 / 120.0)  # per second
    assert row["furnace.dwell_s"] == 120.0
    assert row["furnace.missing"] == 0.0
    assert row["furnace.oxygen.std"] == 0.0  # one reading has spread 0
    assert row["furnace.oxygen.count"] == 1
    assert f.X.loc[("c1", "s2"), "furnace.dwell_s"] == 0.0
    assert list(f.X.columns) == feature_names(tiny_config, "furnace")
    assert len(f.X.columns) == 2 * len(SENSOR_STATS) + 2


def test_one_row_per_stick_indexed_by_charge_and_stick_with_the_charge_as_bag(config, sim):
    f = build_station_features(sim.readings, config, "rolling")
    assert f.X.index.names == ["charge_id", "stick_id"]
    assert f.X.index.is_unique and f.X.index.is_monotonic_increasing
    expected = sim.truth.set_index(["charge_id", "stick_id"]).index.sort_values()
    assert f.X.index.equals(expected)
    assert (f.bags == f.X.index.get_level_values("charge_id")).all()
    assert f.bags.index.equals(f.X.index)
    assert not f.X.isna().any().any()
    assert f.X.dtypes.eq(np.float64).all()


def test_columns_hold_only_stations_up_to_the_given_one(config, sim):
    for i, station in enumerate(config.station_names):
        f = build_station_features(sim.readings, config, station)
        prefixes = {c.split(".")[0] for c in f.X.columns}
        assert prefixes == set(config.station_names[: i + 1])
        assert f.feature_names == feature_names(config, station)


def test_no_leakage_later_station_readings_do_not_change_station_features(config, sim):
    station = "rolling"
    before = build_station_features(sim.readings, config, station)
    r = sim.readings.astype({c: str for c in ["charge_id", "stick_id", "station", "sensor"]})
    later = r["station"].isin(["cooling", "straightening"])
    changed = r.copy()
    changed.loc[later, "value"] = changed.loc[later, "value"] * 3 + 1000
    changed.loc[later, "timestamp"] += pd.Timedelta(days=3)
    changed = changed.drop(index=changed.index[later][::2])  # and some later readings vanish
    extra = changed[changed["station"] == "cooling"].head(50).assign(stick_id="intruder")
    changed = pd.concat([extra, changed], ignore_index=True)  # a stick seen only later
    after = build_station_features(changed, config, station)
    pd.testing.assert_frame_equal(before.X, after.X)
    assert before.imputation == after.imputation
    pd.testing.assert_series_equal(before.bags, after.bags)


def test_changing_a_reading_at_the_station_itself_does_change_its_features(config, sim):
    r = sim.readings.astype({c: str for c in ["charge_id", "stick_id", "station", "sensor"]})
    hit = r.index[(r["station"] == "rolling") & (r["sensor"] == "force")][0]
    changed = r.copy()
    changed.loc[hit, "value"] += 10_000.0
    a = build_station_features(r, config, "rolling").X
    b = build_station_features(changed, config, "rolling").X
    differs = (a != b).any(axis=0)
    assert set(differs[differs].index) >= {"rolling.force.mean", "rolling.force.max"}
    assert not differs[[c for c in a.columns if not c.startswith("rolling.force")]].any()


def test_missing_readings_are_flagged_imputed_with_training_medians_and_recorded(config, sim):
    r = sim.readings.astype({c: str for c in ["charge_id", "stick_id", "station", "sensor"]})
    sticks = r["stick_id"].drop_duplicates()
    gone = set(sticks.iloc[:10])
    lose = r["stick_id"].isin(gone) & (r["station"] == "furnace") & (r["sensor"] == "oxygen")
    nan_value = r.index[(r["station"] == "rolling") & (r["sensor"] == "speed")][:3]
    r.loc[nan_value, "value"] = np.nan  # NaN values are not readings
    f = build_station_features(r[~lose], config, "rolling")
    lost = f.X.index.get_level_values("stick_id").isin(gone)
    assert (f.X.loc[lost, "furnace.oxygen.count"] == 0).all()
    assert (f.X.loc[lost, "furnace.missing"] == 1.0).all()
    assert (f.X.loc[~lost, "furnace.missing"] == 0.0).all()
    full = build_station_features(r, config, "rolling")
    median = full.X.loc[~lost, "furnace.oxygen.mean"].median()
    assert f.imputation["furnace.oxygen.mean"] == pytest.approx(median)
    assert (f.X.loc[lost, "furnace.oxygen.mean"] == f.imputation["furnace.oxygen.mean"]).all()
    assert set(f.imputation) == set(f.X.columns)
    assert not f.X.isna().any().any()


def test_scoring_new_sticks_uses_the_recorded_imputation_not_their_own_medians(config, sim):
    train = build_station_features(sim.readings, config, "furnace")
    new = simulate_plant(config, 2, random_state=99).readings
    new = new[new["sensor"] != "gas_flow"]  # the new sticks lack one sensor entirely
    scored = build_station_features(new, config, "furnace", imputation=train.imputation)
    assert (scored.X["furnace.gas_flow.mean"] == train.imputation["furnace.gas_flow.mean"]).all()
    assert scored.imputation == train.imputation
    own = build_station_features(new, config, "furnace")
    assert own.imputation["furnace.gas_flow.mean"] == 0.0  # all-missing feature falls back to 0


def test_apply_imputation_fills_holes_and_rejects_other_features():
    X = pd.DataFrame({"a": [1.0, np.nan], "b": [np.nan, 4.0]})
    filled = apply_imputation(X, {"b": 9.0, "a": 7.0})
    assert list(filled.columns) == ["b", "a"]  # recorded order
    assert filled.to_numpy().tolist() == [[9.0, 1.0], [4.0, 7.0]]
    with pytest.raises(ValueError, match=r"missing \['c'\]"):
        apply_imputation(X, {"a": 0.0, "b": 0.0, "c": 0.0})
    with pytest.raises(ValueError, match=r"unknown \['b'\]"):
        apply_imputation(X, {"a": 0.0})


def test_unknown_station_and_missing_columns_are_rejected(config, sim):
    with pytest.raises(ConfigError, match="unknown station 'qc'"):
        build_station_features(sim.readings, config, "qc")
    with pytest.raises(ValueError, match="lack column"):
        build_station_features(sim.readings.drop(columns="value"), config, "furnace")


def test_empty_readings_give_an_empty_table_with_all_columns(config, sim):
    f = build_station_features(sim.readings.iloc[:0], config, "rolling")
    assert f.X.shape == (0, len(feature_names(config, "rolling")))


def test_station_features_from_the_store_equal_features_from_the_readings(tmp_path, tiny_config):
    store_mod = pytest.importorskip("qcllp.store", reason="qcllp.store (engineer S) not available")
    ingest = pytest.importorskip("qcllp.ingest", reason="qcllp.ingest (engineer S) not available")
    sim = simulate_plant(tiny_config, 5, random_state=2)
    paths = write_simulation(sim, tmp_path / "data", format="parquet")
    store = store_mod.Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}")
    try:
        report = ingest.ingest_measurements(store, tiny_config, paths["measurements"][0])
        assert report.stored == len(sim.readings)
        from_store = station_features(store, tiny_config, "furnace")
        some = sorted(set(sim.truth["charge_id"]))[:2]
        part = station_features(store, tiny_config, "rolling", charge_ids=some)
    finally:
        store.close()
    direct = build_station_features(sim.readings, tiny_config, "furnace")
    pd.testing.assert_frame_equal(from_store.X, direct.X)
    assert from_store.imputation == direct.imputation
    assert set(part.bags) == set(some)
    assert any(c.startswith("rolling.") for c in part.X.columns)


def test_reading_the_store_in_chunks_of_charges_gives_the_same_table(tmp_path, config):
    """Chunks of 1, 2 and 5 charges against all at once: the same sticks in the same order,
    the same values, and the same training imputation (the medians over all sticks, taken
    after the chunks are put together), with missing readings to impute."""
    from qcllp.ingest import ingest_measurements
    from qcllp.store import Store

    sim = simulate_plant(config, 7, random_state=4, missing_rate=0.2)
    paths = write_simulation(sim, tmp_path / "data", format="parquet")
    with Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}") as store:
        ingest_measurements(store, config, paths["measurements"][0])
        whole = station_features(store, config, "cooling", chunk_charges=None)
        assert whole.X.isna().sum().sum() == 0 and len(set(whole.imputation.values())) > 1
        for chunk in (1, 2, 5):
            part = station_features(store, config, "cooling", chunk_charges=chunk)
            pd.testing.assert_frame_equal(part.X, whole.X)
            pd.testing.assert_series_equal(part.bags, whole.bags)
            assert part.imputation == whole.imputation
        some = sorted(set(sim.truth["charge_id"]))[1:4][::-1]  # any order in, sorted out
        chosen = station_features(store, config, "cooling", charge_ids=some, chunk_charges=2)
        alone = station_features(store, config, "cooling", charge_ids=some, chunk_charges=None)
        pd.testing.assert_frame_equal(chosen.X, alone.X)
        with pytest.raises(ValueError, match="chunk_charges must be >= 1"):
            station_features(store, config, "cooling", chunk_charges=0)
