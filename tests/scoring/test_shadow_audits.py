"""Shadow trials and audit samples in the scorer step, on SQLite and PostgreSQL: a shadow
model decides the same sticks as the active one into ``shadow_flags`` (never the line's
flags), alone it reaches the line only through its audit samples, and the audits are a
deterministic share of the eligible sticks (the keyed hash of :mod:`qcllp.scoring.audits`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from qcllp.cli.render import score_line
from qcllp.features import station_features
from qcllp.ingest import ingest_inspections
from qcllp.plant.config import PlantConfig, load_plant_config
from qcllp.scoring.audits import audit_draw, audit_floor
from qcllp.scoring.inspection_guard import model_realized, realized_line
from qcllp.scoring.step import flags_frame, score_station, score_step
from qcllp.station.audit_band import audit_band_floor, audits_can_earn_lockouts
from qcllp.station.registry import load_model, load_shadow, promote
from qcllp.store import Store
from qcllp.training.train import labeled_data, record_model
from tests.support.plants import ROOT, with_station

STATION = "cooling"


def register_copy(store: Store, config: PlantConfig, model_id: int, **changes) -> int:
    """A copy of model ``model_id`` (a real artifact, registered as a candidate) with
    ``changes`` to its station model (threshold...)."""
    model = load_model(store, model_id).model
    changed = replace(model, **changes)
    if "threshold" in changes:
        changed = replace(changed, metrics={**model.metrics, "threshold": changes["threshold"]})
    return record_model(store, config, changed, labeled_data(store, config, STATION)).model_id


def active_with_audit_from(
    store: Store, config: PlantConfig, model_id: int, top: float, **more: float
):
    """A copy of model ``model_id`` whose metric ``audit_from`` is ``top`` (and ``more``
    metrics), promoted active; its loaded model."""
    metrics = {**load_model(store, model_id).model.metrics, "audit_from": top, **more}
    copy = register_copy(store, config, model_id, metrics=metrics)
    promote(store, copy)
    return load_model(store, copy)


def shadow_rows(store: Store) -> pd.DataFrame:
    rows = store.execute_sql(
        "SELECT charge_id, stick_id, model_id, probability, decision, threshold "
        "FROM shadow_flags WHERE station = 'cooling'"
    )
    columns = ["charge_id", "stick_id", "model_id", "probability", "decision", "threshold"]
    return pd.DataFrame(rows, columns=columns).astype({"probability": float})


def pending(store: Store) -> int:
    [(n,)] = store.execute_sql("SELECT count(*) FROM scorer_pending WHERE station = 'cooling'")
    return int(n)


@pytest.fixture
def plant(history_store, history_plant, tmp_path):
    """A store (both engines) with the history and the fresh charges, a trained cooling
    model (a candidate) and a copy of it that locks out every stick (threshold 0)."""
    store = history_store
    config = replace(history_plant.config, path=tmp_path / "plant.yaml")
    trained = history_plant.record_trained(store, config, STATION)
    eager = register_copy(store, config, trained, threshold=0.0)
    return store, config, trained, eager


def test_a_shadow_model_decides_the_same_sticks_into_shadow_flags_and_never_the_lines(plant):
    store, config, trained, eager = plant
    promote(store, trained)
    promote(store, eager, shadow=True)
    config = with_station(config, STATION, audit_share=0.0, trial_audit_share=0.0)
    first = score_station(store, config, STATION)
    again = score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    assert len(flags) == first.flags_written > 0 and again.flags_written == 0
    assert (flags["model_id"] == trained).all()
    threshold = load_model(store, trained).model.threshold
    scorable = flags["decision"] != "unscorable"
    assert set(flags["decision"]) <= {"lock_out", "pass", "unscorable"}
    expected = np.where(flags["probability"] >= threshold, "lock_out", "pass")
    assert (flags.loc[scorable, "decision"] == expected[scorable.to_numpy()]).all()
    shadow = shadow_rows(store)
    assert len(shadow) == len(flags)  # one per stick, none written twice by the second run
    assert (shadow["model_id"] == eager).all() and (shadow["threshold"] == 0.0).all()
    both = flags.merge(shadow, on=["charge_id", "stick_id"], suffixes=("", "_shadow"))
    assert len(both) == len(flags)
    # the same model's parameters on the same features: the same probabilities
    np.testing.assert_allclose(both["probability_shadow"], both["probability"])
    assert (both.loc[scorable.to_numpy(), "decision_shadow"] == "lock_out").all()


def test_every_eligible_pass_is_audited_at_share_1_as_the_active_models_flag(plant, history_plant):
    store, config, trained, eager = plant
    promote(store, trained)
    promote(store, eager, shadow=True)
    active = load_model(store, trained).model
    fresh = sorted(history_plant.fresh.truth["charge_id"].astype(str).unique())
    X = station_features(store, config, STATION, charge_ids=fresh, imputation=active.imputation).X
    p = active.failure_probability(X)
    assert (p < active.threshold).sum() >= 4
    # break-even in the middle of the passes' probabilities: both kinds of audit occur
    be = float(np.median(p[p < active.threshold]))
    config = with_station(
        config, STATION, audit_share=1.0, good_cost=be, fail_cost=1.0 - be, inspection_cost=0.0
    )
    st = config.station(STATION)
    assert st.break_even == pytest.approx(be)
    result = score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    n_audits = int((flags["decision"] == "inspect").sum())
    summary = result.as_dict()
    assert summary["audited"] == n_audits and summary["passed"] == 0
    assert f"{n_audits} audit samples (inspect)" in score_line(STATION, summary, "", "")
    passes = flags["probability"] < active.threshold
    band = passes & (flags["probability"] >= st.break_even)
    assert (flags.loc[passes, "decision"] == "inspect").all()  # no pass is left
    assert (flags.loc[flags["probability"] >= active.threshold, "decision"] == "lock_out").all()
    assert not flags.loc[~passes, "decision"].eq("inspect").any()
    assert band.any() and (passes & ~band).any()
    assert (flags.loc[band, "model_id"] == trained).all()
    assert flags.loc[band, "reason"].str.startswith("audit: p ").all()
    assert flags.loc[band, "reason"].str.contains(f"(break-even {be:.2f})", regex=False).all()
    disagree = flags[passes & ~band]
    # the line's flag stays the active model's (the count guard judges its probabilities)
    assert (disagree["model_id"] == trained).all()
    np.testing.assert_allclose(disagree["threshold"], active.threshold)
    assert (disagree["reason"].str.startswith(f"audit: the shadow model {eager} would lock")).all()
    assert not flags["flagged"][flags["decision"] == "inspect"].any()


def test_a_trials_would_be_lockouts_are_drawn_at_the_trial_share_the_rest_at_the_audit_share(
    plant, history_plant
):
    """``trial_audit_share`` 1 and ``audit_share`` 0: every pass the shadow would lock out is
    looked at, in the active model's band or not, and no other pass is."""
    store, config, trained, _ = plant
    promote(store, trained)
    active = load_model(store, trained).model
    fresh = sorted(history_plant.fresh.truth["charge_id"].astype(str).unique())
    X = station_features(store, config, STATION, charge_ids=fresh, imputation=active.imputation).X
    p = active.failure_probability(X)
    between = float(np.median(p[p < active.threshold]))  # the shadow locks out half the passes
    promote(store, register_copy(store, config, trained, threshold=between), shadow=True)
    config = with_station(config, STATION, audit_share=0.0, trial_audit_share=1.0)
    score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    passes = flags["probability"] < active.threshold
    tried = passes & (flags["probability"] >= between)
    assert tried.any() and (passes & ~tried).any()
    assert (flags.loc[tried, "decision"] == "inspect").all()
    assert (flags.loc[passes & ~tried, "decision"] == "pass").all()


