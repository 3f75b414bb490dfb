"""The label step of the alternating proportion-SVMs (Yu et al. 2013, Prop. 1-2), all bags at once.

With the model fixed, alter-pSVM (eq. 7-8) and twin alter-pSVM choose every bag's labels to
minimise ``sum_i loss_i(y_i) + weight * sum_k |p~_k(y) - p_k|``. Writing ``delta_i = loss_i(-1) -
loss_i(+1)`` (what labeling row i positive saves), the best labeling with r positives among a
bag's free rows takes the r largest ``delta`` (Prop. 1), so only r is left to choose per bag.

:class:`BagLabeler` fixes the bags, their shares and the rows with known labels once per fit and
then answers every label step of the alternation. It chooses r without scanning all counts: as
a function of r the proportion term ``(weight / |B_k|) |r - r0_k|`` is convex (``r0_k`` the
target number of free positives) and the sum of the r largest ``delta`` is concave, so adding
the j-th largest row pays exactly while ``delta_(j)`` beats the marginal proportion cost of step
j, which is ``-weight / |B_k|`` below the target, ``+weight / |B_k|`` above it and in between on
the step that crosses a fractional target. The accepted steps form a prefix, and their number
is a sum of three threshold counts per bag (:meth:`BagLabeler.counts`). Ties go to the smaller r
(a step that does not lower the objective is not taken).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BagLabeler",
    "optimal_bag_labels",
]


class BagLabeler:
    """Label step (Prop. 1) for fixed bags, shares and known labels; see the module docstring.

    Parameters
    ----------
    bag_codes : (n,) bag index 0..K-1 per row.
    shares : (K,) target positive share p_k per bag.
    known : (n,) 1 / 0 for rows with a fixed label, -1 elsewhere (``None``: all free).
    method : ``"padded"`` puts the free rows in a (bags x largest bag) matrix, so every
        operation is one pass along its rows; ``"segments"`` works on one array sorted by (bag,
        -delta) per call and suits very unequal bag sizes; ``"auto"`` takes the padded matrix
        unless padding would more than double the work.
    """

    def __init__(
        self,
        bag_codes: np.ndarray,
        shares: np.ndarray,
        known: np.ndarray | None = None,
        method: str = "auto",
    ):
        codes = np.asarray(bag_codes, dtype=np.intp)
        self.shares = np.asarray(shares, dtype=float)
        n, n_bags = len(codes), len(self.shares)
        known = np.full(n, -1) if known is None else np.asarray(known)
        self.codes = codes
        self.known = known
        self.sizes = np.maximum(np.bincount(codes, minlength=n_bags), 1)
        self.known_positive = known == 1
        self.known_pos = np.bincount(codes, weights=self.known_positive, minlength=n_bags)
        self.rows = np.flatnonzero(known < 0)
        self.n_free = np.bincount(codes[self.rows], minlength=n_bags)
        # the proportion term of bag k, in free positives r: (weight / size_k) |r - r0_k|
        r0 = np.clip(self.shares * self.sizes - self.known_pos, 0, self.n_free)
        self.r_floor = np.floor(r0).astype(np.intp)
        self.r_frac = r0 - self.r_floor
        self.r_ceil = self.r_floor + (self.r_frac > 0)
        contiguous = np.all(codes[1:] >= codes[:-1]) and np.all(
            np.bincount(codes, minlength=n_bags) > 0
        )
        self._starts = np.cumsum(self.sizes) - self.sizes if contiguous else None
        width = int(self.n_free.max(initial=0))
        if method == "auto":
            method = "padded" if n_bags * width <= 2 * len(self.rows) + 64 else "segments"
        if method not in ("padded", "segments"):
            raise ValueError(f"method must be 'auto', 'padded' or 'segments', got {method!r}")
        self.method = method
        if method == "padded":
            self._index = self._padded_index(width)

    def _padded_index(self, width: int) -> np.ndarray:
        """(bags x width) row numbers of the free rows, bag by bag; padding points to row n."""
        codes, rows = self.codes, self.rows
        by_bag = rows[np.argsort(codes[rows], kind="stable")]
        bag_of = codes[by_bag]
        slot = np.arange(len(by_bag)) - (np.cumsum(self.n_free) - self.n_free)[bag_of]
        index = np.full((len(self.shares), width), len(codes), dtype=np.intp)
        index[bag_of, slot] = by_bag
        return index

    def __call__(self, delta: np.ndarray, weight: float) -> np.ndarray:
        """(n,) bool: the optimal labeling for loss reductions ``delta`` and proportion weight
        ``weight`` (``C_p / C*`` in eq. 7); known rows keep their labels."""
        delta = np.asarray(delta, dtype=float)
        positive = self.known_positive.copy()
        if self.method == "segments":
            positive[self._segment_step(delta, weight)] = True
            return positive
        if self._index.shape[1] == 0:
            return positive
        values = np.append(delta, -np.inf)[self._index]
        r_best = self.counts(values, weight)
        ranked = np.sort(values, axis=1)
        width = values.shape[1]
        threshold = ranked[np.arange(len(r_best)), width - np.maximum(r_best, 1)]
        take = (values >= threshold[:, None]) & (r_best[:, None] > 0)
        if not np.array_equal(take.sum(axis=1), r_best):  # ties at a bag's cut: rank the rows
            order = np.argsort(-values, axis=1, kind="stable")
            take = np.zeros_like(take)
            np.put_along_axis(take, order, np.arange(width)[None, :] < r_best[:, None], axis=1)
        positive[self._index[take]] = True
        return positive

    def counts(self, values: np.ndarray, weight: float) -> np.ndarray:
        """Best number of free positives per bag from its padded ``delta`` row (-inf padding)."""
        unit = weight / self.sizes
        below = (values > -unit[:, None]).sum(axis=1)  # steps up to the target
        crossing = (values > (unit * (1.0 - 2.0 * self.r_frac))[:, None]).sum(axis=1)
        above = (values > unit[:, None]).sum(axis=1)  # steps beyond the target
        return (
            np.minimum(below, self.r_floor)
            + (self.r_frac > 0) * np.clip(crossing - self.r_floor, 0, 1)
            + np.maximum(above - self.r_ceil, 0)
        )

    def _segment_step(self, delta: np.ndarray, weight: float) -> np.ndarray:
        """Rows to label positive, from one array sorted by (bag, -delta)."""
        codes, rows, n_free = self.codes, self.rows, self.n_free
        n_bags = len(self.shares)
        srows = rows[np.lexsort((-delta[rows], codes[rows]))]
        scodes = codes[srows]
        seg_start = np.cumsum(n_free) - n_free
        csum = np.cumsum(delta[srows])
        before = np.concatenate(([0.0], csum))[seg_start]
        gain_sorted = csum - before[scodes]  # gain of the top-(t+1) rows of the bag

        # candidates: for bag k the counts r = 0..n_free[k], laid out bag after bag
        cand_start = seg_start + np.arange(n_bags)
        cand_bag = np.repeat(np.arange(n_bags), n_free + 1)
        cand_r = np.arange(len(cand_bag)) - cand_start[cand_bag]
        gain = np.zeros(len(cand_bag))
        gain[np.arange(len(srows)) + scodes + 1] = gain_sorted
        share_gap = (cand_r + self.known_pos[cand_bag]) / self.sizes[cand_bag]
        value = weight * np.abs(share_gap - self.shares[cand_bag]) - gain
        best = np.minimum.reduceat(value, cand_start)
        hits = np.flatnonzero(value <= best[cand_bag])
        first = hits[np.concatenate(([True], cand_bag[hits[1:]] != cand_bag[hits[:-1]]))]
        r_best = cand_r[first]
        rank = np.arange(len(srows)) - seg_start[scodes]
        return srows[rank < r_best[scodes]]

    def positives(self, positive: np.ndarray) -> np.ndarray:
        """Number of positive rows per bag."""
        if self._starts is not None:
            return np.add.reduceat(positive, self._starts, dtype=np.intp)
        return np.bincount(self.codes, weights=positive, minlength=len(self.shares))

    def proportion_loss(self, y: np.ndarray) -> float:
        """``sum_k |p~_k(y) - p_k|`` (eq. 3 and the absolute proportion loss of Sect. 4)."""
        return float(np.abs(self.positives(y > 0) / self.sizes - self.shares).sum())

    def random_labels(self, scores: np.ndarray) -> np.ndarray:
        """±1 labels meeting every bag's share as closely as counts allow, ranked by ``scores``.

        With random scores this is the random initialisation within the proportions; with a
        model's decision values it is that model's best proportion-consistent labeling.
        """
        scores = np.asarray(scores, dtype=float)
        weight = 4.0 * (np.abs(scores).max(initial=0.0) + 1.0) * self.sizes.max(initial=1)
        return np.where(self(scores, weight), 1.0, -1.0)


def optimal_bag_labels(
    delta: np.ndarray,
    bag_codes: np.ndarray,
    shares: np.ndarray,
    weight: float,
    known: np.ndarray | None = None,
    method: str = "auto",
) -> np.ndarray:
    """One label step (Prop. 1 and 2): ``BagLabeler(bag_codes, shares, known, method)(delta,
    weight)``; (n,) bool, True where the row is labeled positive. O(N log J), no Python loop
    over bags or rows."""
    return BagLabeler(bag_codes, shares, known, method)(delta, weight)
