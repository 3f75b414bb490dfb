"""The label spaces of WellSVM (Li et al. 2013) and conv-pSVM (Yu et al. 2013), and their
maximisation by sorting.

A weakly labeled SVM looks for labels ``y`` in a feasible set ``Y`` (WellSVM eq. 3/11, pSVM
eq. 11). The solver (:mod:`qcllp.learn.psvm.wellsvm_solver`) serves three feasible sets:

* **label proportions** (pSVM eq. 10): per bag, the share of positives is within ``epsilon``
  of the given share; this is conv-pSVM (pSVM Alg. 2, :mod:`qcllp.learn.psvm.conv_psvm`);
* **semi-supervised balance** (WellSVM Sect. 4.1, Alg. 2): labeled rows keep their labels,
  the unlabeled rows have the labeled rows' positive share;
* **clustering balance** (WellSVM Sect. 4.3, Alg. 4): ``-B <= 1'y <= B``.

All three are the same structure, a :class:`LabelSpace`: groups of free rows, each with a range
of allowed positive counts, plus fixed rows. Maximising a linear function ``r'y`` over such a
set is solved for all groups (and many score vectors) at once by sorting (pSVM eq. 21, WellSVM
Prop. 5): one sort by (group, score), ranks from group offsets, no loop over groups or rows.
This is what the violated-label search (pSVM eq. 19-21, WellSVM eq. 16-17, Prop. 4) is made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "LabelSpace",
    "argmax_labels",
    "balance_label_space",
    "cluster_label_space",
    "linf_violated_label",
    "proportion_label_space",
]


@dataclass(frozen=True)
class LabelSpace:
    """A feasible set of label vectors ``y in {-1, +1}^n``.

    ``fixed`` (n,) holds +1/-1 for rows whose label is fixed and 0 for free rows; ``groups``
    (n,) the group index 0..g-1 of every row (only free rows matter); ``lo``/``hi`` (g,) the
    allowed range of the number of positives among each group's *free* rows.
    """

    fixed: np.ndarray
    groups: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.lo)

    def argmax(self, scores: np.ndarray) -> np.ndarray:
        """``argmax_{y in Y} scores' y``, per column of ``scores``; see :func:`argmax_labels`."""
        return argmax_labels(scores, self)

    def contains(self, y: np.ndarray) -> bool:
        """Whether ``y`` (n,) in {-1, +1} is feasible."""
        y = np.asarray(y)
        if not np.isin(y, (-1, 1)).all():
            return False
        fixed = self.fixed != 0
        if np.any(y[fixed] != self.fixed[fixed]):
            return False
        pos = self._free_positives(y)
        return bool(np.all((pos >= self.lo) & (pos <= self.hi)))

    def violation(self, y: np.ndarray) -> float:
        """How far ``y`` (any signs) is from the set: positives outside the allowed count range
        per group plus fixed rows with the other sign. Orients recovered labels (footnote 3)."""
        y = np.where(np.asarray(y) > 0, 1, -1)
        fixed = self.fixed != 0
        wrong = np.count_nonzero(y[fixed] != self.fixed[fixed])
        pos = self._free_positives(y)
        outside = np.maximum(self.lo - pos, 0) + np.maximum(pos - self.hi, 0)
        return float(wrong + outside.sum())

    def _free_positives(self, y: np.ndarray) -> np.ndarray:
        free = self.fixed == 0
        return np.bincount(
            self.groups[free], weights=(y[free] > 0).astype(float), minlength=self.n_groups
        )


def argmax_labels(scores: np.ndarray, space: LabelSpace) -> np.ndarray:
    """Maximise ``r' y`` over the label space for every column ``r`` of ``scores`` at once.

    pSVM eq. 21 / WellSVM Prop. 5: within a group the optimal y is +1 on the highest scores,
    and the number of positives is the count of positive scores clipped to the allowed range
    (the objective is concave in that count, ``2 * sum of the top m scores - sum``). Fixed rows
    keep their label. All groups and columns are handled by one stable sort by score and one by
    group, per-group ranks from group offsets: O(N log N) per column, no Python loop.

    ``scores`` (n,) or (n, q); returns int8 labels in {-1, +1} of the same shape.
    """
    S = np.asarray(scores, dtype=float)
    one_d = S.ndim == 1
    S = S.reshape(len(S), -1)
    n, q = S.shape
    Y = np.repeat(space.fixed.astype(np.int8)[:, None], q, axis=1)
    free = np.flatnonzero(space.fixed == 0)
    if len(free):
        Sf = S[free]
        gf = space.groups[free]
        order = np.argsort(-Sf, axis=0, kind="stable")
        order = np.take_along_axis(order, np.argsort(gf[order], axis=0, kind="stable"), axis=0)
        sizes = np.bincount(gf, minlength=space.n_groups)
        starts = np.cumsum(sizes) - sizes
        g_sorted = gf[order]
        rank = np.arange(len(free))[:, None] - starts[g_sorted]
        flat = (gf[:, None] * q + np.arange(q)).ravel()
        n_pos = np.bincount(flat, weights=(Sf > 0).ravel(), minlength=space.n_groups * q)
        m = np.clip(n_pos.reshape(space.n_groups, q), space.lo[:, None], space.hi[:, None])
        y_sorted = np.where(rank < m[g_sorted, np.arange(q)], 1, -1).astype(np.int8)
        Yf = np.empty_like(y_sorted)
        np.put_along_axis(Yf, order, y_sorted, axis=0)
        Y[free] = Yf
    return Y[:, 0] if one_d else Y


