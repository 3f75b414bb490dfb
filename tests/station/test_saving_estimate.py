"""A saving's interval for a week of production: the charges of a week, the spread of a
week's realized saving, and the interval a model states holding the weeks it is for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qcllp.station.lockout_rule import (
    LockoutCosts,
    count_calibration,
    held_out_saving,
    lockout_rule,
)
from qcllp.station.saving_estimate import (
    SavingEstimate,
    charges_per_week,
    period_spread,
    week_spread,
)

COSTS = LockoutCosts(fail_cost=60.0, good_cost=440.0, inspection_cost=5.0)


def _charges(rng: np.random.Generator, n_bags: int, signal: float = 6.0):
    """Charges whose sticks fail with a known probability ``p``: a charge-level effect moves
    the scores of a whole charge, so charges differ in how many sticks reach a threshold."""
    sizes = rng.integers(20, 60, n_bags)
    codes = np.repeat(np.arange(n_bags), sizes)
    f = rng.normal(size=len(codes)) + 0.5 * rng.normal(size=n_bags)[codes]
    p = 1 / (1 + np.exp(-(signal * f - 3.0)))
    return f, codes, p, rng.random(len(p)) < p


def _realized_per_1000(p, codes, bad, threshold) -> float:
    locked = p >= threshold
    gain = np.where(bad, COSTS.fail_cost, -COSTS.good_cost) - COSTS.inspection_cost
    return 1000 * gain[locked].sum() / len(codes)


def test_a_week_holds_the_charges_that_arrived_in_seven_days_at_the_history_s_rate():
    start = pd.Timestamp("2026-01-05", tz="UTC")
    every = pd.Timedelta(days=28) / 100  # 101 charges over four weeks: 25 a week
    times = pd.Series([start + k * every for k in range(101)]).sample(frac=1, random_state=0)
    assert charges_per_week(times) == 25
    assert charges_per_week(pd.concat([times, pd.Series([pd.NaT])])) == 25
    assert charges_per_week(pd.Series([start + k * pd.Timedelta(days=30) for k in range(3)])) == 1
    assert charges_per_week(pd.Series([start, start])) is None
    assert charges_per_week(pd.Series([start])) is None
    assert charges_per_week(None) is None


def test_the_week_s_spread_is_that_of_weeks_drawn_from_the_same_plant():
    """The delta method's spread against 3,000 simulated weeks of 25 fresh charges each, the
    locked sticks failing with their own probability: within 10 %."""
    rng = np.random.default_rng(0)
    _, codes, p, _ = _charges(rng, 400)
    threshold = 0.9
    stated = week_spread(p, codes, 400, threshold, COSTS, period_charges=25)
    weeks = []
    for _ in range(3000):
        _, c, q, bad = _charges(rng, 25)
        weeks.append(_realized_per_1000(q, c, bad, threshold))
    assert stated == pytest.approx(np.std(weeks), rel=0.10), (stated, np.std(weeks))
    longer = week_spread(p, codes, 400, threshold, COSTS, period_charges=100)
    assert longer == pytest.approx(stated / 2, rel=1e-9)  # four times the charges


def test_an_inspected_precision_sets_each_locked_stick_s_chance_of_failing():
    rng = np.random.default_rng(1)
    _, codes, p, _ = _charges(rng, 200)
    sure = week_spread(p, codes, 200, 0.9, COSTS, 25, precision=1.0)
    unsure = week_spread(p, codes, 200, 0.9, COSTS, 25, precision=0.9)
    assert 0 < sure < unsure  # at precision 1 only the charges' lock-out counts vary


def test_period_spread_is_zero_without_sticks_and_from_outcomes_alone_when_charges_agree():
    assert period_spread(np.zeros(3), np.zeros(3), np.zeros(3), 25) == 0.0
    same = period_spread(np.full(4, 10.0), np.full(4, 400.0), np.full(4, 50.0), 4)
    assert same == pytest.approx(1000 * np.sqrt(400.0 / 4) / 50.0)


def test_widening_adds_the_week_in_quadrature_on_each_side():
    z = 1.6448536269514722
    stated = SavingEstimate(100.0, 40.0, 130.0, basis="inspected")
    assert stated.widened(0.0, None) == stated
    wide = stated.widened(50.0, 25)
    assert wide.low == pytest.approx(100.0 - np.hypot(60.0, z * 50.0))
    assert wide.high == pytest.approx(100.0 + np.hypot(30.0, z * 50.0))
    assert (wide.per_1000, wide.basis, wide.period_charges) == (100.0, "inspected", 25)


def test_the_weekly_interval_holds_the_weeks_it_is_for_better_than_the_training_period_s():
    """Five plants of 120 training charges; each model's held-out estimate stated for weeks of
    25 charges and, as before, for a period as long as the training one; 200 fresh weeks each.
    The weekly interval holds more weeks on every plant (0.69 against 0.35 on the first) and
    73 % of all. What it still misses is the estimate's own error: on one plant the count
    calibration puts the top of the ranking at half its true failure rate, and no spread of a
    week covers that (issue 33's note)."""
    rule = {"n_boot": 10, "random_state": 0}
    held = {"weekly": [], "training": []}
    for seed in range(2, 7):
        rng = np.random.default_rng(seed)
        f, codes, _, bad = _charges(rng, 120)
        positives = np.bincount(codes, bad, minlength=120)
        fitted, refits = count_calibration(f, codes, positives)
        weekly = held_out_saving(f, codes, positives, COSTS, refits, period_charges=25, **rule)
        training = held_out_saving(f, codes, positives, COSTS, refits, **rule)
        assert weekly.period_charges == 25 and training.period_charges is None
        assert weekly.low < training.low and training.high < weekly.high
        threshold = lockout_rule(f, codes, positives, COSTS, refits, **rule).threshold
        assert threshold <= 1.0  # it locks out
        realized = np.array(
            [
                _realized_per_1000(fitted.predict(wf), wc, wbad, threshold)
                for wf, wc, _, wbad in (_charges(rng, 25) for _ in range(200))
            ]
        )
        for name, stated in (("weekly", weekly), ("training", training)):
            held[name].append(np.mean((realized >= stated.low) & (realized <= stated.high)))
    weekly, training = np.array(held["weekly"]), np.array(held["training"])
    assert (weekly >= training + 0.1).all(), held
    assert weekly.mean() >= 0.70, held
