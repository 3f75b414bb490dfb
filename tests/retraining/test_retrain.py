"""The retraining daemon's pipeline in-process, on a real SQLite file: the promotion rule,
champion / challenger on the holdout, a retraining that skips when nothing is new, and the
recovery after a crash. (The daemon as a process: tests/service/test_retrainer_process.py.)"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pandas as pd
import pytest
from joblib.parallel import get_active_backend

from qcllp.features import station_features
from qcllp.retraining.promotion import HoldoutFigures, decide_promotion, judge
from qcllp.retraining.retrain import decide_undecided, recover, retrain_station
from qcllp.station.registry import active_model, list_models, promote
from qcllp.store.events import events, record_event
from qcllp.store.leases import HeldLease
from qcllp.training.train import (
    fit_station_model,
    labeled_from_frames,
    record_model,
    station_costs,
    train_station,
    training_plan,
)

STATION = "rolling"


def figures(bag_error: float, saving: float) -> HoldoutFigures:
    return HoldoutFigures(None, 12, 600, bag_error, 0.1, saving, 0.0)


# ----------------------------------------------------------------------------- the rule
def test_a_first_model_must_not_lose_money_and_must_beat_the_mean_share():
    ok, why = judge(figures(0.05, 0.0), None, margin=0.02, baseline_bag_error=0.08)
    assert ok and why.startswith("first model")
    ok, why = judge(figures(0.05, -12.0), None, margin=0.02, baseline_bag_error=0.08)
    assert not ok and "loses money" in why and "-12" in why
    ok, why = judge(figures(0.08, 5.0), None, margin=0.02, baseline_bag_error=0.08)
    assert not ok and "mean share" in why
    ok, why = judge(figures(0.0790, 5.0), None, margin=0.02, baseline_bag_error=0.08)
    assert not ok and "not 2% below" in why and "0.0784" in why  # a tie by noise is no model
    ok, why = judge(figures(0.0783, 5.0), None, margin=0.02, baseline_bag_error=0.08)
    assert ok


def test_a_threshold_from_inspections_is_not_judged_on_the_model_based_saving():
    """A candidate whose threshold rests on inspected precision, to be tried in shadow: the
    holdout's (count-recalibrated) saving does not decide; the bag error still does."""
    measured = "its threshold 0.412 rests on inspected precision 28/30 (break-even 0.690)"
    ok, why = judge(
        figures(0.05, -120.0), None, margin=0.02, baseline_bag_error=0.08, measured=measured
    )
    assert ok and measured in why and "-120" in why and "model-based" in why
    ok, why = judge(
        figures(0.0790, -120.0), None, margin=0.02, baseline_bag_error=0.08, measured=measured
    )
    assert not ok and "mean share" in why
    champion = figures(0.10, 20.0)
    ok, why = judge(
        figures(0.10, -50.0), champion, margin=0.02, baseline_bag_error=1, measured=measured
    )
    assert ok and measured in why  # no better a model, but a rule the inspections support
    ok, why = judge(
        figures(0.101, 50.0), champion, margin=0.02, baseline_bag_error=1, measured=measured
    )
    assert not ok and "above the active model's 0.1000" in why


def test_a_challenger_needs_the_margin_on_bag_error_and_no_lower_saving():
    champion = figures(0.10, 20.0)
    ok, why = judge(figures(0.099, 30.0), champion, margin=0.02, baseline_bag_error=1)
    assert not ok and "not 2% below" in why and "0.0980" in why
    ok, why = judge(figures(0.090, 19.0), champion, margin=0.02, baseline_bag_error=1)
    assert not ok and "lower than the active model's +20" in why
    ok, why = judge(figures(0.090, 20.0), champion, margin=0.02, baseline_bag_error=1)
    assert ok and "0.0900 vs 0.1000" in why


