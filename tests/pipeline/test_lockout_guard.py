"""The scorer's lock-out guard: a model that locks out far more than in training is suspended,
its would-be lock-outs pass with the reason, one alarm, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.pipeline.registry import load_model, promote
from qcllp.pipeline.scoring import flags_frame, score_station
from qcllp.pipeline.status import plant_status
from qcllp.pipeline.thresholds import guard_trip, lockout_rate_bound
from qcllp.pipeline.train import labeled_data, record_model, train_station

MIN_STICKS = 30


def test_the_guard_trips_only_after_enough_sticks_and_a_clear_excess():
    rng = np.random.default_rng(0)
    healthy = rng.random(5000) < 0.05
    assert guard_trip(healthy, 0.06, 300) is None  # a model as eager as in training
    eager = rng.random(5000) < 0.15
    at = guard_trip(eager, 0.06, 300)
    assert at is not None and at >= 299  # never before min_sticks decisions
    assert guard_trip(np.ones(10, bool), 0.06, 300) is None
    # earlier decisions of the same model count
    assert guard_trip(np.ones(10, bool), 0.06, 300, decided=295, locked_before=100) == 4
    # the training bound: a 99 % bootstrap quantile of the share locked out
    codes = np.repeat(np.arange(50), 40)
    bound = lockout_rate_bound(rng.random(2000), codes, 0.9)
    assert 0.1 < bound < 0.16


@pytest.fixture
def eager_plant(store, history_plant, tmp_path):
    """Both engines: the history and fresh charges, and an active cooling model that locks out
    every stick although in training it locked out at most 5 %."""
    config = replace(
        history_plant.config,
        path=tmp_path / "plant.yaml",
        scorer=replace(history_plant.config.scorer, guard_min_sticks=MIN_STICKS),
    )
    folder = history_plant.folder
    ingest_measurements(store, config, folder / "history" / "measurements")
    ingest_defect_counts(store, config, folder / "history" / "defects")
    ingest_measurements(store, config, folder / "fresh" / "measurements")
    trained = train_station(store, config, "cooling").model_id
    model = replace(load_model(store, trained).model, threshold=0.0, lockout_rate_bound=0.05)
    eager = record_model(store, config, model, labeled_data(store, config, "cooling")).model_id
    promote(store, eager)
    return store, config, trained, eager


def test_an_eager_model_is_suspended_with_reason_and_one_alarm(eager_plant):
    store, config, trained, eager = eager_plant
    result = score_station(store, config, "cooling")
    decided = result.scores
    assert len(decided) > MIN_STICKS
    # decisions in order: lock-outs until the guard trips at the MIN_STICKS-th stick
    assert (decided["decision"].iloc[: MIN_STICKS - 1] == "lock_out").all()
    suspended = decided.iloc[MIN_STICKS - 1 :]
    assert (suspended["decision"] == "pass").all()
    assert suspended["reason"].str.startswith("lock-out suspended at cooling").all()
    flags = flags_frame(store, "cooling")
    assert int(flags["flagged"].sum()) == MIN_STICKS - 1 == (flags["decision"] == "lock_out").sum()
    status = plant_status(store, config)
    alarms = [a for a in status["alarms"] if a["kind"] == "lockout_suspended"]
    assert len(alarms) == 1 and f"model {eager}" in alarms[0]["message"]
    cooling = next(s for s in status["stations"] if s["station"] == "cooling")
    assert cooling["lockout_suspended"].startswith("lock-out suspended")
    # promoting the suspended model again (the cause fixed) lifts the suspension
    promote(store, eager)
    cooling = next(s for s in plant_status(store, config)["stations"] if s["station"] == "cooling")
    assert cooling["lockout_suspended"] is None
