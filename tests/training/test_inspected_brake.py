"""The inspected brake of the lock-out rule (issue item 2b): the inspected sticks above the
chosen threshold, out of fold, decline a threshold whose lock-outs they show below break-even
(an exact one-sided 90 % upper bound), and never lower one."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from qcllp.station.lockout_rule import LockoutCosts, ThresholdChoice
from qcllp.training.lockout import BRAKE_LEVEL, MIN_INSPECTED, inspected_brake

COSTS = LockoutCosts(fail_cost=10.0, good_cost=22.0)  # break-even 0.6875


def case(failing_above: int, inspected_above: int, threshold: float = 0.8):
    """A choice at ``threshold`` over 200 sticks: ``inspected_above`` inspected at or above
    it (``failing_above`` of them failing), 20 inspected below it (all failing: they must not
    count), the rest uninspected."""
    choice = ThresholdChoice(threshold, 120.0, 0.1, COSTS.bayes_threshold, 40.0)
    p = np.linspace(0.0, 0.99, 200)
    failing = np.full(200, np.nan)
    top = np.flatnonzero(p >= threshold)[:inspected_above]
    failing[top] = 0.0
    failing[top[:failing_above]] = 1.0
    failing[:20] = 1.0
    return choice, p, failing


def test_lockouts_inspected_below_break_even_make_the_rule_decline():
    choice, p, failing = case(failing_above=5, inspected_above=12)
    upper = binomtest(5, 12).proportion_ci(confidence_level=2 * BRAKE_LEVEL - 1).high
    assert upper < COSTS.bayes_threshold  # the evidence the brake acts on: 0.64 < 0.6875
    braked = inspected_brake(choice, p, failing, COSTS)
    assert braked.declined and braked.threshold > 1.0
    assert braked.saving_per_1000 == 0.0 and braked.lockout_rate == 0.0


@pytest.mark.parametrize(
    ("failing_above", "inspected_above"),
    [(9, 12), (6, 12), (0, MIN_INSPECTED - 1)],
    ids=["precise", "bound straddles break-even", "too few inspected"],
)
def test_the_brake_keeps_a_threshold_the_evidence_does_not_refute(failing_above, inspected_above):
    choice, p, failing = case(failing_above, inspected_above)
    assert inspected_brake(choice, p, failing, COSTS) is choice


def test_nothing_inspected_or_nothing_locked_out_is_left_alone():
    choice, p, failing = case(failing_above=0, inspected_above=30)
    assert inspected_brake(choice, p, None, COSTS) is choice
    declined = ThresholdChoice(1.0 + 1e-9, 0.0, 0.0, COSTS.bayes_threshold, 0.0, declined=True)
    assert inspected_brake(declined, p, failing, COSTS) is declined


def test_audit_from_is_the_top_2_percent_unless_the_top_is_one_tied_value():
    """The floor of the scorer's audit band (metric ``audit_from``): the 98th percentile of
    the recalibrated out-of-fold probabilities; none when the top is a tie (no ranking)."""
    from qcllp.training.fitting import _audit_from

    p = np.linspace(0.0, 0.5, 1001)
    assert _audit_from(p)["audit_from"] == pytest.approx(0.49)
    assert np.mean(p >= _audit_from(p)["audit_from"]) == pytest.approx(0.02, abs=0.001)
    assert _audit_from(np.full(500, 0.1)) == {}
    capped = np.minimum(p, 0.45)  # a tenth of the sticks at one ceiling
    assert _audit_from(capped) == {}
    assert _audit_from(None) == {} and _audit_from(np.empty(0)) == {}