def test_a_bay_that_takes_no_trial_audits_still_gets_the_active_models_band(plant, history_plant):
    """``trial_audit_share`` 0 and ``audit_share`` 1: the shadow's would-be lock-outs outside
    the active model's band are not looked at; the band is, the shadow's or not."""
    store, config, trained, eager = plant
    promote(store, trained)
    promote(store, eager, shadow=True)  # would lock out every stick
    model = load_model(store, trained).model
    fresh = sorted(history_plant.fresh.truth["charge_id"].astype(str).unique())
    X = station_features(store, config, STATION, charge_ids=fresh, imputation=model.imputation).X
    p = model.failure_probability(X)
    be = float(np.median(p[p < model.threshold]))  # the band: the upper half of the passes
    config = with_station(
        config,
        STATION,
        audit_share=1.0,
        trial_audit_share=0.0,
        good_cost=be,
        fail_cost=1.0 - be,
        inspection_cost=0.0,
    )
    score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    active = load_model(store, trained)
    floor = audit_floor(config.station(STATION), active)
    passes = flags["probability"] < active.model.threshold
    band = passes & (flags["probability"] >= floor)
    assert band.any() and (passes & ~band).any()
    assert (flags.loc[band, "decision"] == "inspect").all()
    assert (flags.loc[passes & ~band, "decision"] == "pass").all()


