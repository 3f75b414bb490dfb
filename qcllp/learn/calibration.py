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

    Exact, by the convolution recursion over each bag's rows, vectorized over bags: the rows
    are laid out in a (bags x largest bag) table and the count distributions of all bags are
    advanced one row at a time. Only counts up to the largest one asked for are tracked (the
    probability of ``k`` positives never depends on larger counts), so a call costs
    O(bags x largest bag x largest count). ``counts`` outside ``0..size`` have probability 0
    (log -inf is clipped to about -690).
    """
    return _CountLayout(bag_codes, counts, n_bags).logpmf(p)


_BAGS_PER_BUCKET = 64


def _by_count(k: np.ndarray) -> list[np.ndarray]:
    """The bags in buckets of similar counts: counts within a factor of about 1.5 of each
    other (edges 0, 1, 2, 3, 4, 6, 9, 13, ...), a bucket of fewer than
    :data:`_BAGS_PER_BUCKET` bags joined to the next (a bucket costs a loop of its own)."""
    order = np.argsort(k, kind="stable")
    edges, edge = [0], 1
    while edge <= k.max(initial=0):
        edges.append(edge)
        edge = max(edge + 1, int(edge * 1.5))
    cuts = list(np.searchsorted(k[order], edges[1:], side="left"))
    buckets, start = [], 0
    for cut in [*cuts, len(order)]:
        if cut - start >= _BAGS_PER_BUCKET or (cut == len(order) and cut > start):
            buckets.append(order[start:cut])
            start = cut
    return buckets


class _CountLayout:
    """The bags' rows laid out once for repeated :func:`poisson_binomial_logpmf` calls.

    The bags are sorted by the count asked for and cut into buckets of similar counts
    (:func:`_by_count`), each with its own table (bags x its largest bag) and
    its own largest count: the recursion for a bag whose count is small stops at that count
    (column ``c`` of the distribution depends only on columns ``<= c``), so a few charges with
    many failures no longer make every bag track their counts. Each bag's arithmetic is the
    same as in one table.
    """

    def __init__(self, bag_codes: np.ndarray, counts: np.ndarray, n_bags: int | None = None):
        codes = np.asarray(bag_codes, dtype=np.intp)
        h = int(n_bags if n_bags is not None else len(counts))
        sizes = np.bincount(codes, minlength=h)
        k = np.asarray(np.round(counts), dtype=np.intp)
        self.inside = (k >= 0) & (k <= sizes)
        k = np.clip(k, 0, sizes)
        order = np.argsort(codes, kind="stable")
        position = np.arange(len(codes)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        self.h = h
        self.codes = codes
        self.buckets = [
            _Bucket(bags, sizes, k, codes[order], position, order) for bags in _by_count(k)
        ]

    def logpmf(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        value = np.zeros(self.h)
        for bucket in self.buckets:
            value[bucket.bags] = bucket.probability(p)
        return np.log(np.maximum(np.where(self.inside, value, 0.0), 1e-300))

    def logpmf_and_grad(self, p: np.ndarray, dp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`logpmf` and its derivatives along ``dp`` ((m, n): the derivatives of every
        row's ``p`` by m parameters). Returns ((h,), (m, h)); the derivative is 0 where the
        value is clipped.

        Reverse mode: the recursion maps ``dist`` to ``dist + p diff`` with ``diff =
        shift(dist) - dist``; after a forward pass that keeps every ``dist``, one backward pass
        carries the adjoint ``lam`` (of ``P(count = k)`` by ``dist``) back through the rows: a
        row's derivative is ``lam . diff`` and ``lam`` becomes ``lam (1 - p) + shift^T(lam)
        p``. That gives every row's derivative at about twice the cost of the value, whatever
        ``m`` (forward mode carried m tables through the recursion); the parameters'
        derivatives follow by the chain rule.
        """
        p, dp = np.asarray(p, dtype=float), np.asarray(dp, dtype=float)
        value, by_row = np.zeros(self.h), np.zeros(len(p))
        for bucket in self.buckets:
            value[bucket.bags], by_row[bucket.rows] = bucket.probability_and_row_grad(p)
        dvalue = np.stack([np.bincount(self.codes, d * by_row, minlength=self.h) for d in dp])
        value = np.where(self.inside, value, 0.0)
        kept = value > 1e-300
        grad = np.where(kept, dvalue / np.where(kept, value, 1.0), 0.0)
        return np.log(np.maximum(value, 1e-300)), grad


class _Bucket:
    """Bags of similar counts: their rows in a (bags x largest bag) table, padded with p = 0
    (a padding row never adds a positive), and the distribution tracked up to their largest
    count."""

    def __init__(self, bags, sizes, k, sorted_codes, position, order):
        self.bags = bags
        local = np.full(len(sizes), -1)
        local[bags] = np.arange(len(bags))
        mine = local[sorted_codes] >= 0
        self.rows = order[mine]
        self.cells = (local[sorted_codes[mine]], position[mine])
        self.width = int(sizes[bags].max(initial=0))
        self.k = k[bags]
        self.top = int(self.k.max(initial=0))

    def _table(self, p: np.ndarray) -> np.ndarray:
        table = np.zeros((len(self.bags), self.width))
        table[self.cells] = p[self.rows]
        return table

    def probability(self, p: np.ndarray) -> np.ndarray:
        """P(count = k) of each bag."""
        table = self._table(p)
        dist = np.zeros((len(self.bags), self.top + 1))
        dist[:, 0] = 1.0
        for j in range(self.width):  # over row positions, not over bags or rows
            pj = table[:, j : j + 1]
            step = dist * (1.0 - pj)
            step[:, 1:] += dist[:, :-1] * pj
            dist = step
        return dist[np.arange(len(self.bags)), self.k]

    def probability_and_row_grad(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """P(count = k) of each bag, and its derivative by each of the bucket's rows' ``p``
        (in the order of ``rows``)."""
        table = self._table(p)
        n, width = len(self.bags), self.width
        dists = np.zeros((width + 1, n, self.top + 1))
        dists[0, :, 0] = 1.0
        diff, scaled = np.empty((n, self.top + 1)), np.empty((n, self.top + 1))
        for j in range(width):  # dist + p (shift(dist) - dist), as in logpmf_and_grad before
            pj, dist = table[:, j : j + 1], dists[j]
            np.negative(dist, out=diff)
            diff[:, 1:] += dist[:, :-1]
            np.multiply(pj, diff, out=scaled)
            np.add(dist, scaled, out=dists[j + 1])
        bags = np.arange(n)
        lam, back = np.zeros((n, self.top + 1)), np.empty((n, self.top + 1))
        lam[bags, self.k] = 1.0
        grad = np.empty((n, width))
        for j in range(width - 1, -1, -1):
            pj, dist = table[:, j : j + 1], dists[j]
            grad[:, j] = np.einsum("ij,ij->i", lam[:, 1:], dist[:, :-1]) - np.einsum(
                "ij,ij->i", lam, dist
            )
            np.multiply(lam, 1.0 - pj, out=back)
            np.multiply(lam[:, 1:], pj, out=scaled[:, :-1])
            back[:, :-1] += scaled[:, :-1]
            lam, back = back, lam
        return dists[-1, bags, self.k], grad[self.cells]


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
