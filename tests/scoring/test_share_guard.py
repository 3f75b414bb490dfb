"""The scorer's lock-out guard: a model that locks out far more than in training is suspended,
its would-be lock-outs pass with the reason, one alarm, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from qcllp.reporting.status import plant_status
from qcllp.scoring.share_guard import guard_state
from qcllp.scoring.step import flags_frame, score_station, score_step
from qcllp.station.guard_bounds import (
    GuardCounts,
    excess_path,
    guard_step,
    guard_trip,
    lockout_excess_bound,
    lockout_rate_bound,
)
from qcllp.station.registry import load_model, promote
from tests.support.eager_model import promote_locking_all

MIN_STICKS = 30


def test_the_share_rule_trips_only_after_enough_sticks_and_a_clear_excess():
    rng = np.random.default_rng(0)
    healthy = rng.random(5000) < 0.05
    assert guard_trip(healthy, 0.06, 300).at is None  # a model as eager as in training
    eager = rng.random(5000) < 0.15
    at = guard_trip(eager, 0.06, 300).at
    assert at is not None and at >= 299  # never before min_sticks decisions
    assert guard_trip(np.ones(10, bool), 0.06, 300).at is None
    # earlier decisions of the same model count
    assert guard_trip(np.ones(10, bool), 0.06, 300, decided=295, locked_before=100).at == 4
    # the training bound: a 99 % bootstrap quantile of the share locked out
    codes = np.repeat(np.arange(50), 40)
    bound = lockout_rate_bound(rng.random(2000), codes, 0.9)
    assert 0.1 < bound < 0.16


def test_the_excess_is_pages_cusum_of_lockouts_beyond_the_rate():
    rng = np.random.default_rng(1)
    locked = rng.random(500) < 0.2
    expected, s = [], 2.0
    for x in locked:
        s = max(0.0, s + x - 0.1)
        expected.append(s)
    assert np.allclose(excess_path(locked, 0.1, 2.0), expected)


def clustered_training(rng, n_charges=100):
    """Out-of-fold probabilities of a healthy model whose lock-outs cluster in defect-rich
    charges: a charge's share of sticks above 0.5 is 0 % to 30 %."""
    sizes = rng.integers(20, 80, n_charges)
    codes = np.repeat(np.arange(n_charges), sizes)
    rich = rng.uniform(0.0, 0.3, n_charges)[codes]
    return np.where(rng.random(len(codes)) < rich, 0.9, 0.1), codes, sizes


def test_a_healthy_model_with_clustered_lockouts_does_not_trip_the_excess_rule():
    rng = np.random.default_rng(2)
    p, codes, _ = clustered_training(rng)
    bound = lockout_rate_bound(p, codes, 0.5)
    h = lockout_excess_bound(p, codes, 0.5, bound)
    # far above what independent sticks would give (3 sd of 300 binomial decisions: ~11)
    assert h > 3 * np.sqrt(bound * (1 - bound) * 300)
    # 300 charges more of the same plant, decided stick by stick in charge order
    fresh, fresh_codes, _ = clustered_training(rng, 300)
    wants = fresh >= 0.5
    allowed, counts, at = guard_step(GuardCounts(), wants, bound, 300, h)
    assert at is None and (allowed == wants).all() and counts.decided == len(wants)


def test_the_excess_rule_trips_within_charges_of_a_change_after_a_long_healthy_run():
    rng = np.random.default_rng(3)
    p, codes, sizes = clustered_training(rng)
    bound = lockout_rate_bound(p, codes, 0.5)
    h = lockout_excess_bound(p, codes, 0.5, bound)
    healthy, _, _ = clustered_training(rng, 400)  # months of a healthy model ...
    changed = rng.random(3000) < 0.5  # ... then it locks out half the sticks
    counts = GuardCounts()
    allowed, counts, at = guard_step(counts, healthy >= 0.5, bound, 300, h)
    assert at is None
    share_only = guard_trip(
        changed, bound, 300, decided=counts.decided, locked_before=counts.locked
    ).at
    allowed, after, at = guard_step(counts, changed, bound, 300, h)
    assert at is not None and at < (h + 1) / (0.5 - bound) * 1.5
    assert share_only is None or at < share_only
    assert not allowed[at:].any() and allowed[:at].sum() == changed[:at].sum()
    assert after.suspended
    # once suspended, nothing more is locked out, and the counts go on
    allowed, later, again = guard_step(after, np.ones(10, bool), bound, 300, h)
    assert not allowed.any() and again is None and later.decided == after.decided + 10