def test_a_shadow_model_alone_reaches_the_line_only_through_its_audits(plant, tmp_path):
    store, config, _, eager = plant
    promote(store, eager, shadow=True)
    shadow = load_shadow(store, STATION)
    config = with_station(config, STATION, trial_audit_share=0.25)  # a bay that takes a quarter
    sink = tmp_path / "flags-cooling.jsonl"
    steps = []
    while not steps or steps[-1].more or steps[-1].batches_taken:
        steps.append(
            score_step(store, config, STATION, None, shadow=shadow, assume_complete=True, sink=sink)
        )
    decided = shadow_rows(store)
    assert len(decided) == sum(s.shadow_written for s in steps) > 0
    assert pending(store) == 0  # every decided stick forgotten, the line acts on the rest
    assert set(decided["decision"]) <= {"lock_out", "unscorable"}
    locks = decided[decided["decision"] == "lock_out"]
    drawn = audit_draw(STATION, locks["charge_id"], locks["stick_id"]) < 0.25
    expected = set(zip(locks["charge_id"][drawn], locks["stick_id"][drawn], strict=True))
    flags = flags_frame(store, STATION)
    assert set(zip(flags["charge_id"], flags["stick_id"], strict=True)) == expected
    assert 0 < len(expected) < len(locks)
    assert (flags["decision"] == "inspect").all() and not flags["flagged"].any()
    assert (flags["model_id"] == eager).all()
    lines = pd.read_json(sink, lines=True)
    assert len(lines) == len(flags) and (lines["decision"] == "inspect").all()
    assert sum(s.shadow_audits for s in steps) == len(flags) == sum(s.flags_written for s in steps)
    repeat = score_step(store, config, STATION, None, shadow=shadow, assume_complete=True)
    assert repeat.shadow_written == repeat.flags_written == 0
    assert len(shadow_rows(store)) == len(decided) and len(flags_frame(store, STATION)) == len(
        flags
    )


def test_an_inspection_of_an_audit_sample_is_stored_as_an_audit(plant, tmp_path):
    store, config, _, eager = plant
    promote(store, eager, shadow=True)
    score_step(
        store, config, STATION, None, shadow=load_shadow(store, STATION), assume_complete=True
    )
    audits = flags_frame(store, STATION)
    assert len(audits) >= 2 and (audits["decision"] == "inspect").all()
    path = tmp_path / "inspections.csv"
    frame = audits[["charge_id", "stick_id"]].iloc[:2].assign(station=STATION, result="ok")
    frame.to_csv(path, index=False)
    report = ingest_inspections(store, config, path)
    assert (report.stored, report.audit_samples) == (2, 2)
    stored = store.execute_sql(
        "SELECT i.audit, f.decision FROM inspections i JOIN flags f ON f.id = i.flag_id"
    )
    assert [(bool(a), d) for a, d in stored] == [(True, "inspect")] * 2


