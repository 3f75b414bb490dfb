"""The upper end of a stated saving where the count calibration's ceiling may be 1.

The count calibration (:class:`qcllp.learn.calibration.CountCalibrator`) fits ``P(fail) =
ceiling x sigmoid(a f + b)`` with ``ceiling <= 1``: the counts can show that a model's most
certain sticks fail less often than a sigmoid says. Where they fail as often as it says, the
truth's ceiling is 1, on the boundary of its range, and its estimate can only err below: the
fitted ceiling is biased low, and a bootstrap of the fit cannot reach above the fit either (a
parameter on the boundary: Self & Liang, "Asymptotic properties of maximum likelihood
estimators and likelihood ratio tests under nonstandard conditions", JASA 1987; Andrews,
"Inconsistency of the bootstrap when a parameter is on the boundary of the parameter space",
Econometrica 2000). Near a high break-even the error is large: at good_cost 440 and
fail_cost 60 a ceiling of 0.956 instead of 1 values a certain failure's lock-out at 33
instead of 55. On five simulated plants of 120 charges whose truth has ceiling 1 (the plants
of ``tests/station/test_saving_estimate.py``, seeds 2-6) the fitted ceilings were 0.956-1.0
and the savings they stated 57-99 % of what the same lock-outs realized; with the upper end
below, the weekly interval held 92 % of fresh weeks instead of 83 % on six such plants
(``tests/station/test_ceiling_bound.py``).

So, when the likelihood-ratio test does not reject ``ceiling = 1`` at 10 % (the statistic's
law at the boundary is the 50:50 mixture of chi-square with 0 and 1 degrees of freedom, so its
critical value is chi-square(1)'s 80 % quantile, 1.642), the interval's upper end reaches the
saving of the model's own lock-outs valued by the fit with the ceiling at 1, plus the
interval's upper half-width. The point and the lower end stay, and so does every decision:
the rule's threshold, its bound, the promotion gate and the guards never read the upper end.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qcllp.learn.calibration import CountCalibrator, poisson_binomial_logpmf
from qcllp.station.lockout_rule import LockoutCosts
from qcllp.station.saving_estimate import SavingEstimate

__all__ = ["CEILING_CRITICAL", "ceiling_free_saving", "reaching_ceiling_one"]

CEILING_CRITICAL = 1.642  # chi-square(1)'s 80 % quantile: a 10 % test at the boundary


def ceiling_free_saving(
    decision: np.ndarray,
    codes: np.ndarray,
    positives: np.ndarray,
    fitted: CountCalibrator,
    locked: np.ndarray,
    costs: LockoutCosts,
) -> float | None:
    """The saving per 1,000 sticks of the ``locked`` sticks valued by the count calibration
    refitted with its ceiling at 1, or ``None`` when the counts reject a ceiling of 1 against
    the ``fitted`` one (module docstring) or nothing is locked."""
    f = np.asarray(decision, dtype=float)
    if not np.any(locked):
        return None
    pinned = CountCalibrator(ceiling=False).fit(f, codes, positives)
    with_ceiling = poisson_binomial_logpmf(fitted.predict(f), codes, positives).sum()
    at_one = poisson_binomial_logpmf(pinned.predict(f), codes, positives).sum()
    if 2.0 * (with_ceiling - at_one) > CEILING_CRITICAL:
        return None
    value = costs.lockout_value(pinned.predict(f[locked]))
    return float(1000 * np.sum(value) / len(f))


def reaching_ceiling_one(saving: SavingEstimate, free: float | None) -> SavingEstimate:
    """``saving`` with its upper end reaching ``free`` plus its upper half-width, when ``free``
    (:func:`ceiling_free_saving`) is above its point."""
    if free is None or free <= saving.per_1000:
        return saving
    return replace(saving, high=max(saving.high, free + (saving.high - saving.per_1000)))