# ----------------------------------------------------------------------------- the gate
def test_first_retraining_promotes_then_skips_until_new_counts_arrive(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    first = retrain_station(store, config, STATION)
    assert first.outcome == "promoted", first.reason
    record = active_model(store, STATION)
    assert record["id"] == first.model_id
    holdout = first.decision.holdout
    assert len(holdout) == config.retrainer.holdout_charges
    # the candidate never saw the holdout: trained until the first holdout charge
    times = store.read_charge_times()
    assert pd.Timestamp(record["trained_until"], tz="UTC") < times[holdout[0]]
    assert record["n_charges"] == 48 - len(holdout)

    again = retrain_station(store, config, STATION)
    assert again.outcome == "skipped" and "no new final-QC counts" in again.reason
    forced = retrain_station(store, config, STATION, force=True)  # the same data: a tie
    assert forced.outcome == "kept" and "not 2% below" in forced.reason
    assert active_model(store, STATION)["id"] == first.model_id
    decisions = events(store, ["promotion"], station=STATION)
    assert [d["outcome"] for d in decisions] == ["kept", "promoted"]
    assert decisions[0]["detail"]["candidate"]["bag_error"] is not None
    assert decisions[0]["detail"]["champion"]["model_id"] == first.model_id
    store.close()


def test_the_daemon_trains_on_the_configs_processes_to_the_same_model(retrain_plant, tmp_path):
    """training.n_jobs reaches the daemon's training (the active joblib config during it), and
    the model trained on two processes ties with the one trained on one."""
    store = retrain_plant.copy_to(tmp_path)
    one = retrain_plant.config
    two = replace(one, training=replace(one.training, n_jobs=2))
    seen = []

    def progress(_line: str) -> None:
        seen.append(get_active_backend()[1])

    first = retrain_station(store, one, STATION)
    forced = retrain_station(store, two, STATION, force=True, progress=progress)
    assert first.outcome == "promoted" and seen and set(seen) == {2}
    assert forced.outcome == "kept" and "not 2% below" in forced.reason
    (decision,) = events(store, ["promotion"], station=STATION, limit=1)
    candidate, champion = decision["detail"]["candidate"], decision["detail"]["champion"]
    for figure in ("bag_error", "saving_per_1000", "lockout_rate"):  # on the holdout
        assert candidate[figure] == champion[figure], figure  # the same model
    store.close()


def test_a_worse_candidate_is_not_promoted_and_the_reason_is_recorded(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    champion = retrain_station(store, config, STATION)
    assert champion.outcome == "promoted"
    # a candidate that learned the wrong counts: the charges' counts shuffled among them
    before = [c for c in store.read_charge_times().index if c not in champion.decision.holdout]
    counts = store.read_defect_counts(list(config.defect_types)).loc[before]
    shuffled = counts.copy()
    shuffled[list(config.defect_types)] = counts[list(config.defect_types)].to_numpy()[::-1]
    shuffled["n_sticks"] = counts["n_sticks"].to_numpy()[::-1]
    features = station_features(store, config, STATION, charge_ids=before)
    data = labeled_from_frames(config, STATION, features, shuffled)
    plan = training_plan(config, STATION)
    times = store.read_charge_times().reindex(data.proportions.index)
    model = fit_station_model(plan, data, station_costs(config, STATION), times=times).model
    worse = record_model(store, config, model, data).model_id

    decision = decide_promotion(store, config, STATION, worse)
    assert not decision.promoted
    assert decision.candidate.bag_error > decision.champion.bag_error
    assert "not 2% below the active model's" in decision.reason
    assert active_model(store, STATION)["id"] == champion.model_id
    assert {m["id"]: m["status"] for m in list_models(store, STATION)}[worse] == "candidate"
    (event,) = events(store, ["promotion"], station=STATION, limit=1)
    assert event["model_id"] == worse and event["outcome"] == "kept"
    assert event["reason"] == decision.reason
    store.close()


def test_no_promotion_without_charges_that_neither_model_was_trained_on(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    everything = train_station(store, config, STATION)  # by hand, on every labeled charge
    promote(store, everything.model_id)
    candidate = retrain_station(store, config, STATION)
    assert candidate.outcome == "kept"
    assert "only 0 labeled charges that neither model was trained on" in candidate.reason
    assert active_model(store, STATION)["id"] == everything.model_id
    store.close()


def test_a_candidate_learns_from_the_newest_training_charges_before_the_holdout(
    retrain_plant, tmp_path
):
    store = retrain_plant.copy_to(tmp_path)
    settings = replace(retrain_plant.config.retrainer, training_charges=20)
    config = replace(retrain_plant.config, retrainer=settings)
    outcome = retrain_station(store, config, STATION)
    assert outcome.model_id is not None, outcome.reason
    record = list_models(store, STATION)[0]
    times = store.read_charge_times().sort_values()
    window = times.index[48 - settings.holdout_charges - 20 : 48 - settings.holdout_charges]
    assert record["n_charges"] == 20
    assert pd.Timestamp(record["trained_from"], tz="UTC") == times[window[0]]
    assert pd.Timestamp(record["trained_until"], tz="UTC") == times[window[-1]]
    (trained,) = events(store, ["trained"], station=STATION)
    assert trained["reason"].startswith("trained on the labeled charges from ")
    store.close()


def test_too_few_labeled_charges_skip_with_the_reason(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = replace(
        retrain_plant.config,
        retrainer=replace(retrain_plant.config.retrainer, min_holdout_charges=30),
    )
    outcome = retrain_station(store, config, STATION)
    assert outcome.outcome == "skipped" and "48 labeled charges: too few" in outcome.reason
    assert list_models(store, STATION) == []
    store.close()


# ----------------------------------------------------------------------------- recovery
def test_recovery_decides_an_undecided_candidate_and_removes_orphan_artifacts(
    retrain_plant, tmp_path
):
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    until = store.read_charge_times().sort_values().iloc[-12].to_pydatetime()
    result = train_station(store, config, STATION, until=until)
    # the daemon died between the "trained" event and its decision
    record_event(store, "trained", "candidate", "test", station=STATION, model_id=result.model_id)
    models = result.artifact_path.parent
    orphan = models / "rolling-invcal-killed.joblib"
    half_written = models / ".rolling-invcal-killed.joblib.x1.tmp"
    fresh = models / "rolling-invcal-being-registered.joblib"
    for path in (orphan, half_written, fresh):
        path.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    os.utime(half_written, (old, old))

    done = recover(store, config)
    assert any("left undecided; decided now: first model" in line for line in done)
    assert active_model(store, STATION)["id"] == result.model_id
    assert not orphan.exists() and not half_written.exists()
    assert fresh.exists()  # younger than a lease: someone may be about to register it
    assert result.artifact_path.exists()
    assert decide_undecided(store, config) == [] and recover(store, config) == []
    kinds = [e["outcome"] for e in events(store, ["recovery"])]
    assert sorted(kinds) == ["decided", "removed", "removed"]
    store.close()


def test_a_candidate_its_trainer_decides_while_recovery_waits_is_not_decided_twice(
    retrain_plant, tmp_path, monkeypatch
):
    """Recovery lists the undecided candidates, then takes each station's lease: a retraining
    in another thread may decide the candidate and let the lease go in between."""
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    until = store.read_charge_times().sort_values().iloc[-12].to_pydatetime()
    result = train_station(store, config, STATION, until=until)
    record_event(store, "trained", "candidate", "test", station=STATION, model_id=result.model_id)
    take = HeldLease.take

    def trainer_decides_first(*args, **kwargs):
        decide_promotion(store, config, STATION, result.model_id)  # the trainer, just before
        return take(*args, **kwargs)

    monkeypatch.setattr(HeldLease, "take", staticmethod(trainer_decides_first))
    assert decide_undecided(store, config) == []
    assert len(events(store, ["promotion"])) == 1 and events(store, ["recovery"]) == []
    store.close()


@pytest.mark.parametrize("station", ["furnace", "straightening"])
def test_every_station_can_be_retrained_and_judged(retrain_plant, tmp_path, station):
    store = retrain_plant.copy_to(tmp_path)
    outcome = retrain_station(store, retrain_plant.config, station)
    assert outcome.outcome in ("promoted", "kept")
    assert outcome.decision is not None and outcome.decision.candidate is not None
    assert outcome.reason
    store.close()
