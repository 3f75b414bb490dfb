"""Probabilities from decision values, calibrated on the bags themselves.

Instance labels are unknown, so a calibration curve cannot be fitted the usual way (Platt
scaling on labeled data). What is known is, per bag, the share of positives. ``BagCalibrator``
fits the monotone map ``p(f) = sigmoid(a f + b)``, ``a >= 0``, so that the mean predicted
probability of every training bag matches that bag's share: it minimises the bag-size weighted
cross-entropy between share and mean probability (the proportion loss). A probability of 0.3
then means what a plant engineer reads into it: of many sticks scored 0.3, about 30 % fail,
which is what the cost-based lock-out threshold relies on.

Why a sigmoid and not isotonic regression: with only bag means as targets, a two-parameter
map is identifiable from a handful of bags, while a free monotone step function is not.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

__all__ = ["BagCalibrator"]

_EPS = 1e-12


class BagCalibrator:
    """Monotone sigmoid map from decision values to P(class 1), fitted on bag shares."""

    def __init__(self, l2: float = 1e-6):
        self.l2 = l2

    def fit(self, decision: np.ndarray, bag_codes: np.ndarray, shares: np.ndarray):
        """Fit ``a, b`` on training decision values, bag index per row and share per bag."""
        f = np.asarray(decision, dtype=float)
        codes = np.asarray(bag_codes)
        shares = np.asarray(shares, dtype=float)
        sizes = np.bincount(codes, minlength=len(shares)).astype(float)
        scale = float(np.std(f)) or 1.0
        z = f / scale
        weights = sizes / sizes.sum()

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            a, b = theta
            p = expit(a * z + b)
            pbar = np.bincount(codes, p, minlength=len(shares)) / np.maximum(sizes, 1)
            pbar = np.clip(pbar, _EPS, 1 - _EPS)
            value = -np.sum(weights * (shares * np.log(pbar) + (1 - shares) * np.log1p(-pbar)))
            dpbar = weights * (pbar - shares) / (pbar * (1 - pbar))
            per_row = (dpbar / np.maximum(sizes, 1))[codes] * p * (1 - p)
            grad = np.array([per_row @ z + 2 * self.l2 * a, per_row.sum()])
            return value + self.l2 * a * a, grad

        eta = float(np.clip(weights @ shares, 1e-6, 1 - 1e-6))
        start = np.array([1.0, np.log(eta / (1 - eta))])
        result = minimize(
            loss, start, jac=True, method="L-BFGS-B", bounds=[(0, None), (None, None)]
        )
        self.slope_ = float(result.x[0] / scale)
        self.intercept_ = float(result.x[1])
        return self

    def predict(self, decision: np.ndarray) -> np.ndarray:
        """P(class 1) for each decision value."""
        return expit(self.slope_ * np.asarray(decision, dtype=float) + self.intercept_)
