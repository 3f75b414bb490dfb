"""The inspected threshold of the lock-out rule (issue item 2b, the other direction from the
brake): the inspected sticks at the top of the ranking, out of fold, set a threshold where the
counts declined (or lower it), as far as the exact one-sided 90 % lower bound of their
precision reaches break-even, and the figures the model then states are theirs."""

from __future__ import annotations

import numpy as np
import pytest

from qcllp.station.lockout_rule import (
    LockoutCosts,
    ThresholdChoice,
    declined_choice,
)
from qcllp.station.precision import (
    count_precision_ceiling,
    precision_bounds,
    precision_lower_bounds,
)
from qcllp.training import lockout
from qcllp.training.lockout import (
    BRAKE_LEVEL,
    COVERAGE,
    INSPECTED,
    MIN_INSPECTED,
    audit_evidence,
    inspected_brake,
    inspected_saving,
    inspected_threshold,
)
from qcllp.training.out_of_fold import calibration_units

COSTS = LockoutCosts(fail_cost=180.0, good_cost=400.0)  # break-even 0.690 (the furnace)
N_CHARGES = 100


def units(failing: np.ndarray, share: float = 0.5):
    """The rule's units of ``len(failing)`` sticks in 100 charges (row i in charge i % 100),
    each charge's final-QC count ``share`` of its sticks (the inspected failures among them):
    generous counts by default, which never bind."""
    charges = np.arange(len(failing)) % N_CHARGES
    sizes = np.bincount(charges, minlength=N_CHARGES)
    return calibration_units(charges, np.round(share * sizes), failing)


def inspected_top(n_inspected: int, failing_of: list[int], n: int = 2000, seed: int = 0):
    """``n`` sticks with distinct probabilities in [0, 0.6) (all below break-even, as a
    count-recalibrated top that the counts could not show is sure); the ``n_inspected``
    highest are inspected, and ``failing_of`` lists, from the top, 1/0 per inspected stick."""
    rng = np.random.default_rng(seed)
    p = np.sort(rng.uniform(0.0, 0.6, n))[::-1].copy()
    failing = np.full(n, np.nan)
    failing[:n_inspected] = failing_of
    order = rng.permutation(n)  # rows in any order
    return p[order], failing[order]


def inspected_shares(p: np.ndarray, failing: np.ndarray) -> dict[float, float]:
    """Per inspected probability ``t`` with ten inspected at or above it: the inspected share
    of all sticks at or above ``t`` (the coverage condition's measure), one at a time."""
    seen = ~np.isnan(failing)
    shares = {}
    for t in np.unique(p[seen]):
        if (seen & (p >= t)).sum() >= MIN_INSPECTED:
            shares[t] = (seen & (p >= t)).sum() / (p >= t).sum()
    return shares