def test_a_failing_audit_sample_was_scrapped_and_counts_as_saved(plant, tmp_path):
    """The realized (inspected) saving of the model whose audit samples were looked at: the
    failing one scrapped saves fail_cost, the ok one costs its inspection only."""
    store, config, _, eager = plant
    promote(store, eager, shadow=True)
    score_step(
        store, config, STATION, None, shadow=load_shadow(store, STATION), assume_complete=True
    )
    audits = flags_frame(store, STATION)
    path = tmp_path / "inspections.csv"
    frame = audits[["charge_id", "stick_id"]].iloc[:3].assign(station=STATION)
    frame.assign(result=["ok", "crack", "scale"]).to_csv(path, index=False)
    ingest_inspections(store, config, path)
    st = config.station(STATION)
    realized = model_realized(store, st, eager)
    assert (realized.fail, realized.good, realized.audit, realized.audit_scrapped) == (0, 0, 3, 2)
    assert realized.saving == pytest.approx(2 * st.fail_cost - 3 * st.inspection_cost)
    assert "3 audit samples (2 failing, scrapped)" in realized_line(realized)


# ----------------------------------------------------------------------------- the draw
def test_the_share_drawn_is_binomial_and_0_draws_none_and_1_all():
    n = 4000
    charges = pd.Series([f"CH{i // 20:06d}" for i in range(n)])
    sticks = pd.Series([f"{c}-{i % 20:03d}" for i, c in enumerate(charges)])
    u = audit_draw("cooling", charges, sticks)
    assert ((u >= 0) & (u < 1)).all()
    for share in (0.05, 0.25, 0.5):
        drawn = int((u < share).sum())
        sd = np.sqrt(n * share * (1 - share))
        assert abs(drawn - n * share) <= 4 * sd, (share, drawn)
    assert not (u < 0.0).any() and (u < 1.0).all()
    # a keyed hash of the three names: another station draws other sticks, the same draws again
    assert np.array_equal(u, audit_draw("cooling", charges, sticks))
    other = audit_draw("rolling", charges, sticks)
    assert np.mean((u < 0.25) == (other < 0.25)) < 0.8


def test_the_audits_drawn_do_not_depend_on_how_the_sticks_are_cut_into_steps(
    history_plant, tmp_path
):
    config = with_station(history_plant.config, STATION, trial_audit_share=0.5)
    drawn = []
    for name, bound in (("whole", None), ("in_steps", 7)):
        folder = tmp_path / name
        folder.mkdir()
        with Store.open(history_plant.copy_to(folder)) as store:
            trained = history_plant.record_trained(store, config, STATION)
            promote(store, register_copy(store, config, trained, threshold=0.0), shadow=True)
            shadow = load_shadow(store, STATION)
            while True:
                step = score_step(
                    store,
                    config,
                    STATION,
                    None,
                    shadow=shadow,
                    assume_complete=True,
                    max_sticks=bound,
                )
                if not (step.more or step.batches_taken):
                    break
            flags = flags_frame(store, STATION)
            drawn.append(set(zip(flags["charge_id"], flags["stick_id"], strict=True)))
            assert len(shadow_rows(store)) > len(flags) > 0
    assert drawn[0] == drawn[1]


def test_a_model_below_break_even_is_audited_at_the_top_of_its_ranking(plant, history_plant):
    """Probabilities that never reach break-even: the audit band starts at the model's
    ``audit_from`` (the top of its training sticks' ranking) instead of being empty."""
    store, config, trained, _ = plant
    active = load_model(store, trained).model
    fresh = sorted(history_plant.fresh.truth["charge_id"].astype(str).unique())
    X = station_features(store, config, STATION, charge_ids=fresh, imputation=active.imputation).X
    p = active.failure_probability(X)
    top = float(np.median(np.unique(p[p < active.threshold])))
    model = active_with_audit_from(store, config, trained, top)
    config = with_station(
        config, STATION, audit_share=1.0, good_cost=300.0, fail_cost=10.0, inspection_cost=0.0
    )
    st = config.station(STATION)
    assert 0.977 > st.break_even > top  # high, within what audits can show
    assert audit_floor(st, model) == top
    score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    scored = flags[flags["decision"] != "unscorable"]
    high = scored["probability"] >= top
    assert high.any() and (~high).any()
    below_threshold = scored["probability"] < model.model.threshold
    assert (scored.loc[high & below_threshold, "decision"] == "inspect").all()
    assert not scored.loc[~high, "decision"].eq("inspect").any()


