"""What lock-outs brought in hindsight, against the per-stick truth (a simulated plant's, a
benchmark's, the label-trained evaluation's, the report's inspected sticks): the saving per
1,000 sticks against locking out nothing, each lock-out's look at the bay included
(:mod:`qcllp.plant.lockout_costs`). Kept apart from :mod:`qcllp.station.lockout_rule`, which
decides from counts and never sees the truth."""

from __future__ import annotations

import numpy as np

from qcllp.station.lockout_rule import LockoutCosts

__all__ = ["lockout_saving_per_1000", "realized_saving_per_1000"]


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
    bad = np.asarray(defective).astype(bool)
    if locked.shape != bad.shape:
        raise ValueError(f"{len(locked)} decisions but {len(bad)} truth values")
    if len(locked) == 0:
        raise ValueError("cannot measure a saving without sticks")
    saving = (
        costs.fail_cost * np.sum(locked & bad)
        - costs.good_cost * np.sum(locked & ~bad)
        - costs.inspection_cost * np.sum(locked)
    )
    return float(1000 * saving / len(locked))
