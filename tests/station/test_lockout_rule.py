"""Cost-based lock-out decisions: the saving per charge, the rule that asks for evidence, the
estimate on unseen charges."""

from __future__ import annotations

import numpy as np
import pytest

from qcllp.learn.calibration import CountCalibrator
from qcllp.station.lockout_rule import (
    LockoutCosts,
    charge_savings,
    count_calibration,
    expected_saving,
    held_out_saving,
    lockout_rule,
)
from qcllp.station.realized import realized_saving_per_1000

COSTS = LockoutCosts(fail_cost=60.0, good_cost=440.0)


def calibrate(f, codes, positives):
    """Cold fits (what count_calibration's warm refits must agree with)."""
    return CountCalibrator().fit(f, codes, positives).predict


def warm(f, codes, positives):
    return count_calibration(f, codes, positives)[1]


def test_warm_refits_fit_as_well_as_cold_fits():
    """A bootstrap refit starts from the full fit; on a small subset of charges the count
    likelihood is flat, so the parameters may differ, but the fit must be as good."""
    from qcllp.learn.calibration import poisson_binomial_logpmf

    f, codes, counts, _ = _plant(7, signal=3.0)
    for stop in (499, 1500):
        rows, sub = slice(0, stop + 1), counts[: codes[stop] + 1]
        warm_p = warm(f, codes, counts)(f[rows], codes[rows], sub)(f[rows])
        cold_p = calibrate(f[rows], codes[rows], sub)(f[rows])
        warm_ll = poisson_binomial_logpmf(warm_p, codes[rows], sub).sum()
        cold_ll = poisson_binomial_logpmf(cold_p, codes[rows], sub).sum()
        assert warm_ll >= cold_ll - 0.05, (stop, warm_ll, cold_ll)


def identity(f, codes, positives):
    """Decision values that are already probabilities (no calibration)."""
    return lambda x: np.asarray(x, dtype=float)


def _plant(seed: int, signal: float, n_bags: int = 80, rate_shift: float = -3.0):
    """Scores with a known relation to the truth: P(fail) = sigmoid(signal * f + rate_shift)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 60, n_bags)
    codes = np.repeat(np.arange(n_bags), sizes)
    f = rng.normal(size=len(codes)) + 0.3 * rng.normal(size=n_bags)[codes]
    bad = rng.random(len(f)) < 1 / (1 + np.exp(-(signal * f + rate_shift)))
    return f, codes, np.bincount(codes, bad, minlength=n_bags), bad


def test_bayes_threshold_is_good_cost_over_total_cost():
    assert COSTS.bayes_threshold == pytest.approx(440 / 500)


@pytest.mark.parametrize("fail, good", [(-1.0, 10.0), (10.0, 0.0), (np.nan, 1.0), (1.0, np.inf)])
def test_invalid_costs_are_refused(fail, good):
    with pytest.raises(ValueError, match="cost"):
        LockoutCosts(fail_cost=fail, good_cost=good)


def test_charge_savings_equal_brute_force_for_unsorted_thresholds():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=200)
    codes = rng.integers(0, 7, 200)
    thresholds = np.array([0.9, 0.2, 0.5, 0.95])
    got = charge_savings(p, codes, 7, thresholds, COSTS)
    for i, t in enumerate(thresholds):
        for k in range(7):
            locked = p[(codes == k) & (p >= t)]
            want = np.sum(locked * COSTS.fail_cost - (1 - locked) * COSTS.good_cost)
            assert got[i, k] == pytest.approx(want)


def test_a_model_that_separates_failures_locks_them_out_and_says_what_it_saves():
    f, codes, counts, bad = _plant(1, signal=6.0)
    choice = lockout_rule(f, codes, counts, COSTS, warm(f, codes, counts), random_state=0)
    assert not choice.declined and choice.threshold >= COSTS.bayes_threshold
    assert 0 < choice.saving_bound_per_1000 <= choice.saving_per_1000
    p = calibrate(f, codes, counts)(f)
    assert realized_saving_per_1000(p, bad, choice.threshold, COSTS) > 0
    # a fresh plant of the same kind realizes a saving inside the stated interval (10
    # resamples per held-out group: the rule's outcome here, at a third of the time)
    estimate = held_out_saving(
        f, codes, counts, COSTS, warm(f, codes, counts), n_boot=10, random_state=0
    )
    f2, codes2, _, bad2 = _plant(2, signal=6.0)
    realized = realized_saving_per_1000(
        calibrate(f, codes, counts)(f2), bad2, choice.threshold, COSTS
    )
    assert estimate.low <= realized <= estimate.high, (estimate, realized)
    assert estimate.low < estimate.per_1000 < estimate.high


def test_without_evidence_the_station_declines_rather_than_gamble():
    """Scores unrelated to the truth: no threshold's lower bound is positive."""
    f, codes, counts, _ = _plant(3, signal=0.0, rate_shift=-1.5)
    choice = lockout_rule(f, codes, counts, COSTS, warm(f, codes, counts), random_state=0)
    assert choice.declined and choice.threshold > 1.0
    assert choice.lockout_rate == 0.0 and choice.saving_per_1000 == 0.0
    estimate = held_out_saving(
        f, codes, counts, COSTS, warm(f, codes, counts), n_boot=10, random_state=0
    )
    assert estimate.per_1000 == estimate.low == estimate.high == 0.0


