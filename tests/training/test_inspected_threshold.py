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
from qcllp.station.precision import precision_bounds, precision_lower_bounds
from qcllp.training.lockout import (
    BRAKE_LEVEL,
    INSPECTED,
    MIN_INSPECTED,
    inspected_brake,
    inspected_saving,
    inspected_threshold,
)

COSTS = LockoutCosts(fail_cost=180.0, good_cost=400.0)  # break-even 0.690 (the furnace)


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


def lowest_supported(p: np.ndarray, failing: np.ndarray, be: float) -> float | None:
    """The definition, one candidate at a time with the scalar bound."""
    seen = ~np.isnan(failing)
    best = None
    for t in np.unique(p[seen]):
        above = seen & (p >= t)
        m, f = int(above.sum()), int(failing[above].sum())
        if m >= MIN_INSPECTED and precision_bounds(f, m, BRAKE_LEVEL)[0] >= be:
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
    choice = inspected_threshold(declined_choice(COSTS), p, failing, COSTS)
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
    choice = inspected_threshold(declined_choice(COSTS), p, failing, COSTS)
    saving = inspected_saving(choice, COSTS)
    lo, hi = precision_bounds(choice.inspected_failing, choice.inspected, 0.95)
    rate = choice.lockout_rate
    assert saving.per_1000 == pytest.approx(choice.saving_per_1000)
    assert saving.low == pytest.approx(1000 * rate * (lo * 180 - (1 - lo) * 400))
    assert saving.high == pytest.approx(1000 * rate * (hi * 180 - (1 - hi) * 400))
    assert saving.low < saving.per_1000 < saving.high and saving.level == 0.9


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
    assert inspected_threshold(declined, p, failing, COSTS) is declined
    assert inspected_threshold(declined, p, None, COSTS) is declined


def test_it_never_raises_a_threshold_the_counts_chose():
    p, failing = inspected_top(40, [1] * 30 + [0] * 10)
    counts = ThresholdChoice(0.05, 900.0, 0.9, COSTS.bayes_threshold, 100.0)  # lower already
    assert inspected_threshold(counts, p, failing, COSTS) is counts
    higher = ThresholdChoice(0.599, 10.0, 0.001, COSTS.bayes_threshold, 1.0)
    lowered = inspected_threshold(higher, p, failing, COSTS)
    assert lowered.threshold < higher.threshold and lowered.basis == INSPECTED
