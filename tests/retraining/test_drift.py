"""Drift watch: PSI, the feature signal against the training window's own variation, the count
signal, and alarms raised once per crossing -- on a simulated plant whose later charges come
as they are or after a process change (a sensor reading 4 standard deviations higher)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qcllp.retraining.drift import (
    count_drift,
    feature_drift,
    null_psi,
    population_stability,
    watch_station,
)
from qcllp.station.registry import load_model
from qcllp.store import Alarm
from qcllp.store.events import events
from tests.support.retrain_plant import ingest_later

STATION = "rolling"


def test_psi_is_near_zero_for_the_same_distribution_and_large_for_a_shift():
    rng = np.random.default_rng(0)
    reference = pd.DataFrame(rng.normal(size=(4000, 3)), columns=["a", "b", "c"])
    recent = pd.DataFrame(rng.normal(size=(1000, 3)), columns=["a", "b", "c"])
    recent["b"] += 1.0
    psi = population_stability(reference, recent)
    assert list(psi.index[:1]) == ["b"] and psi["b"] > 0.5
    assert psi["a"] < 0.05 and psi["c"] < 0.05


def test_psi_counts_missing_values_as_their_own_bin_and_takes_constant_columns():
    reference = pd.DataFrame({"x": np.arange(100.0), "k": 1.0})
    recent = pd.DataFrame({"x": [np.nan] * 50 + list(range(50)), "k": 1.0})
    psi = population_stability(reference, recent)
    assert psi["k"] == pytest.approx(0.0)
    assert psi["x"] > 1.0  # half the sticks lost the sensor: a drift to see
    with pytest.raises(ValueError, match="needs sticks in both windows"):
        population_stability(reference, recent.iloc[:0])


def test_null_psi_is_reproducible_and_reflects_charge_to_charge_variation():
    rng = np.random.default_rng(1)
    bags = np.repeat(np.arange(40), 50)
    level = rng.normal(size=40)[bags]  # every charge has its own level
    X = pd.DataFrame({"f": level + 0.3 * rng.normal(size=len(bags))})
    first = null_psi(X, bags, 10, random_state=7)
    assert first == null_psi(X, bags, 10, random_state=7)
    flat = pd.DataFrame({"f": rng.normal(size=len(bags))})
    assert first > 3 * null_psi(flat, bags, 10, random_state=7)


@pytest.fixture
def trained(retrain_plant, tmp_path):
    """The history's model of STATION promoted by the retraining, in a private database."""
    store = retrain_plant.retrained_copy(tmp_path, STATION)
    yield store
    store.close()


@pytest.mark.parametrize("kind, drifted", [("same", False), ("shifted", True)])
def test_the_feature_signal_tells_a_changed_sensor_from_an_unchanged_plant(
    retrain_plant, trained, kind, drifted
):
    config = retrain_plant.config
    ingest_later(trained, retrain_plant, kind)
    loaded = load_model(trained, station=STATION)
    feature = feature_drift(trained, config, STATION, loaded)
    assert feature.alarm is drifted, feature.detail()
    assert feature.limit >= config.retrainer.drift_psi_max and feature.null_psi > 0
    if drifted:
        assert feature.psi.index[0].startswith("rolling.force.")
        assert feature.predicted_share_recent > feature.predicted_share_training


@pytest.mark.parametrize("kind, drifted", [("same", False), ("worse", True)])
def test_the_count_signal_tells_a_changed_process_from_an_unchanged_plant(
    retrain_plant, trained, kind, drifted
):
    config = retrain_plant.config
    ingest_later(trained, retrain_plant, kind)
    loaded = load_model(trained, station=STATION)
    counts = count_drift(trained, config, STATION, loaded)
    assert counts.n_charges == config.retrainer.drift_window_charges
    assert counts.alarm is drifted, counts
    assert counts.limit == pytest.approx(config.retrainer.drift_bag_error_ratio * counts.reference)


def test_drift_alarms_are_raised_once_per_crossing_and_every_check_is_recorded(
    retrain_plant, trained
):
    config = retrain_plant.config
    ingest_later(trained, retrain_plant, "worse")
    loaded = load_model(trained, station=STATION)
    cache: dict = {}
    assert watch_station(trained, config, STATION, loaded, counts=True, reference_cache=cache)
    assert not watch_station(trained, config, STATION, loaded, counts=True, reference_cache=cache)
    assert list(cache) == [loaded.id]
    alarms = pd.read_sql_table(Alarm.__tablename__, trained.engine)
    assert list(alarms["kind"]) == ["count_drift"]
    assert set(alarms["source"]) == {"retrainer"} and set(alarms["station"]) == {STATION}
    checks = events(trained, ["count_drift"], station=STATION)
    assert [e["outcome"] for e in checks] == ["alarm", "alarm"]
    assert all(e["model_id"] == loaded.id for e in checks)
    assert len(events(trained, ["feature_drift"], station=STATION)) == 2


def test_no_drift_verdict_before_half_a_window_of_fresh_charges(retrain_plant, trained):
    loaded = load_model(trained, station=STATION)
    # the model was trained up to the holdout: the 12 holdout charges are fresh for it
    config = retrain_plant.config
    assert count_drift(trained, config, STATION, loaded).n_charges == 12
    from dataclasses import replace

    wide = replace(config, retrainer=replace(config.retrainer, drift_window_charges=40))
    assert count_drift(trained, wide, STATION, loaded) is None
    assert feature_drift(trained, wide, STATION, loaded) is None
