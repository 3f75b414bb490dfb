"""Labeling the clusters of a clustering so that the bags' label proportions are matched.

Stolpe & Morik (2011), Sect. 3.1 and 3.3: given a clustering C = {C_1..C_k} of the sample and
the bags G_1..G_h with proportions Pi (h x l), find the cluster labels lambda (k,) minimising
Err_Pi (eq. 5), or eq. (8) when some instance labels are known. Two strategies:

* ``exhaustive`` tries all l^k labelings (the paper's choice for small k);
* ``greedy`` is Alg. 2: start with every cluster on y_1, then, cluster by cluster, keep the
  label that most lowers the error.

Everything is computed from the bag x cluster count matrix M (h x k), never from the rows:
with N = M / |G_i| the model-based proportions of a labeling are Gamma = N A, A the k x l
one-hot labeling matrix (eq. 3). Expanding the squares of eq. (6) and (7) in A leaves
statistics of M and Pi that do not depend on the labeling (:class:`LabelingStatistics`), so a
whole batch of labelings is scored by a few ``einsum`` contractions whose cost does not grow
with the number of bags or rows.

Two deliberate readings of the paper:

* Alg. 2 initialises ``lowest_error := 0`` and then only accepts errors below it, which would
  never change a label; we start from +inf (the evident intent).
* Err_Pi is a product (eq. 5, 8): it is zero as soon as one factor is. Err_prior (eq. 7)
  compares only the sample-wide class shares, and cluster sizes are integers, so some subset
  of clusters often matches the sample's positive count exactly: Err_Pi = 0 however wrong the
  bags are. Minimising it then rewards that coincidence; on two Gaussians with bags of 16
  (``benchmarks/bench_kmeans_labeler.py``) the labeler's accuracy scatters between 0.46 and
  0.99 over seeds. The default fitness ``"err_weight"`` therefore drops the Err_prior factor
  (the bag-by-bag error of eq. 6 already contains the sample-wide shares) and reaches 0.99 on
  every seed; ``fitness="err_pi"`` keeps the paper's product as written. Exact ties (e.g.
  Err_T = 0 in eq. 8 for many labelings) are broken by the sum of the factors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "Fitness",
    "LabelingStatistics",
    "MAX_EXHAUSTIVE_LABELINGS",
    "cluster_compositions",
    "label_clusters",
    "labeling_errors",
    "labeling_statistics",
]

Fitness = Literal["err_weight", "err_pi"]
MAX_EXHAUSTIVE_LABELINGS = 1 << 22
_CHUNK = 1 << 15


@dataclass(frozen=True)
class LabelingStatistics:
    """What Err_Pi needs to know about one clustering, whatever the labeling.

    With W_ij = eta_j |G_i| / n (the weights of eq. 6) and N = M / |G_i|:
    ``const`` = sum_ij W_ij pi_ij^2, ``linear`` (k, l) = sum_i W_ij pi_ij N_ic,
    ``quadratic`` (l, k, k) = sum_i W_ij N_ic N_id, ``cluster_share`` (k,) = |C_c| / n,
    ``eta`` (l,) the sample's class shares (eq. 2), ``n_entries`` = h * l, and for eq. (8)
    ``known_counts`` (k, l), the labeled rows of class j in cluster c.
    """

    const: float
    linear: np.ndarray
    quadratic: np.ndarray
    cluster_share: np.ndarray
    eta: np.ndarray
    n_entries: int
    known_counts: np.ndarray | None

    @property
    def n_clusters(self) -> int:
        return len(self.cluster_share)

    @property
    def n_classes(self) -> int:
        return len(self.eta)


def labeling_statistics(
    bag_codes: np.ndarray,
    cluster_codes: np.ndarray,
    proportions: np.ndarray,
    n_clusters: int,
    known: np.ndarray | None = None,
) -> LabelingStatistics:
    """Reduce a clustering of the sample to the statistics that score its labelings.

    ``bag_codes`` and ``cluster_codes`` are integer codes per row, ``proportions`` is Pi
    (h, l); ``known`` holds the class index of rows with a known label and -1 elsewhere.
    """
    P = np.asarray(proportions, dtype=float)
    h, n_classes = P.shape
    k = int(n_clusters)
    counts = np.bincount(
        np.asarray(bag_codes) * k + np.asarray(cluster_codes), minlength=h * k
    ).reshape(h, k)
    sizes = counts.sum(axis=1).astype(float)
    n = sizes.sum()
    N = counts / np.maximum(sizes, 1.0)[:, None]
    eta = sizes @ P / n
    W = (sizes / n)[:, None] * eta[None, :]
    known_counts = None
    if known is not None and np.any(np.asarray(known) >= 0):
        known = np.asarray(known)
        rows = known >= 0
        known_counts = np.bincount(
            np.asarray(cluster_codes)[rows] * n_classes + known[rows],
            minlength=k * n_classes,
        ).reshape(k, n_classes)
    return LabelingStatistics(
        const=float(np.sum(W * P * P)),
        linear=N.T @ (W * P),
        quadratic=np.einsum("ij,ic,id->jcd", W, N, N, optimize=True),
        cluster_share=counts.sum(axis=0) / n,
        eta=eta,
        n_entries=h * n_classes,
        known_counts=known_counts,
    )


def labeling_errors(
    stats: LabelingStatistics, labelings: np.ndarray, fitness: Fitness = "err_weight"
) -> tuple[np.ndarray, np.ndarray]:
    """The fitness of each labeling and its tie-breaker, both (L,).

    ``labelings`` (L, k) holds a class index per cluster. ``fitness="err_pi"`` is eq. (5),
    sqrt(Err_weight * Err_prior), or eq. (8) times Err_T with known labels;
    ``fitness="err_weight"`` drops the Err_prior factor: sqrt(Err_weight), or
    sqrt(Err_weight * Err_T). The tie-breaker is the sum of the factors of the product.
    """
    labelings = np.asarray(labelings, dtype=np.intp)
    A = np.zeros((*labelings.shape, stats.n_classes))
    np.put_along_axis(A, labelings[..., None], 1.0, axis=-1)
    weighted = (
        stats.const
        - 2.0 * np.einsum("cj,Lcj->L", stats.linear, A, optimize=True)
        + np.einsum("jcd,Lcj,Ldj->L", stats.quadratic, A, A, optimize=True)
    ) / stats.n_entries
    weighted = np.maximum(weighted, 0.0)  # rounding can leave -1e-18 for a perfect match
    eta_model = np.einsum("c,Lcj->Lj", stats.cluster_share, A, optimize=True)
    prior = np.mean((stats.eta[None, :] - eta_model) ** 2, axis=1)
    if fitness == "err_pi":
        product, tie_break = weighted * prior, weighted + prior
    elif fitness == "err_weight":
        product, tie_break = weighted, weighted.copy()
    else:
        raise ValueError(f"fitness must be 'err_weight' or 'err_pi', got {fitness!r}")
    if stats.known_counts is not None:
        labeled = 1.0 - np.einsum("cj,Lcj->L", stats.known_counts, A) / stats.known_counts.sum()
        product, tie_break = product * labeled, tie_break + labeled
    return np.sqrt(product), tie_break


def label_clusters(
    stats: LabelingStatistics,
    strategy: Literal["exhaustive", "greedy"] = "exhaustive",
    fitness: Fitness = "err_weight",
) -> tuple[np.ndarray, float, float]:
    """The best labeling of one clustering: ``(labels (k,), fitness, tie_break)``."""
    if strategy == "exhaustive":
        return _exhaustive(stats, fitness)
    if strategy == "greedy":
        return _greedy(stats, fitness)
    raise ValueError(f"labeling must be 'exhaustive' or 'greedy', got {strategy!r}")


def _exhaustive(stats: LabelingStatistics, fitness: Fitness) -> tuple[np.ndarray, float, float]:
    k, n_classes = stats.n_clusters, stats.n_classes
    total = n_classes**k
    if total > MAX_EXHAUSTIVE_LABELINGS:
        raise ValueError(
            f"exhaustive labeling of {k} clusters x {n_classes} classes means {total:,} "
            f"labelings (limit {MAX_EXHAUSTIVE_LABELINGS:,}); use labeling='greedy' or fewer "
            "clusters"
        )
    digits = n_classes ** np.arange(k - 1, -1, -1)
    best: tuple[float, float, np.ndarray] | None = None
    for start in range(0, total, _CHUNK):
        codes = np.arange(start, min(start + _CHUNK, total))
        labelings = (codes[:, None] // digits[None, :]) % n_classes
        err, tie = labeling_errors(stats, labelings, fitness)
        i = np.lexsort((tie, err))[0]
        if best is None or (err[i], tie[i]) < best[:2]:
            best = (float(err[i]), float(tie[i]), labelings[i])
    assert best is not None
    return best[2].astype(np.intp), best[0], best[1]


def _greedy(stats: LabelingStatistics, fitness: Fitness) -> tuple[np.ndarray, float, float]:
    labels = np.zeros(stats.n_clusters, dtype=np.intp)
    err, tie = np.inf, np.inf
    for cluster in range(stats.n_clusters):
        candidates = np.repeat(labels[None, :], stats.n_classes, axis=0)
        candidates[:, cluster] = np.arange(stats.n_classes)
        errs, ties = labeling_errors(stats, candidates, fitness)
        i = np.lexsort((ties, errs))[0]  # stable: on a tie the earlier label stays, as in Alg. 2
        labels, err, tie = candidates[i], float(errs[i]), float(ties[i])
    return labels, err, tie


def cluster_compositions(
    bag_codes: np.ndarray,
    cluster_codes: np.ndarray,
    proportions: np.ndarray,
    n_clusters: int,
    *,
    n_iter: int = 500,
) -> np.ndarray:
    """Estimate each cluster's class composition Theta (k, l) from the bags alone.

    The counts of class j in bag i are mu_ij = |G_i| pi_ij; if cluster c holds class j at rate
    theta_cj in every bag, then mu ~= M Theta. Theta is the least-squares fit with each row on
    the probability simplex (projected gradient, accelerated), plus a small ridge towards the
    sample's class shares so that clusters the bags cannot tell apart fall back to the prior.
    The paper's cluster-mean model predicts a hard label per cluster; these compositions give
    the probabilities the station scorer thresholds.
    """
    P = np.asarray(proportions, dtype=float)
    h, n_classes = P.shape
    k = int(n_clusters)
    M = (
        np.bincount(np.asarray(bag_codes) * k + np.asarray(cluster_codes), minlength=h * k)
        .reshape(h, k)
        .astype(float)
    )
    sizes = M.sum(axis=1)
    mu = sizes[:, None] * P
    prior = sizes @ P / sizes.sum()
    gram, target = M.T @ M, M.T @ mu
    ridge = 1e-3 * max(np.trace(gram) / k, 1.0)
    gram = gram + ridge * np.eye(k)
    target = target + ridge * prior[None, :]
    step = 1.0 / np.linalg.eigvalsh(gram)[-1]
    theta = np.repeat(prior[None, :], k, axis=0)
    momentum, t = theta.copy(), 1.0
    for _ in range(n_iter):
        updated = _project_rows_to_simplex(momentum - step * (gram @ momentum - target))
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        momentum = updated + ((t - 1.0) / t_next) * (updated - theta)
        theta, t = updated, t_next
    return theta


def _project_rows_to_simplex(V: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row onto {x >= 0, sum x = 1} (Duchi et al. 2008)."""
    U = -np.sort(-V, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    ind = np.arange(1, V.shape[1] + 1)
    rho = np.count_nonzero(U - css / ind > 0, axis=1)
    tau = css[np.arange(len(V)), rho - 1] / rho
    return np.maximum(V - tau[:, None], 0.0)
