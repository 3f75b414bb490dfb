"""Cost-based lock-out thresholds: the estimate, its bounds from the counts, the choice."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import expit, logit

from qcllp.pipeline.thresholds import (
    LockoutCosts,
    choose_threshold,
    expected_saving,
    realized_saving_per_1000,
)

COSTS = LockoutCosts(fail_cost=60.0, good_cost=440.0)


def _brute_force_saving(p, codes, counts, t, costs):
    """The same estimate, one charge and one threshold at a time, the shift by brentq."""
    total = 0.0
    for b, d in enumerate(counts):
        in_bag = p[codes == b]
        z = logit(in_bag)
        shift = brentq(lambda a, z=z, d=d: expit(z + a).sum() - d, -40, 40)
        adjusted = expit(z + shift)[in_bag >= t]
        n_locked = int(np.sum(in_bag >= t))
        good_in_bag = len(in_bag) - d
        low, high = max(n_locked - good_in_bag, 0), min(d, n_locked)
        defective = min(max(adjusted.sum(), low), high)
        total += defective * costs.fail_cost - (n_locked - defective) * costs.good_cost
    return total


def test_bayes_threshold_is_good_cost_over_total_cost():
    assert COSTS.bayes_threshold == pytest.approx(440 / 500)


@pytest.mark.parametrize("fail, good", [(-1.0, 10.0), (10.0, 0.0), (np.nan, 1.0), (1.0, np.inf)])
def test_invalid_costs_are_refused(fail, good):
    with pytest.raises(ValueError, match="cost"):
        LockoutCosts(fail_cost=fail, good_cost=good)


def test_expected_saving_equals_brute_force_for_unsorted_thresholds():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 7, size=300)
    p = rng.uniform(size=300)
    sizes = np.bincount(codes, minlength=7)
    counts = np.clip(rng.binomial(sizes, 0.3), 1, sizes - 1)  # brentq needs a sign change
    thresholds = np.array([0.9, 0.1, 0.5, 0.0, 0.75, 1.5, p[3]])
    got = expected_saving(p, codes, counts, thresholds, COSTS)
    want = [_brute_force_saving(p, codes, counts, t, COSTS) for t in thresholds]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-3)


def test_a_charge_without_defects_only_loses_whatever_the_probabilities_claim():
    p = np.array([0.99, 0.98, 0.97, 0.1])
    saving = expected_saving(p, np.zeros(4, int), np.array([0]), 0.95, COSTS)
    assert saving[0] == pytest.approx(-3 * COSTS.good_cost)


def test_locking_out_a_whole_charge_counts_exactly_its_defective_sticks():
    # the probabilities say 0.4 defective sticks; the counts say 3 of 4 are: all 4 locked
    p = np.full(4, 0.1)
    saving = expected_saving(p, np.zeros(4, int), np.array([3]), 0.0, COSTS)
    assert saving[0] == pytest.approx(3 * COSTS.fail_cost - 1 * COSTS.good_cost)


def test_given_stick_counts_bound_the_good_sticks_not_the_rows():
    # 2 rows of a charge of 10 sticks with 2 defective: nothing forces the locked ones to fail
    p = np.array([0.1, 0.1])
    rows_only = expected_saving(p, np.zeros(2, int), np.array([2]), 0.0, COSTS)
    with_sizes = expected_saving(p, np.zeros(2, int), np.array([2]), 0.0, COSTS, n_sticks=[10])
    assert rows_only[0] == pytest.approx(2 * COSTS.fail_cost)
    # 2 of 10 rows present: 0.4 defective expected among them, whatever p says
    assert with_sizes[0] == pytest.approx(0.4 * COSTS.fail_cost - 1.6 * COSTS.good_cost)


def test_separating_probabilities_lock_out_exactly_the_defective_sticks():
    rng = np.random.default_rng(1)
    codes = np.repeat(np.arange(20), 50)
    bad = rng.uniform(size=1000) < 0.15
    p = np.where(bad, rng.uniform(0.97, 1.0, 1000), rng.uniform(0.0, 0.001, 1000))
    counts = np.bincount(codes, weights=bad, minlength=20)
    choice = choose_threshold(p, codes, counts, COSTS)
    assert 0.001 < choice.threshold <= 0.97
    assert choice.lockout_rate == pytest.approx(bad.mean())
    assert choice.saving_per_1000 > 0.5 * 1000 * bad.mean() * COSTS.fail_cost
    realized = realized_saving_per_1000(p, bad, choice.threshold, COSTS)
    assert realized == pytest.approx(1000 * bad.mean() * COSTS.fail_cost)


def test_overconfident_probabilities_do_not_promise_savings_the_counts_deny():
    rng = np.random.default_rng(2)
    codes = np.repeat(np.arange(10), 30)
    p = rng.uniform(size=300)  # a tenth of the sticks claim > 0.9, but only 5 of 30 failed
    counts = np.full(10, 5)
    choice = choose_threshold(p, codes, counts, COSTS)
    assert choice.threshold > 1.0
    assert choice.lockout_rate == 0.0
    assert choice.saving_per_1000 == 0.0
    assert realized_saving_per_1000(p, rng.uniform(size=300) < 0.2, choice.threshold, COSTS) == 0


def test_nothing_to_save_at_the_last_station_means_no_lock_out():
    p = np.array([0.99, 0.98, 0.1, 0.05])
    choice = choose_threshold(p, np.zeros(4, int), np.array([2]), LockoutCosts(0.0, 100.0))
    assert choice.lockout_rate == 0.0 and choice.saving_per_1000 == 0.0


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="bag codes"):
        expected_saving(np.ones(3), np.array([0, 1, 2]), np.array([1, 1]), 0.5, COSTS)
    with pytest.raises(ValueError, match="truth"):
        realized_saving_per_1000(np.ones(3), np.ones(2), 0.5, COSTS)
