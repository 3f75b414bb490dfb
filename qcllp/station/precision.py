"""Exact bounds of a precision measured on inspected sticks: how many of the sticks looked at
(lock-outs at the bay, audit samples) failed, and what that allows the precision of all such
sticks to be.

One definition for every rule that acts on inspections: the lock-out rule's inspected brake
and inspected threshold (:mod:`qcllp.training.lockout`) and the shadow trial's verdict
(:mod:`qcllp.retraining.shadow_trial`). Exact Clopper-Pearson bounds (:func:`scipy.stats.
binomtest`, a well-kept library) rather than a normal approximation, which fails at the few
dozen inspected sticks a trial or a training has.

And what the counts allow, with no inspection at all (:func:`count_precision_ceiling`): a
charge whose final QC counted ``c`` failing sticks has at most ``min(k, c)`` failing among any
``k`` of its sticks, so the counts put a ceiling on the precision of any set of lock-outs.

SciPy and the lock-out rule (with the learners' calibration behind it) are imported by the
functions that use them: ``qcllp status`` reads this module for every station and needs them
only when a shadow trial is running (they were 1.8 of its 3.4 s of imports).
"""

from __future__ import annotations

import numpy as np

from qcllp.station.saving_estimate import locked_per_charge

__all__ = ["count_precision_ceiling", "precision_bounds", "precision_lower_bounds"]


def precision_bounds(failing: int, inspected: int, level: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of a precision at ``level`` each: ``(lower, upper)``
    (``(0, 1)`` with nothing inspected)."""
    if inspected == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest

    low = binomtest(failing, inspected, alternative="greater").proportion_ci(level, "exact").low
    high = binomtest(failing, inspected, alternative="less").proportion_ci(level, "exact").high
    return float(low), float(high)


def precision_lower_bounds(failing: np.ndarray, inspected: np.ndarray, level: float) -> np.ndarray:
    """:func:`precision_bounds`' lower bound for many ``(failing, inspected)`` pairs at once:
    the exact one-sided Clopper-Pearson bound is the ``1 - level`` quantile of
    Beta(failing, inspected - failing + 1) (0 when nothing failed), which is what
    :func:`scipy.stats.binomtest` computes one pair at a time."""
    from scipy.stats import beta

    f = np.asarray(failing, dtype=float)
    m = np.asarray(inspected, dtype=float)
    with np.errstate(invalid="ignore"):
        low = beta.ppf(1.0 - level, np.maximum(f, 1e-300), m - f + 1.0)
    return np.where((f > 0) & (m > 0), low, 0.0)


def count_precision_ceiling(
    p: np.ndarray, codes: np.ndarray, positives: np.ndarray, thresholds: np.ndarray
) -> np.ndarray:
    """Per threshold ``t``, the highest precision the counts allow the lock-outs ``p >= t``:
    ``sum over units of min(locked there, its failing count) / locked`` (NaN where nothing is
    locked). ``codes``: each stick's unit 0..h-1 (a charge, or an inspected stick of its own
    whose count is its label); ``positives``: failing sticks per unit. The lock-outs per unit
    and threshold are the lock-out rule's own count (:func:`qcllp.station.saving_estimate.
    locked_per_charge`), memory O(units x thresholds)."""
    ts = np.asarray(thresholds, dtype=float)
    locked, _ = locked_per_charge(p, np.asarray(codes, dtype=np.intp), len(positives), ts)
    best = np.minimum(locked, np.asarray(positives, dtype=float)[None, :]).sum(axis=1)
    total = locked.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, best / total, np.nan)