def _count_range(target: np.ndarray, slack: np.ndarray, size: np.ndarray):
    """Integer positive counts within ``target +- slack`` (all arrays per group), in [0, size];
    when no integer lies in the range (e.g. slack 0 and a non-integer target), the nearest."""
    lo = np.ceil(target - slack - 1e-9)
    hi = np.floor(target + slack + 1e-9)
    empty = lo > hi
    lo = np.where(empty, np.round(target), lo)
    hi = np.where(empty, np.round(target), hi)
    lo = np.clip(lo, 0, size).astype(np.int64)
    return lo, np.clip(hi, lo, size).astype(np.int64)


def _fixed_from_known(known: np.ndarray | None, n: int) -> np.ndarray:
    """1 / 0 known labels, -1 unknown (the convention of
    :class:`~qcllp.learn.core.margin.MarginLLPClassifier`) -> +1/-1/0."""
    if known is None:
        return np.zeros(n, dtype=np.int8)
    known = np.asarray(known)
    return np.select([known == 1, known == 0], [1, -1], 0).astype(np.int8)


def proportion_label_space(
    bag_codes: np.ndarray,
    shares: np.ndarray,
    epsilon: float = 0.0,
    known: np.ndarray | None = None,
) -> LabelSpace:
    """pSVM eq. 10: per bag k, ``|p~_k(y) - p_k| <= epsilon``; known rows (1/0, -1 unknown) fixed.

    The allowed numbers of positives per bag are the integers in
    ``[(p_k - eps) |B_k|, (p_k + eps) |B_k|]`` (the nearest one when that range holds none),
    minus the known positives of the bag, clipped to the bag's free rows.
    """
    codes = np.asarray(bag_codes, dtype=np.intp)
    shares = np.asarray(shares, dtype=float)
    fixed = _fixed_from_known(known, len(codes))
    h = len(shares)
    size = np.bincount(codes, minlength=h)
    lo, hi = _count_range(shares * size, np.full(h, float(epsilon)) * size, size)
    known_pos = np.bincount(codes, weights=(fixed == 1).astype(float), minlength=h)
    n_free = np.bincount(codes, weights=(fixed == 0).astype(float), minlength=h).astype(np.int64)
    lo = np.clip(lo - known_pos, 0, n_free).astype(np.int64)
    hi = np.clip(hi - known_pos, lo, n_free).astype(np.int64)
    return LabelSpace(fixed=fixed, groups=codes, lo=lo, hi=hi)


def balance_label_space(
    fixed: np.ndarray, balance: float = 0.0, positive_share: float | None = None
) -> LabelSpace:
    """WellSVM Sect. 4.1 (semi-supervised): the unlabeled rows' positive share equals the
    labeled rows' share (``1'y_U / (N - l) = 1'y_L / l``), or ``positive_share`` when given,
    within ``balance`` (0: as exactly as integers allow, the paper's constraint)."""
    fixed = np.asarray(fixed).astype(np.int8)
    labeled = fixed != 0
    if positive_share is None:
        if not labeled.any():
            raise ValueError("semi-supervised WellSVM needs at least one labeled row")
        positive_share = float(np.mean(fixed[labeled] > 0))
    n_free = np.array([np.count_nonzero(~labeled)])
    lo, hi = _count_range(positive_share * n_free, balance * n_free, n_free)
    return LabelSpace(fixed=fixed, groups=np.zeros(len(fixed), dtype=np.intp), lo=lo, hi=hi)


def cluster_label_space(n: int, balance: float = 0.03) -> LabelSpace:
    """WellSVM Sect. 4.3: ``-B <= 1'y <= B`` with ``B = balance * N`` (the paper: 0.03 N for
    balanced data), i.e. between ``(N - B) / 2`` and ``(N + B) / 2`` positives."""
    size = np.array([n])
    lo, hi = _count_range(size / 2.0, balance * size / 2.0, size)
    return LabelSpace(
        fixed=np.zeros(n, dtype=np.int8), groups=np.zeros(n, dtype=np.intp), lo=lo, hi=hi
    )


def linf_violated_label(alpha: np.ndarray, features: np.ndarray, space: LabelSpace) -> np.ndarray:
    """pSVM eq. 19-21: ``argmax_{y in Y} max_j |sum_i alpha_i y_i x_i^(j)|``.

    For every dimension j and sign s the inner problem is linear in y and splits over bags
    (eq. 20), each solved by sorting (eq. 21); all 2d of them run in one :func:`argmax_labels`
    call, and the best (j, s) wins.
    """
    R = np.asarray(alpha, dtype=float)[:, None] * np.asarray(features, dtype=float)
    scores = np.hstack([R, -R])
    cands = space.argmax(scores)
    values = np.einsum("nq,nq->q", scores, cands)
    return cands[:, int(np.argmax(values))]
