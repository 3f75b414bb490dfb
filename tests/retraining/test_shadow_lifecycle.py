"""The promotion gate's shadow path in-process, on the retraining plant (a real SQLite file,
real trainings): a first model that locks out goes on a shadow trial, not active; one that
locks out nothing goes straight to active; with ``retrainer.shadow_trials`` off, active as
before. (The daemon's whole life cycle as a process: tests/service/test_retrainer_shadow.py.)"""

from __future__ import annotations

from dataclasses import replace

from qcllp.retraining.promotion import decide_promotion, measured_threshold, shadow_reason
from qcllp.retraining.retrain import retrain_station
from qcllp.station.registry import active_model, get_model, load_model, shadow_model
from qcllp.store.events import events
from tests.retraining.shadow_helpers import locking_candidate, with_metrics

STATION = "rolling"


def _trials(config, on: bool = True):
    return replace(config, retrainer=replace(config.retrainer, shadow_trials=on))


def test_a_first_model_that_locks_out_goes_on_a_shadow_trial(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = _trials(retrain_plant.config)
    candidate = locking_candidate(store, config, STATION)
    decision = decide_promotion(store, config, STATION, candidate)
    assert decision.promoted and decision.shadow, decision.reason
    assert "the station's first model that locks out: on a shadow trial" in decision.reason
    assert shadow_model(store, STATION)["id"] == candidate
    assert active_model(store, STATION) is None
    (event,) = events(store, ["promotion"], station=STATION)
    assert (event["model_id"], event["outcome"]) == (candidate, "shadow")
    store.close()


def test_a_running_trial_is_decided_before_another_candidate_goes_on_trial(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = _trials(retrain_plant.config)
    first = locking_candidate(store, config, STATION)
    assert decide_promotion(store, config, STATION, first).shadow
    second = locking_candidate(store, config, STATION)
    kept = decide_promotion(store, config, STATION, second)
    assert not kept.promoted and not kept.shadow, kept.reason
    assert f"model {first}'s shadow trial is decided first (0 of at most 100" in kept.reason
    assert shadow_model(store, STATION)["id"] == first
    assert get_model(store, second)["status"] == "candidate"
    assert [e["outcome"] for e in events(store, ["promotion"], station=STATION)] == [
        "kept",
        "shadow",
    ]
    store.close()


def test_without_shadow_trials_the_same_model_goes_active(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = _trials(retrain_plant.config, on=False)
    candidate = locking_candidate(store, config, STATION)
    decision = decide_promotion(store, config, STATION, candidate)
    assert decision.promoted and not decision.shadow
    assert get_model(store, candidate)["status"] == "active"
    store.close()


def test_a_model_that_locks_out_nothing_goes_straight_to_active(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    outcome = retrain_station(store, _trials(retrain_plant.config), STATION)
    assert outcome.outcome == "promoted", outcome.reason
    assert get_model(store, outcome.model_id)["metrics"]["threshold"] > 1.0
    assert "shadow" not in outcome.reason and shadow_model(store, STATION) is None
    store.close()


def test_a_challenger_goes_on_trial_only_when_its_threshold_moved(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    model = load_model(store, locking_candidate(store, retrain_plant.config, STATION)).model
    moved = replace(model, threshold=model.threshold - 0.05)
    assert shadow_reason(model, None) == "the station's first model that locks out"
    assert shadow_reason(model, model) is None  # the rule already on the line
    assert shadow_reason(moved, model).startswith(f"its threshold {moved.threshold:.3f} differs")
    assert shadow_reason(replace(model, threshold=1.5), None) is None  # locks out nothing
    store.close()


def test_a_first_model_whose_threshold_rests_on_inspections_goes_on_trial(retrain_plant, tmp_path):
    """A threshold low enough to lose money by the holdout's count-recalibrated figures: the
    gate refuses it, unless the threshold rests on inspected precision; then it is tried in
    shadow (and, with trials off, judged as any other model)."""
    store = retrain_plant.copy_to(tmp_path)
    config = _trials(retrain_plant.config)
    plain = locking_candidate(store, config, STATION, margin=-0.2)
    refused = decide_promotion(store, config, STATION, plain)
    assert not refused.promoted and "loses money" in refused.reason, refused.reason
    evidence = {"threshold_inspected": 30.0, "threshold_inspected_failing": 28.0}
    measured = with_metrics(store, config, plain, evidence)
    said = measured_threshold(load_model(store, measured).model)
    assert said is not None and "inspected precision 28/30" in said
    assert measured_threshold(load_model(store, plain).model) is None
    off = decide_promotion(store, _trials(config, on=False), STATION, measured)
    assert not off.promoted and "loses money" in off.reason
    decision = decide_promotion(store, config, STATION, measured)
    assert decision.promoted and decision.shadow, decision.reason
    assert said in decision.reason and "on a shadow trial" in decision.reason
    assert shadow_model(store, STATION)["id"] == measured and active_model(store, STATION) is None
    store.close()
