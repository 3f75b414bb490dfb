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

Matching means says nothing against over-confidence: probabilities of 0 and 1 in the right
numbers match every bag's share as well as honest ones. ``CountCalibrator`` fits the same
sigmoid by the likelihood of the bags' *counts* instead: given per-stick probabilities
``p_i``, the number of positives of a bag follows the Poisson-binomial distribution (a sum of
independent Bernoulli(``p_i``)), whose spread ``sum p_i (1 - p_i)`` shrinks as the
probabilities harden, so a bag whose count misses the number of near-certain sticks is
penalized. On charges of a fresh simulated plant this moves the sigmoid's slope from the
mean-matching one to about half, and a lock-out threshold on its probabilities stops losing
money (``benchmarks/bench_plant_quality.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from qcllp.learn.count_kernel import bag_probabilities

__all__ = ["BagCalibrator", "CountCalibrator", "poisson_binomial_logpmf"]

_EPS = 1e-12

Likelihood = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``(p, dp) -> (log P(count) per bag, its derivatives (m, bags))``, as
:meth:`_CountLayout.logpmf_and_grad`."""


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


def poisson_binomial_logpmf(
    p: np.ndarray, bag_codes: np.ndarray, counts: np.ndarray, n_bags: int | None = None
) -> np.ndarray:
    """log P(bag k has ``counts[k]`` positives) when its rows are independent Bernoulli(``p``).

    Exact, by the convolution recursion over each bag's rows (:mod:`qcllp.learn.count_kernel`).
    Only counts up to the one asked for are tracked (the probability of ``k`` positives never
    depends on larger counts), so a bag costs O(its rows x its count). ``counts`` outside
    ``0..size`` have probability 0 (log -inf is clipped to about -690).
    """
    return _CountLayout(bag_codes, counts, n_bags).logpmf(p)


class _CountLayout:
    """The bags' rows laid out once for repeated :func:`poisson_binomial_logpmf` calls: the
    rows sorted by bag, each bag's count clipped to its rows (a count outside ``0..size`` has
    probability 0), the recursion itself compiled (:mod:`qcllp.learn.count_kernel`: each
    bag's own rows and counts up to its own, no padding)."""

    def __init__(self, bag_codes: np.ndarray, counts: np.ndarray, n_bags: int | None = None):
        codes = np.asarray(bag_codes, dtype=np.intp)
        h = int(n_bags if n_bags is not None else len(counts))
        sizes = np.bincount(codes, minlength=h)
        k = np.asarray(np.round(counts), dtype=np.intp)
        self.inside = (k >= 0) & (k <= sizes)
        self.k = np.clip(k, 0, sizes)
        self.order = np.argsort(codes, kind="stable")
        self.starts = np.concatenate([[0], np.cumsum(sizes)])
        self.h = h
        self.codes = codes

    def _clipped_log(self, value: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(np.where(self.inside, value, 0.0), 1e-300))

    def logpmf(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        value, _ = bag_probabilities(p[self.order], self.starts, self.k, grad=False)
        return self._clipped_log(value)

    def logpmf_and_grad(self, p: np.ndarray, dp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`logpmf` and its derivatives along ``dp`` ((m, n): the derivatives of every
        row's ``p`` by m parameters). Returns ((h,), (m, h)); the derivative is 0 where the
        value is clipped. Every row's derivative comes from the kernel's reverse pass (about
        twice the cost of the value, whatever ``m``); the parameters' follow by the chain
        rule."""
        p, dp = np.asarray(p, dtype=float), np.asarray(dp, dtype=float)
        value, sorted_grad = bag_probabilities(p[self.order], self.starts, self.k)
        by_row = np.empty(len(p))
        by_row[self.order] = sorted_grad
        dvalue = np.stack([np.bincount(self.codes, d * by_row, minlength=self.h) for d in dp])
        value = np.where(self.inside, value, 0.0)
        kept = value > 1e-300
        grad = np.where(kept, dvalue / np.where(kept, value, 1.0), 0.0)
        return np.log(np.maximum(value, 1e-300)), grad


class CountCalibrator:
    """Monotone map ``P(class 1) = ceiling * sigmoid(a f + b)``, ``a >= 0``, ``0 < ceiling <=
    1``, fitted by the Poisson-binomial likelihood of the bags' positive counts (module
    docstring).

    The ceiling is the share of a model's most certain sticks that really are positive: a
    stick can look like a sure failure and pass (the defect it resembles arises later, a
    sensor glitch), and the counts show how often -- charges with many near-certain sticks but
    fewer failures. Without it the sigmoid puts probabilities of 0.99 on sticks of which 70 %
    fail (simulated plant, furnace), and a lock-out threshold trusts them. ``fit(decision,
    bag_codes, counts)`` with ``counts[k]`` the positives among bag ``k``'s rows (a share
    times the rows when only shares are known). Same ``predict`` as :class:`BagCalibrator`.
    """

    def __init__(self, l2: float = 1e-6, ceiling: bool = True):
        self.l2 = l2
        self.ceiling = ceiling

    def fit(
        self,
        decision: np.ndarray,
        bag_codes: np.ndarray,
        counts: np.ndarray,
        init: CountCalibrator | None = None,
        likelihood: Likelihood | None = None,
    ):
        """Fit on decision values, the bag of each row and each bag's positives; ``init``: a
        fitted calibrator to start from (one start instead of two: bootstrap refits);
        ``likelihood``: what computes the bags' log-likelihoods and their derivatives, by
        default their own :class:`_CountLayout` (:mod:`qcllp.learn.count_batch` evaluates many
        fits' bags together)."""
        f = np.asarray(decision, dtype=float)
        codes = np.asarray(bag_codes, dtype=np.intp)
        counts = np.asarray(counts, dtype=float)
        h = len(counts)
        scale = float(np.std(f)) or 1.0
        centre = float(f.mean())
        z = (f - centre) / scale

        evaluate = likelihood or _CountLayout(codes, counts, h).logpmf_and_grad

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            a, b, top = theta
            s = expit(a * z + b)
            slope = top * s * (1.0 - s)
            ll, dll = evaluate(top * s, np.stack([slope * z, slope, s]))
            value = -float(ll.sum()) / max(h, 1) + self.l2 * a * a
            grad = -dll.sum(axis=1) / max(h, 1) + np.array([2.0 * self.l2 * a, 0.0, 0.0])
            return value, grad

        rate = float(np.clip(counts.sum() / max(len(f), 1), 1e-6, 1 - 1e-6))
        top_bounds = (1e-3, 1.0) if self.ceiling else (1.0, 1.0)
        if init is None:  # the likelihood can have a flat shoulder: two starts
            starts = [[slope, np.log(rate / (1 - rate)), 1.0] for slope in (0.5, 2.0)]
        else:
            a0 = init.slope_ * scale
            starts = [[a0, init.intercept_ + init.slope_ * centre, init.ceiling_]]
        best = None
        for start in starts:
            result = minimize(
                loss,
                np.clip(start, [0, -np.inf, top_bounds[0]], [np.inf, np.inf, top_bounds[1]]),
                jac=True,
                method="L-BFGS-B",
                bounds=[(0, None), (None, None), top_bounds],
            )
            if best is None or result.fun < best.fun:
                best = result
        a, b, top = best.x
        self.slope_ = float(a / scale)
        self.intercept_ = float(b - a * centre / scale)
        self.ceiling_ = float(top)
        return self

    def predict(self, decision: np.ndarray) -> np.ndarray:
        """P(class 1) for each decision value."""
        return self.ceiling_ * expit(
            self.slope_ * np.asarray(decision, dtype=float) + self.intercept_
        )