def reference_share(p: np.ndarray, failing: np.ndarray) -> float:
    """The coverage's reference: the inspected share of the sticks at or above the median
    inspected stick (at least the tenth from the top)."""
    q = np.sort(p[~np.isnan(failing)])[::-1]
    k = min(len(q), max(MIN_INSPECTED, (len(q) + 1) // 2))
    return k / np.sum(p >= q[k - 1])


def lowest_supported(p: np.ndarray, failing: np.ndarray, be: float) -> float | None:
    """The definition, one candidate at a time with the scalar bound and the coverage."""
    seen = ~np.isnan(failing)
    shares = inspected_shares(p, failing)
    best = None
    for t, share in shares.items():
        above = seen & (p >= t)
        m, f = int(above.sum()), int(failing[above].sum())
        covered = share >= COVERAGE * reference_share(p, failing)
        if covered and precision_bounds(f, m, BRAKE_LEVEL)[0] >= be:
            best = t if best is None else min(best, t)
    return best


def test_the_vectorized_bound_is_the_exact_clopper_pearson_bound():
    f = np.array([0, 1, 3, 21, 40, 100, 7])
    m = np.array([5, 1, 10, 24, 42, 100, 10])
    expected = [precision_bounds(int(a), int(b), 0.9)[0] for a, b in zip(f, m, strict=True)]
    np.testing.assert_allclose(precision_lower_bounds(f, m, 0.9), expected, rtol=1e-9)


def test_where_the_counts_declined_a_precise_inspected_top_sets_the_threshold():
    labels = [1] * 25 + [0, 1, 1, 0, 1] + [0] * 10  # 28 of the top 30 failing, then good
    p, failing = inspected_top(40, labels)
    choice = inspected_threshold(declined_choice(COSTS), p, failing, COSTS, units(failing))
    t = lowest_supported(p, failing, COSTS.bayes_threshold)
    assert t is not None and choice.threshold == pytest.approx(t)
    assert choice.basis == INSPECTED and not choice.declined
    above = ~np.isnan(failing) & (p >= t)
    assert (choice.inspected, choice.inspected_failing) == (
        int(above.sum()),
        int(failing[above].sum()),
    )
    assert choice.threshold < COSTS.bayes_threshold  # the counts' probability is not the point
    assert choice.lockout_rate == pytest.approx(np.mean(p >= t))
    precision = choice.inspected_failing / choice.inspected
    per_stick = precision * COSTS.fail_cost - (1 - precision) * COSTS.good_cost
    assert choice.saving_per_1000 == pytest.approx(1000 * choice.lockout_rate * per_stick)
    assert choice.saving_bound_per_1000 >= 0.0  # at the bound: break-even at worst
    assert inspected_brake(choice, p, failing, COSTS) is choice  # the brake agrees


def test_the_stated_saving_is_the_inspected_precision_with_its_bounds():
    p, failing = inspected_top(40, [1] * 25 + [0, 1, 1, 0, 1] + [0] * 10)
    choice = inspected_threshold(declined_choice(COSTS), p, failing, COSTS, units(failing))
    saving = inspected_saving(choice, COSTS)
    lo, hi = precision_bounds(choice.inspected_failing, choice.inspected, 0.95)
    rate = choice.lockout_rate
    assert saving.per_1000 == pytest.approx(choice.saving_per_1000)
    assert saving.low == pytest.approx(1000 * rate * (lo * 180 - (1 - lo) * 400))
    assert saving.high == pytest.approx(1000 * rate * (hi * 180 - (1 - hi) * 400))
    assert saving.low < saving.per_1000 < saving.high and saving.level == 0.9
    weekly = inspected_saving(choice, COSTS, week=(30.0, 25))
    assert weekly.period_charges == 25 and weekly.per_1000 == saving.per_1000
    assert weekly.low == pytest.approx(
        saving.per_1000 - np.hypot(saving.per_1000 - saving.low, 1.6448536 * 30)
    )
    assert weekly.high == pytest.approx(
        saving.per_1000 + np.hypot(saving.high - saving.per_1000, 1.6448536 * 30)
    )


@pytest.mark.parametrize(
    ("n_inspected", "labels"),
    [
        (MIN_INSPECTED - 1, [1] * (MIN_INSPECTED - 1)),  # too few, however precise
        (40, [1, 0] * 20),  # half failing: the bound stays below 0.69
        (0, []),
    ],
    ids=["too few inspected", "imprecise", "none inspected"],
)
def test_without_enough_evidence_nothing_changes(n_inspected, labels):
    p, failing = inspected_top(n_inspected, labels)
    declined = declined_choice(COSTS)
    assert inspected_threshold(declined, p, failing, COSTS, units(failing)) is declined
    assert inspected_threshold(declined, p, None, COSTS, units(failing)) is declined


def test_it_never_raises_a_threshold_the_counts_chose():
    p, failing = inspected_top(40, [1] * 30 + [0] * 10)
    counts = ThresholdChoice(0.05, 900.0, 0.9, COSTS.bayes_threshold, 100.0)  # lower already
    assert inspected_threshold(counts, p, failing, COSTS, units(failing)) is counts
    higher = ThresholdChoice(0.599, 10.0, 0.001, COSTS.bayes_threshold, 1.0)
    lowered = inspected_threshold(higher, p, failing, COSTS, units(failing))
    assert lowered.threshold < higher.threshold and lowered.basis == INSPECTED


def test_the_count_ceiling_is_the_best_case_of_every_charge():
    """Against its definition, one threshold at a time."""
    rng = np.random.default_rng(3)
    p = rng.uniform(size=500)
    codes = rng.integers(0, 40, 500)
    positives = rng.integers(0, 6, 40).astype(float)
    ts = np.array([0.9, 0.2, 0.5, 0.99, 1.5])
    got = count_precision_ceiling(p, codes, positives, ts)
    for t, value in zip(ts, got, strict=True):
        k = np.bincount(codes[p >= t], minlength=40)
        expected = np.minimum(k, positives).sum() / k.sum() if k.sum() else np.nan
        np.testing.assert_allclose(value, expected)


def test_the_counts_refuse_a_threshold_that_would_lock_out_what_they_rule_out():
    """The inspected sticks precise, but ranked low by this model: the lowest threshold that
    takes ten of them locks out a third of the plant, whose charges counted 2 % failing. The
    counts' ceiling is far below break-even, so nothing changes; with generous counts the
    same inspections would have set that threshold."""
    n = 2000
    p = np.linspace(0.6, 0.0, n)
    failing = np.full(n, np.nan)
    middle = np.arange(600, 640)  # ranked 600th to 640th of 2000
    failing[middle] = 1.0
    declined = declined_choice(COSTS)
    generous = inspected_threshold(declined, p, failing, COSTS, units(failing))
    assert generous.basis == INSPECTED and generous.lockout_rate > 0.3
    strict = inspected_threshold(declined, p, failing, COSTS, units(failing, share=0.02))
    assert strict is declined


def test_many_inspected_sticks_give_the_same_threshold_as_the_definition():
    """Hundreds of candidate thresholds (the count ceiling is checked in chunks of them):
    the threshold is the lowest that meets all three conditions, one at a time."""
    rng = np.random.default_rng(7)
    n = 6000
    p = np.sort(rng.uniform(0.0, 0.9, n))[::-1].copy()
    failing = np.full(n, np.nan)
    top = np.flatnonzero(rng.uniform(size=n) < 0.5)[:900]  # half the top ~1,800 inspected
    failing[top] = (rng.uniform(size=len(top)) < np.linspace(0.97, 0.55, len(top))).astype(float)
    codes, positives = units(failing, share=0.12)
    choice = inspected_threshold(declined_choice(COSTS), p, failing, COSTS, (codes, positives))
    seen = ~np.isnan(failing)
    shares = inspected_shares(p, failing)
    expected, precise = None, []
    for t, share in shares.items():
        above = seen & (p >= t)
        m, f = int(above.sum()), int(failing[above].sum())
        if precision_bounds(f, m, BRAKE_LEVEL)[0] < COSTS.bayes_threshold:
            continue
        if share < COVERAGE * reference_share(p, failing):
            continue
        precise.append(t)
        ceiling = count_precision_ceiling(p, codes, positives, np.array([t]))[0]
        if ceiling >= COSTS.bayes_threshold:
            expected = t if expected is None else min(expected, t)
    assert expected is not None and choice.basis == INSPECTED
    assert choice.threshold == pytest.approx(expected)
    # the counts refused the lowest precise thresholds, more of them than one chunk holds
    assert sum(t < choice.threshold for t in precise) > 256


def test_the_threshold_reaches_no_further_down_than_the_inspections_sampled(monkeypatch):
    """The running line's failure: an earlier model's audits sampled the top 20 sticks of
    this ranking, and 15 more scattered down to the 600th (its ranking differed). All 35
    failed, so the cumulative bound alone takes the threshold down to the 600th stick, 30 %
    of the plant, whose uninspected sticks nobody looked at. Coverage stops it where the
    inspected share of the sticks above it falls below half of the top's."""
    n = 2000
    p = np.linspace(0.6, 0.0, n)
    failing = np.full(n, np.nan)
    failing[:20] = 1.0
    failing[np.linspace(40, 599, 15).astype(int)] = 1.0
    declined = declined_choice(COSTS)
    choice = inspected_threshold(declined, p, failing, COSTS, units(failing))
    assert choice.basis == INSPECTED and choice.threshold == pytest.approx(
        lowest_supported(p, failing, COSTS.bayes_threshold)
    )
    assert 0.01 <= choice.lockout_rate <= 0.025, choice  # the densely inspected top
    shares = inspected_shares(p, failing)
    assert shares[choice.threshold] >= 0.5 * reference_share(p, failing) == 0.5
    monkeypatch.setattr(lockout, "COVERAGE", 0.0)  # the rule before coverage
    uncovered = inspected_threshold(declined, p, failing, COSTS, units(failing))
    assert uncovered.lockout_rate == pytest.approx(0.3)


def test_a_dozen_inspected_sticks_at_the_very_top_do_not_set_the_coverage():
    """The ten highest sticks inspected (a model trained on the inspected labels ranks them
    there), then a quarter of the next 400 (an audit band), 106 of all 110 failing: the
    threshold reaches the bottom of the band, where a quarter of the sticks were looked at.
    Half of the very top's share (1.0) would have stopped it below the twentieth stick."""
    n = 2000
    p = np.linspace(0.6, 0.0, n)
    failing = np.full(n, np.nan)
    band = np.arange(10, 410, 4)
    failing[:10] = 1.0
    failing[band] = 1.0
    failing[band[[5, 30, 60, 90]]] = 0.0
    choice = inspected_threshold(declined_choice(COSTS), p, failing, COSTS, units(failing))
    assert choice.threshold == pytest.approx(lowest_supported(p, failing, COSTS.bayes_threshold))
    assert (choice.inspected, choice.inspected_failing) == (110, 106)
    assert choice.lockout_rate == pytest.approx(407 / n)  # down to the band's last sample
    assert reference_share(p, failing) == pytest.approx(55 / 187)


LAST = LockoutCosts(fail_cost=25.0, good_cost=450.0, inspection_cost=22.5)  # straightening


@pytest.mark.parametrize(
    ("failing_of", "declined"),
    [(30, True), (37, False)],
    ids=["30 of 39: upper bound 0.86 < 0.9", "37 of 39: upper bound 0.98"],
)
def test_audits_are_declined_when_the_inspected_top_fails_too_rarely(failing_of, declined):
    """The running line's last station: samples drawn at p >= 0.9 failed at 30 of 39."""
    p = np.linspace(0.999, 0.0, 2000)
    failing = np.full(2000, np.nan)
    failing[:39] = [1.0] * failing_of + [0.0] * (39 - failing_of)
    failing[1500:1600] = 0.0  # inspected far below the floor: not evidence of the band
    assert LAST.audit_pays_from == pytest.approx(0.9)
    got = audit_evidence(p, failing, LAST, audit_from=0.5)  # floor max(min(.947, .5), .9)
    high = precision_bounds(failing_of, 39, BRAKE_LEVEL)[1]
    assert (high < 0.9) is declined
    assert got["audit_inspected"] == 39 and got["audit_inspected_failing"] == failing_of
    assert got.get("audits_declined") == (1.0 if declined else None)


def test_too_few_inspected_at_the_top_decide_nothing_about_audits():
    p = np.linspace(0.999, 0.0, 2000)
    failing = np.full(2000, np.nan)
    failing[: MIN_INSPECTED - 1] = 0.0  # all good, but too few
    assert audit_evidence(p, failing, LAST, audit_from=None) == {}
    assert audit_evidence(p, None, LAST, audit_from=None) == {}


def test_the_inspection_cost_is_a_cost():
    with pytest.raises(ValueError, match="inspection_cost must be finite and >= 0"):
        LockoutCosts(fail_cost=25.0, good_cost=450.0, inspection_cost=-1.0)
    assert LockoutCosts(fail_cost=0.0, good_cost=1.0).audit_pays_from == np.inf