def test_no_audit_sample_where_a_look_costs_more_than_a_failing_stick_saves(plant):
    """The audit band's floor is at least ``inspection_cost / fail_cost``, and a station whose
    break-even no run of 100 failing inspections could show (above 0.1 ** (1 / 100)) has no
    band: a model whose top of ranking lies below gets no band audits, whatever
    ``audit_from`` says."""
    store, config, trained, _ = plant
    active = load_model(store, trained).model
    low = float(np.quantile([0.0, active.threshold], 0.1))
    model = active_with_audit_from(store, config, trained, low)
    config = with_station(
        config, STATION, audit_share=1.0, good_cost=300.0, fail_cost=10.0, inspection_cost=10.0
    )
    st = config.station(STATION)
    assert st.audit_pays_from == pytest.approx(1.0) and st.break_even == pytest.approx(1.0)
    assert audit_floor(st, model) == np.inf
    assert audit_band_floor(0.967, 0.8, low) == 0.8  # a look pays only from 0.8 there
    relaxed = with_station(config, STATION, inspection_cost=0.0).station(STATION)
    assert relaxed.break_even == pytest.approx(300 / 310)  # 0.968: within reach of audits
    assert audit_floor(relaxed, model) == low  # the same model audits there without the cost
    score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    p = flags["probability"]
    assert ((p >= low) & (p < model.model.threshold)).any()  # without the cost: audits
    assert not flags["decision"].eq("inspect").any()


def test_only_the_straightener_is_beyond_what_audits_can_show():
    """At the example plant's straightener a lock-out breaks even at 0.995: 459 failing
    inspections in a row would be needed to show it at 90 %; at cooling (0.924) 29."""
    cut = 0.1 ** (1 / 100)
    assert cut == pytest.approx(0.9772, abs=1e-4)
    assert audits_can_earn_lockouts(cut) and not audits_can_earn_lockouts(cut + 1e-9)
    example = load_plant_config(ROOT / "plant_config" / "example.yaml")
    beyond = [st.name for st in example.stations if not audits_can_earn_lockouts(st.break_even)]
    assert beyond == ["straightening"]


def test_a_scoring_run_names_the_active_model_and_the_shadow_apart(plant):
    """``qcllp score``'s result: with the shadow alone there is no deciding model on the
    line (the shadow is named as such); beside an active model both are named."""
    store, config, trained, eager = plant
    promote(store, eager, shadow=True)
    alone = score_station(store, config, STATION)
    assert (alone.model_id, alone.threshold, alone.shadow_id) == (None, None, eager)
    line = score_line(STATION, alone.as_dict(), "", "")
    assert f"with shadow model {eager} alone (the line gets its audit samples only):" in line
    assert "threshold" not in line and alone.counts["inspect"] > 0
    promote(store, trained)
    beside = score_station(store, config, STATION)
    assert (beside.model_id, beside.shadow_id) == (trained, eager)
    line = score_line(STATION, beside.as_dict(), "", "")
    assert f"with model {trained} (shadow model {eager} beside it) (threshold " in line


def test_no_band_audit_where_training_found_the_inspected_top_fails_too_rarely(plant):
    """A model whose training declined audits (``audits_declined``: the inspected sticks at
    its top failed too rarely to pay for a look) draws none, where the same model without
    that metric audits its band."""
    store, config, trained, _ = plant
    active = load_model(store, trained).model
    low = float(np.quantile([0.0, active.threshold], 0.1))
    config = with_station(config, STATION, audit_share=1.0, good_cost=300.0, fail_cost=10.0)
    config = with_station(config, STATION, inspection_cost=0.0)  # break-even 0.968
    st = config.station(STATION)
    auditing = active_with_audit_from(store, config, trained, low)
    assert audit_floor(st, auditing) == low
    declined = active_with_audit_from(store, config, trained, low, audits_declined=1.0)
    assert audit_floor(st, declined) == np.inf
    score_station(store, config, STATION)
    flags = flags_frame(store, STATION)
    assert (flags["model_id"] == declined.id).all()
    p = flags["probability"]
    assert ((p >= low) & (p < declined.model.threshold)).any()  # the band is not empty
    assert not flags["decision"].eq("inspect").any()