def test_a_model_that_declines_states_a_saving_of_exactly_zero():
    """Marginal evidence: the rule declines on all charges, though it locks out on some of
    the held-out groups' subsets (the procedure's held-out saving is positive). The model
    locks out nothing, so what it states is 0 with no spread, not the procedure's figure."""
    f, codes, counts, _ = _plant(0, signal=3.0, n_bags=40)
    rule = {"n_boot": 10, "random_state": 0}
    choice = lockout_rule(f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert choice.declined
    procedure = held_out_saving(f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert procedure.per_1000 > 0
    stated = expected_saving(choice, f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert stated.per_1000 == stated.low == stated.high == 0.0
    locking = lockout_rule(
        f, codes, counts, LockoutCosts(200.0, 100.0), warm(f, codes, counts), **rule
    )
    assert not locking.declined  # cheap lock-outs: it locks, and states the held-out figure
    costs = LockoutCosts(200.0, 100.0)
    assert expected_saving(locking, f, codes, counts, costs, warm(f, codes, counts), **rule) == (
        held_out_saving(f, codes, counts, costs, warm(f, codes, counts), **rule)
    )


def test_a_model_that_locks_out_where_every_held_out_refit_declines_states_its_own_figure():
    """The other side of marginal evidence: the rule locks out on all charges, but declines
    on each held-out group's subset, so the held-out figure is 0 [0, 0], "saves nothing", of
    a model that locks out. The model states the rule's figure on its training charges,
    labelled in-sample: from the bootstrap's bound up to the point's mirror image, widened
    by a week's own spread (here a period as long as the training one)."""
    f, codes, counts, _ = _plant(24, signal=3.0, n_bags=60)
    rule = {"n_boot": 10, "random_state": 0}
    choice = lockout_rule(f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert not choice.declined and 0 < choice.saving_bound_per_1000 < choice.saving_per_1000
    procedure = held_out_saving(f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert procedure.per_1000 == procedure.low == procedure.high == 0.0
    assert procedure.basis == "held-out"
    stated = expected_saving(choice, f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert stated.basis == "in-sample"
    point, bound = choice.saving_per_1000, choice.saving_bound_per_1000
    assert stated.per_1000 == pytest.approx(point)
    assert stated.low < bound and stated.high > 2 * point - bound
    assert stated.high - point == pytest.approx(point - stated.low)


def test_overconfident_probabilities_do_not_buy_a_lock_out_the_counts_deny():
    """A tenth of the sticks claim p > 0.9 (taken as they are), but 5 of 30 per charge fail
    at random: the calibration the counts allow says they are ordinary sticks."""
    rng = np.random.default_rng(4)
    codes = np.repeat(np.arange(40), 30)
    p = rng.uniform(size=1200)
    counts = np.full(40, 5.0)
    raw = identity(p, codes, counts)(p)
    assert lockout_rule(raw, codes, counts, COSTS, identity).declined is False  # trusting p
    logit = np.log(p) - np.log1p(-p)
    assert lockout_rule(
        logit, codes, counts, COSTS, warm(logit, codes, counts), random_state=0
    ).declined


def test_nothing_to_save_at_the_last_station_means_no_lock_out():
    f, codes, counts, _ = _plant(5, signal=6.0)
    choice = lockout_rule(f, codes, counts, LockoutCosts(0.0, 100.0), warm(f, codes, counts))
    assert choice.declined and choice.lockout_rate == 0.0


def test_same_seed_same_rule_and_estimate():
    f, codes, counts, _ = _plant(6, signal=4.0)
    rule = {"n_boot": 10, "random_state": 3}  # equality, not the estimate: fewer resamples
    a = held_out_saving(f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    b = held_out_saving(f, codes, counts, COSTS, warm(f, codes, counts), **rule)
    assert a == b and a.low < a.per_1000 < a.high


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="bag codes"):
        lockout_rule(np.ones(3), np.array([0, 1, 2]), np.array([1, 1]), COSTS, identity)
    with pytest.raises(ValueError, match="decision values"):
        lockout_rule(np.ones(3), np.array([0, 1]), np.array([1, 1]), COSTS, identity)
    with pytest.raises(ValueError, match="truth"):
        realized_saving_per_1000(np.ones(3), np.ones(2), 0.5, COSTS)
