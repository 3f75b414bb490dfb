"""Exact bounds of a precision measured on inspected sticks: how many of the sticks looked at
(lock-outs at the bay, audit samples) failed, and what that allows the precision of all such
sticks to be.

One definition for every rule that acts on inspections: the lock-out rule's inspected brake
and inspected threshold (:mod:`qcllp.training.lockout`) and the shadow trial's verdict
(:mod:`qcllp.retraining.shadow_trial`). Exact Clopper-Pearson bounds (:func:`scipy.stats.
binomtest`, a well-kept library) rather than a normal approximation, which fails at the few
dozen inspected sticks a trial or a training has.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import beta, binomtest

__all__ = ["precision_bounds", "precision_lower_bounds"]


def precision_bounds(failing: int, inspected: int, level: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of a precision at ``level`` each: ``(lower, upper)``
    (``(0, 1)`` with nothing inspected)."""
    if inspected == 0:
        return 0.0, 1.0
    low = binomtest(failing, inspected, alternative="greater").proportion_ci(level, "exact").low
    high = binomtest(failing, inspected, alternative="less").proportion_ci(level, "exact").high
    return float(low), float(high)


def precision_lower_bounds(failing: np.ndarray, inspected: np.ndarray, level: float) -> np.ndarray:
    """:func:`precision_bounds`' lower bound for many ``(failing, inspected)`` pairs at once:
    the exact one-sided Clopper-Pearson bound is the ``1 - level`` quantile of
    Beta(failing, inspected - failing + 1) (0 when nothing failed), which is what
    :func:`scipy.stats.binomtest` computes one pair at a time."""
    f = np.asarray(failing, dtype=float)
    m = np.asarray(inspected, dtype=float)
    with np.errstate(invalid="ignore"):
        low = beta.ppf(1.0 - level, np.maximum(f, 1e-300), m - f + 1.0)
    return np.where((f > 0) & (m > 0), low, 0.0)