@pytest.fixture
def eager_plant(store, history_plant, tmp_path):
    """Both engines: the history and fresh charges, and an active cooling model that locks out
    every stick although in training it locked out at most 5 %."""
    config = replace(
        history_plant.config,
        path=tmp_path / "plant.yaml",
        scorer=replace(history_plant.config.scorer, guard_min_sticks=MIN_STICKS),
    )
    history_plant.ingest_into(store, config)
    trained = history_plant.record_trained(store, config, "cooling")
    # the share rule alone (the excess rule: tests above)
    eager = promote_locking_all(store, config, "cooling", trained, rate_bound=0.05)
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
    guard = cooling["lockout_guard"]  # what the model wanted, also while suspended
    assert guard["decided"] == guard["locked"] == (decided["decision"] != "unscorable").sum()
    assert guard["excess"] == pytest.approx(guard["decided"] * 0.95)
    # promoting the suspended model again (the cause fixed) lifts the suspension
    promote(store, eager)
    cooling = next(s for s in plant_status(store, config)["stations"] if s["station"] == "cooling")
    assert cooling["lockout_suspended"] is None


def test_each_steps_guard_is_the_row_it_stored_before_at_and_after_the_trip(eager_plant):
    """A step reads the guard row once and carries it through its rules in memory; what it
    reports (the service's health and metrics read it) is what it stored."""
    store, config, _, eager = eager_plant
    model = load_model(store, eager)
    steps = []
    while not steps or steps[-1].more:
        steps.append(score_step(store, config, "cooling", model, max_sticks=MIN_STICKS // 3))
        with store.engine.connect() as conn:
            assert steps[-1].guard == guard_state(conn, "cooling", eager)
        assert len(steps) < 100
    tripped = [i for i, step in enumerate(steps) if step.alarms]
    assert len(tripped) == 1 and 0 < tripped[0] < len(steps) - 1  # steps before, at, after
    assert steps[tripped[0] - 1].guard.suspended_at is None
    assert steps[-1].guard.suspended_at is not None and steps[-1].guard.decided > MIN_STICKS


def test_the_report_puts_a_suspension_first_and_never_shows_the_rules_saving_as_the_lines(
    eager_plant, tmp_path
):
    from qcllp.reporting.plant_report import build_plant_report

    store, config, _, eager = eager_plant
    path = build_plant_report(store, config, tmp_path / "before.html")
    assert "Needs attention" not in path.read_text()  # nothing suspended yet
    score_station(store, config, "cooling")
    text = build_plant_report(store, config, tmp_path / "report.html").read_text()
    attention, summary = text.index("<h2>Needs attention</h2>"), text.index("<h2>Summary</h2>")
    assert attention < summary
    needs = text[attention:summary]
    assert f"cooling: lock-outs of model {eager} suspended since" in needs
    assert "(lockout_suspended)" in needs  # the alarm, listed too
    cooling = next(r for r in text[summary:].split("<tr>") if "<td>cooling</td>" in r)
    assert "<td>SUSPENDED since" in cooling


def test_a_suspended_stations_row_says_the_line_gets_none_of_what_its_rule_expected():
    from datetime import UTC, datetime

    from qcllp.reporting.plant_report import summary_row
    from qcllp.scoring.share_guard import Suspension

    model = {
        "id": 7,
        "status": "active",
        "method": "alter-psvm",
        "target": "defective",
        "metrics": {
            "expected_saving_per_1000": 520.7,
            "saving_low_per_1000": 46.0,
            "saving_high_per_1000": 995.0,
            "lockout_rate": 0.05,
        },
    }
    flags = pd.DataFrame({"decision": ["pass"]})
    active = summary_row("rolling", model, flags, None, "EUR")
    assert active["state"] == "locking out"
    assert active["expected saving per 1,000 sticks (90 % interval)"] == "+521 [+46, +995] EUR"
    since = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    held = summary_row("rolling", model, flags, None, "EUR", Suspension("rolling", 7, since, "x"))
    assert held["state"] == "SUSPENDED since 2026-11-26 08:00 UTC"
    assert held["expected saving per 1,000 sticks (90 % interval)"] == (
        "0 on the line while suspended (its rule expected +521 [+46, +995] EUR)"
    )
