"""What lock-outs brought in hindsight, against the per-stick truth (a simulated plant's, a
benchmark's, the label-trained evaluation's, the report's inspected sticks): the saving per
1,000 sticks against locking out nothing, each lock-out's look at the bay included
(:mod:`qcllp.plant.lockout_costs`). Kept apart from :mod:`qcllp.station.lockout_rule`, which
decides from counts and never sees the truth."""

from __future__ import annotations

import numpy as np

from qcllp.station.lockout_rule import LockoutCosts

__all__ = ["decisions_saving", "lockout_saving_per_1000", "realized_saving_per_1000"]


def realized_saving_per_1000(
    probability: np.ndarray,
    defective: np.ndarray,
    threshold: float | np.ndarray,
    costs: LockoutCosts,
) -> float:
    """The saving per 1,000 sticks that locking out ``probability >= threshold`` (one
    threshold, or one per stick) actually brings when the per-stick truth ``defective`` (0/1)
    is known, against locking out nothing."""
    p = np.asarray(probability, dtype=float)
    if p.shape != np.shape(defective):
        raise ValueError(f"{len(p)} probabilities but {len(defective)} truth values")
    return lockout_saving_per_1000(p >= threshold, defective, costs)


def lockout_saving_per_1000(
    locked: np.ndarray, defective: np.ndarray, costs: LockoutCosts
) -> float:
    """The saving per 1,000 sticks of the lock-outs ``locked`` (bool, one per stick) against
    the per-stick truth ``defective`` (0/1), against locking out nothing; each lock-out's look
    at the bay included (:meth:`qcllp.station.lockout_rule.LockoutCosts.lockout_value`)."""
    locked = np.asarray(locked, dtype=bool)
    saving = decisions_saving(locked, np.zeros_like(locked), defective, costs)
    if len(locked) == 0:
        raise ValueError("cannot measure a saving without sticks")
    return 1000 * saving / len(locked)


def decisions_saving(
    locked: np.ndarray, audited: np.ndarray, defective: np.ndarray, costs: LockoutCosts
) -> float:
    """The money the line's decisions brought against the per-stick truth ``defective``
    (0/1): each lock-out its :meth:`~qcllp.station.lockout_rule.LockoutCosts.lockout_value`,
    each audit sample (``audited``) ``fail_cost`` when it fails (scrapped at the station) less
    its look, ``inspection_cost`` (a good one returns to the line)."""
    locked, audited = np.asarray(locked, dtype=bool), np.asarray(audited, dtype=bool)
    bad = np.asarray(defective).astype(bool)
    if not locked.shape == audited.shape == bad.shape:
        raise ValueError(f"{len(locked)} decisions but {len(bad)} truth values")
    lockouts = np.sum(costs.lockout_value(bad[locked].astype(float)))
    audits = costs.fail_cost * np.sum(bad[audited]) - costs.inspection_cost * np.sum(audited)
    return float(lockouts + audits)
