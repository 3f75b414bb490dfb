"""A shadow trial's figures on a case where every number is worked out by hand, on SQLite and
PostgreSQL: the scorer's rows (``shadow_flags``, the active model's ``flags``) inserted as the
scorer writes them, one per model and stick; readings, inspections and final QC's counts
through the real ingest functions. And the confirmation rule's three outcomes.

The case, station ``furnace`` (fail_cost 100, good_cost 300, inspection_cost by default 15:
a lock-out brings ``100 p - 300 (1 - p) - 15``, break-even 0.7875), shadow model (target
``defective``, threshold 0.5) promoted at ``SINCE``:

* ``c1``: sticks s1..s10 scored; would-be lock-outs s1..s4 (p 0.9, 0.8, 0.7, 0.6), s10
  unscorable. Inspected here: s1 crack (scrapped), s2 ok, s5 ok (an audit of a pass). The
  active rolling model locked s6 out. QC: 8 sticks (10 - s1 - s6), 2 crack + 1 bend. Counted:
  s2..s5, s7..s10; known s2, s5 (good): u = 6 unknown holding 3 failures, with s3, s4 the
  k' = 2 uninspected would-be lock-outs: [max(0, 3 - 4), min(2, 3)] = [0, 2].
* ``c2``: t1..t5, would-be lock-outs t1, t2 (0.95, 0.85); QC 5 sticks, 4 crack: nothing off
  the line, u = 5, k' = 2: [max(0, 4 - 3), 2] = [1, 2].
* ``c3``: u1..u4, would-be lock-outs u1 (0.9) and u2 (0.8, inspected: bend, scrapped); QC
  says 2 sticks, which neither 4 nor 3 (4 - u2) explains: u1 is neither counted nor
  inspected: [0, 1]; u2 is known failing.
* ``c4``: scored, a would-be lock-out inspected failing, counts not in: not in the trial.
* ``c5``: counted, but scored before the trial began: not in it.

So 3 charges, 19 sticks, k = 8 would-be lock-outs, m = 3 inspected (s1, s2, u2), f = 2
failing; failures among them from 2 + 0 + 1 = 3 to 2 + 2 + 2 + 1 = 7.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from scipy.stats import binomtest
from sqlalchemy import insert

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.ingest.inspections import ingest_inspections
from qcllp.plant.config import Retrainer
from qcllp.retraining.promotion import running_trial
from qcllp.retraining.shadow_check import check_trial
from qcllp.retraining.shadow_trial import (
    TrialFigures,
    judge_trial,
    precision_bounds,
    trial_figures,
)
from qcllp.station.registry import get_model
from qcllp.store import Flag, Model, ShadowFlag
from qcllp.store.events import events
from tests.ingest.helpers import write_csv

SINCE = datetime(2025, 1, 6, 5, 0, tzinfo=UTC)
STICKS = {
    "c1": [f"s{i}" for i in range(1, 11)],
    "c2": [f"t{i}" for i in range(1, 6)],
    "c3": [f"u{i}" for i in range(1, 5)],
    "c4": ["w1", "w2"],
    "c5": ["x1", "x2"],
}
LOCKOUTS = {"s1": 0.9, "s2": 0.8, "s3": 0.7, "s4": 0.6, "t1": 0.95, "t2": 0.85}
LOCKOUTS |= {"u1": 0.9, "u2": 0.8, "w1": 0.9, "x1": 0.9}
INSPECTED = {"s1": "crack", "s2": "ok", "s5": "ok", "u2": "bend", "w1": "crack"}
COUNTS = "c1,8,2,1\nc2,5,4,0\nc3,2,1,0\nc5,2,1,0\n"


def _model(conn, station: str, status: str, threshold: float) -> int:
    now = datetime.now(UTC)
    return conn.execute(
        insert(Model.__table__).values(
            station=station, method="invcal", target="defective", params={},
            metrics={"threshold": threshold}, features=[], artifact_path="-", sha256="0" * 64,
            status=status, n_charges=1, n_sticks=1, qcllp_version="test", created_at=now,
            promoted_at=SINCE,
        )
    ).inserted_primary_key[0]  # fmt: skip


def _scored(charge: str, stick: str) -> dict:
    p = LOCKOUTS.get(stick, None if stick == "s10" else 0.1)
    decision = "unscorable" if p is None else "lock_out" if p >= 0.5 else "pass"
    at = SINCE - timedelta(hours=1) if charge == "c5" else SINCE + timedelta(hours=1)
    return {"charge_id": charge, "stick_id": stick, "probability": p, "decision": decision,
            "scored_at": at}  # fmt: skip


def build_trial(store, config, folder) -> int:
    """The case of the module docstring; the shadow model's id."""
    rows = "".join(
        f"{c},{s},furnace,2025-01-06T06:00:00Z,temperature,1100\n"
        for c, sticks in STICKS.items()
        for s in sticks
    )
    ingest_measurements(store, config, write_csv(folder, "readings.csv", rows))
    with store.engine.begin() as conn:
        shadow = _model(conn, "furnace", "shadow", 0.5)
        active = _model(conn, "rolling", "active", 0.5)
        for charge, sticks in STICKS.items():
            conn.execute(
                insert(ShadowFlag.__table__),
                [{"station": "furnace", "model_id": shadow, "threshold": 0.5,
                  **_scored(charge, s)} for s in sticks],
            )  # fmt: skip
        conn.execute(
            insert(Flag.__table__).values(
                station="rolling", charge_id="c1", stick_id="s6", model_id=active,
                probability=0.9, flagged=True, decision="lock_out", threshold=0.5,
                scored_at=SINCE,
            )
        )  # fmt: skip
    body = "".join(
        f"{next(c for c, s in STICKS.items() if stick in s)},{stick},furnace,{result}\n"
        for stick, result in INSPECTED.items()
    )
    header = "charge_id,stick_id,station,result\n"
    report = ingest_inspections(store, config, write_csv(folder, "insp.csv", body, header))
    assert report.stored == len(INSPECTED), report
    header = "charge_id,n_sticks,crack,bend\n"
    ingest_defect_counts(store, config, write_csv(folder, "counts.csv", COUNTS, header))
    return shadow


def test_the_figures_of_a_hand_built_trial(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    fig = trial_figures(store, tiny_config, "furnace", get_model(store, shadow))
    assert (fig.charges, fig.sticks, fig.lockouts) == (3, 19, 8)
    assert (fig.inspected, fig.inspected_failing) == (3, 2)
    assert (fig.failing_low, fig.failing_high) == (3, 7)
    per = 1000 / 19
    look = 15 * 8  # each of the 8 would-be lock-outs looked at the bay
    assert fig.bounded_low_per_1000 == pytest.approx(per * (100 * 3 - 300 * 5 - look))
    assert fig.bounded_high_per_1000 == pytest.approx(per * (100 * 7 - 300 * 1 - look))
    p = sum(LOCKOUTS[s] for s in ("s1", "s2", "s3", "s4", "t1", "t2", "u1", "u2"))
    assert fig.expected_per_1000 == pytest.approx(per * (100 * p - 300 * (8 - p) - look))
    low = binomtest(2, 3, alternative="greater").proportion_ci(0.9, "exact").low
    high = binomtest(2, 3, alternative="less").proportion_ci(0.9, "exact").high
    assert (fig.precision_low, fig.precision_high) == pytest.approx((low, high))
    for value, precision in [
        (fig.measured_per_1000, 2 / 3),
        (fig.measured_low_per_1000, low),
        (fig.measured_high_per_1000, high),
    ]:
        assert value == pytest.approx(per * 8 * (100 * precision - 300 * (1 - precision) - 15))
    line = fig.line("EUR")
    assert "3 charges counted, 8 would-be lock-outs of 19 sticks" in line
    assert (
        f"bounded by the counts [{per * (-1200 - look):+,.0f}, {per * (400 - look):+,.0f}] EUR"
        in line
    )
    assert "on 3 inspected (2 failing)" in line and "(model-based)" in line


def test_a_trial_without_counted_charges_has_no_figures_yet(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE charges SET n_sticks = NULL")
    fig = trial_figures(store, tiny_config, "furnace", get_model(store, shadow))
    assert (fig.charges, fig.sticks, fig.lockouts, fig.inspected) == (0, 0, 0, 0)
    assert fig.measured_per_1000 is None and fig.bounded_low_per_1000 is None
    assert "measured: none inspected yet" in fig.line()


# ----------------------------------------------------------------------------- the rule
RULE = Retrainer(shadow_min_charges=25, shadow_min_audits=20, shadow_confirm_level=0.9)


def figures(charges: int, inspected: int, failing: int, threshold: float = 0.5) -> TrialFigures:
    low, high = precision_bounds(failing, inspected, 0.9)
    return TrialFigures(
        "furnace", 7, SINCE, threshold, charges, 1000, 40, inspected, failing, 0.9,
        failing / inspected if inspected else None, low, high, None, None, None, None, None, None,
    )  # fmt: skip


def test_the_rule_waits_for_enough_charges_and_inspected_lockouts():
    assert judge_trial(figures(24, 40, 40), 0.75, RULE).reason == "24 of 25 charges counted"
    verdict = judge_trial(figures(25, 19, 19), 0.75, RULE)
    assert verdict.outcome == "wait" and "19 of 20 would-be lock-outs inspected" in verdict.reason


def test_the_rule_confirms_on_the_lower_bound_and_rejects_on_the_upper_one():
    # 19 of 20 failing: lower one-sided 90 % bound 0.825 >= 0.75
    ok = judge_trial(figures(25, 20, 19), 0.75, RULE)
    assert ok.outcome == "confirm" and "19/20" in ok.reason, ok
    # 10 of 20: upper bound 0.66 < 0.75
    bad = judge_trial(figures(25, 20, 10), 0.75, RULE)
    assert bad.outcome == "reject" and "lose money" in bad.reason, bad
    # 15 of 20 (0.75 itself): the bounds straddle break-even
    undecided = judge_trial(figures(25, 20, 15), 0.75, RULE)
    assert undecided.outcome == "wait" and "not yet decided" in undecided.reason
    assert precision_bounds(19, 20, 0.9)[0] >= 0.75 > precision_bounds(10, 20, 0.9)[1]


def test_a_model_that_locks_out_nothing_has_nothing_to_try():
    verdict = judge_trial(figures(0, 0, 0, threshold=1.5), 0.75, RULE)
    assert verdict.outcome == "confirm" and "nothing to try" in verdict.reason


def test_a_trial_still_undecided_after_its_longest_run_is_inconclusive():
    rule = replace(RULE, shadow_max_charges=100)
    assert judge_trial(figures(99, 20, 15), 0.75, rule).outcome == "wait"
    for fig in (figures(100, 20, 15), figures(100, 3, 3)):  # straddling; too few inspected
        verdict = judge_trial(fig, 0.75, rule)
        assert verdict.outcome == "inconclusive", verdict
        assert verdict.reason.startswith("undecided after 100 charges counted")
    assert judge_trial(figures(100, 20, 10), 0.75, rule).outcome == "reject"  # decided first
    short = replace(RULE, shadow_max_charges=5)  # never below shadow_min_charges
    assert judge_trial(figures(24, 20, 15), 0.75, short).outcome == "wait"


def test_the_measured_evidence_decides_not_the_models_claim():
    fig = replace(figures(25, 20, 10), expected_per_1000=5000.0)
    assert judge_trial(fig, 0.75, RULE).outcome == "reject"


# ----------------------------------------------------------------------------- the job
def more_inspections(store, config, folder, result: str) -> None:
    """The trial's other uninspected would-be lock-outs in c1 and c2 inspected: ``result``."""
    body = "".join(f"c1,{s},furnace,{result}\n" for s in ("s3", "s4"))
    body += "".join(f"c2,{s},furnace,{result}\n" for s in ("t1", "t2"))
    path = write_csv(folder, "more.csv", body, "charge_id,stick_id,station,result\n")
    assert ingest_inspections(store, config, path).stored == 4


def judged(config, **settings):
    rule = replace(config.retrainer, shadow_min_charges=3, shadow_min_audits=3, **settings)
    return replace(config, retrainer=rule)


def test_a_losing_trial_is_rejected_and_retired_with_its_figures(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    config = judged(tiny_config)
    first = check_trial(store, config, "furnace")
    assert first.outcome == "waiting" and "not yet decided" in first.reason  # 2 of 3 failing
    assert check_trial(store, config, "furnace").outcome == "waiting"
    assert len(events(store, ["shadow"], station="furnace")) == 1  # said once, not per check
    more_inspections(store, config, tmp_path, "ok")  # 2 of 7 failing: upper bound 0.60
    check = check_trial(store, config, "furnace")
    assert check.outcome == "rejected" and "lose money" in check.reason, check
    assert get_model(store, shadow)["status"] == "retired"
    (event,) = events(store, ["rejected"], station="furnace")
    assert event["model_id"] == shadow and event["outcome"] == "retired"
    assert event["detail"]["figures"]["inspected"] == 7
    assert "7 inspected (2 failing)" in event["detail"]["line"]
    assert check_trial(store, config, "furnace") is None  # nothing left to judge


def test_an_inconclusive_trial_is_retired_and_frees_the_station(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)  # 2 of 3 failing: undecided
    waiting = judged(tiny_config, shadow_max_charges=4)
    assert "decided first (3 of at most 4 charges counted" in running_trial(
        store, waiting, "furnace", shadow + 100
    )
    assert check_trial(store, waiting, "furnace").outcome == "waiting"
    config = judged(tiny_config, shadow_max_charges=3)
    assert running_trial(store, config, "furnace", shadow + 100) is None
    check = check_trial(store, config, "furnace")
    assert check.outcome == "inconclusive" and "undecided after 3 charges" in check.reason
    assert get_model(store, shadow)["status"] == "retired"
    (event,) = events(store, ["rejected"], station="furnace")
    assert (event["model_id"], event["outcome"]) == (shadow, "inconclusive")
    assert check_trial(store, config, "furnace") is None


def test_manual_confirmation_only_says_what_is_due(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    config = judged(tiny_config, shadow_confirm="manual")
    more_inspections(store, config, tmp_path, "ok")
    check = check_trial(store, config, "furnace")
    assert check.outcome == "reject_due" and "shadow_confirm is manual" in check.reason
    assert get_model(store, shadow)["status"] == "shadow"
    assert [e["outcome"] for e in events(store, ["shadow"], station="furnace")] == ["reject_due"]


def test_a_confirmed_model_whose_artifact_fails_stays_in_shadow_and_says_why(
    store, tiny_config, tmp_path
):
    shadow = build_trial(store, tiny_config, tmp_path)
    unseen = [replace(st, inspection_cost=0.0) for st in tiny_config.stations]
    config = judged(replace(tiny_config, stations=tuple(unseen)), shadow_confirm_level=0.51)
    # scrapped unseen: break-even 0.75; 6 of 7 failing: lower bound 0.77
    more_inspections(store, config, tmp_path, "crack")
    check = check_trial(store, config, "furnace")
    assert check.outcome == "failed" and "cannot be promoted" in check.reason, check
    assert get_model(store, shadow)["status"] == "shadow"
    assert events(store, ["confirmed"], station="furnace") == []


def test_before_any_inspection_only_the_counts_and_the_model_speak(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM inspections")
    fig = trial_figures(store, tiny_config, "furnace", get_model(store, shadow))
    assert (fig.lockouts, fig.inspected, fig.measured_per_1000) == (8, 0, None)
    # c1 now has 9 sticks left after s6 against QC's 8: its 4 would-be lock-outs join c3's 2
    # as unplaced ([0, 6]); c2 holds [1, 2]
    assert (fig.failing_low, fig.failing_high) == (1, 8)
    assert judge_trial(fig, 0.75, RULE).outcome == "wait"
