"""Laplacian and Alternating Mean Map (Patrini, Nock, Rivera & Caetano 2014, "(Almost) No Label
No Cry", NeurIPS): logistic models learned from bag proportions through the *mean operator*.

The logistic loss is linear-odd, ``l(z) - l(-z) = -z``, so the empirical risk of a linear model
``theta.x~`` (``x~ = (phi(x), 1)``) on labeled rows splits into a part without labels and one
that sees the labels only through the mean operator ``mu = 1/m sum_i y_i x~_i``::

    R(theta) = 1/m sum_i s(theta.x~_i) - 1/2 theta.mu,   s(z) = (l(z) + l(-z)) / 2

(the paper's factorization of linear-odd losses). Knowing ``mu`` is enough to minimise the
risk. With bags ``B_j`` of shares ``p_j`` and unknown per-bag
class means ``b_j^+``, ``b_j^-``::

    mu = 1/m sum_j |B_j| (p_j b_j^+ - (1 - p_j) b_j^-),   b_j = p_j b_j^+ + (1 - p_j) b_j^-,

and only the bag means ``b_j`` are observed. MeanMap (Quadrianto et al. 2009, here
:class:`qcllp.learn.baselines.MeanMap`) assumes ``b_j^+ = b^+``, ``b_j^- = b^-`` for all bags
(homogeneity) and solves least squares for them.

* :class:`LaplacianMeanMap` (LMM, the paper's Algorithm 1) relaxes homogeneity: the per-bag
  class means ``B^+-`` (2K x D, all ``b_j^+`` then all ``b_j^-``) minimise
  ``|B - Pi B^+-|_F^2 + gamma tr(B^+-' L B^+-) + eps |B^+-|^2`` with
  ``Pi = [diag(p) | diag(1 - p)]`` and ``L = diag(L_a, L_a)``, ``L_a`` the Laplacian of a
  similarity graph over the bags: similar bags get similar class means, not all bags the same
  ones. The minimiser solves the 2K x 2K
  linear system ``(Pi' Pi + gamma L + eps I) B^+- = Pi' B``. The estimated mean operator
  then replaces the unknown one in the risk, and ``theta`` minimises it (plus a ridge).
* :class:`AlternatingMeanMap` (AMM, the paper's Algorithm 2) starts from LMM's (or MeanMap's)
  model and alternates: the labeling ``sigma`` consistent with every bag's proportion that
  minimises (AMM^min) or maximises (AMM^max) the risk of the current model, then the model
  minimising the risk with that labeling's mean operator ``mu(sigma)``. With ``mu(sigma)`` the
  risk *is* the logistic loss on the labels ``sigma``, and its minimum over ``sigma`` gives a
  bag the ``round(p_j |B_j|)`` positives the model scores highest (the label step of
  :mod:`qcllp.learn.psvm.label_step` with the proportions enforced; ``p_j |B_j|`` is rounded to
  the nearest count). It returns the iterate of least risk.

Choices where the paper leaves room or where we deviate (all measured on the tests' data):

* **Loss and regulariser.** The logistic loss only (the paper admits a wider class); minimise
  ``sum_i s(theta.x~_i) - m/2 theta.mu + reg |w|^2``, i.e. ``m`` times the paper's risk, so
  that ``reg`` is on the scale of :class:`~qcllp.learn.baselines.MeanMap`'s (whose objective
  is a sum too); the bias is not penalised. L-BFGS with the exact gradient
  ``sum_i (sigmoid(z_i) - 1/2) x~_i - m mu / 2 (+ 2 reg w)``, warm-started across AMM's steps.
* **The bias entry of the mean operator** is ``1/m sum_j |B_j| (2 p_j - 1)``, known exactly; it
  is set so rather than estimated.
* **Similarity graph.** Gaussian similarity of the bag means of the (mapped) features,
  ``v_jk = exp(-|b_j - b_k|^2 / (2 h^2))``, bandwidth ``h`` by default the median distance
  between bag means; the paper's graphs (a similarity of bag means, or side information such
  as geography) are not pinned down enough to copy. Ours: ``V`` is scaled so that the mean
  degree is 1, which keeps ``laplacian_weight`` comparable across bag counts, and ``eps =
  1e-8``. The fit term weighs bags equally (as MeanMap here). Large ``laplacian_weight``
  tends to MeanMap (connected graph: homogeneity), small to a per-bag fit that
  the constraints ``b_j = p_j b_j^+ + (1 - p_j) b_j^-`` leave undetermined.
* **AMM's default is AMM^min.** Its label step makes the labeling agree with the model within
  the proportions (self-training constrained by the bags, alter-pSVM's label step without the
  slack) and both half steps lower the same risk, so a run descends and stops once the
  labeling repeats. AMM^max takes the labeling the model fits *worst* (the paper's
  adversarial, robustness-minded variant): its refit turns the model towards the opposite
  labels, so it swings between a model and roughly its mirror image for all ``max_iter``
  rounds and relies on the final choice of the least-risk iterate. Measured with the mirror
  start below: toy set 100 % both; XOR (RBF) training ROC AUC 0.995 both; heart (linear,
  bags of 8 / 32, one draw) 84.8 / 73.0 % for min against 83.7 / 70.7 % for max, at fewer
  alternations. ``variant="max"`` stays available.
* **AMM starts (ours).** Besides the initial model (``init``: LMM, MeanMap or random
  labels), the alternation is also run from its mirror image (``-theta``), and ``n_restarts -
  1`` further runs start from random proportion-consistent labels; the run of least risk
  wins. The mirror start is what recovers the pSVM toy set (Yu et al. 2013, Fig. 1): its bag
  means lie on the wrong side, so LMM and MeanMap point the wrong way (0 % accuracy), and
  AMM^min started there keeps that labeling (a local minimum, 0 %); from the mirror image it
  reaches the true labels (100 %), whose risk is far lower. (AMM^max without the mirror start
  also gets there, 100 %, by its swings, but reaches only 0.88 ROC AUC on XOR.) Runs go
  through joblib, seeds drawn up front, so ``n_jobs`` does not change the result.
* **Known labels** (``y`` in ``fit``) are kept fixed by AMM's label step; LMM ignores them.

Both learners work on the given features or an explicit feature map
(:mod:`qcllp.learn.core.kernels`: ``kernel="rbf"``, exact for small N, Nystroem beyond), so the RBF
map gives a nonlinear model; probabilities come from
:class:`~qcllp.learn.core.margin.MarginLLPClassifier` (bag-calibrated sigmoid of the decision
value, one-vs-rest for more than two classes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from joblib import Parallel, delayed
from scipy.linalg import solve
from scipy.optimize import minimize
from scipy.special import expit

from qcllp.learn.baselines import bag_means
from qcllp.learn.core.base import SEED_MAX
from qcllp.learn.core.kernels import FEATURE_MAP_CONSTRAINTS, LinearDecision, estimator_features
from qcllp.learn.core.margin import MarginLLPClassifier
from qcllp.learn.core.params import COUNT, INTEGER, POSITIVE, StrOptions
from qcllp.learn.core.threads import single_threaded
from qcllp.learn.psvm.label_step import BagLabeler

__all__ = [
    "AlternatingMeanMap",
    "FittedMeanMap",
    "LaplacianMeanMap",
    "fit_mean_operator",
    "homogeneous_class_means",
    "laplacian_class_means",
    "mean_operator",
]

_EPS = 1e-8


def laplacian_class_means(
    means: np.ndarray, shares: np.ndarray, weight: float, bandwidth: float | str = "median"
) -> tuple[np.ndarray, np.ndarray]:
    """LMM's per-bag class means ``(B^+, B^-)``, each (K, D), from the bag means (K, D) and
    shares (K,): the minimiser of ``|B - Pi B^+-|^2 + weight tr(B^+-' L B^+-) + eps |B^+-|^2``
    (module docstring)."""
    k = len(shares)
    sq = np.sum(means**2, axis=1)
    dist2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * means @ means.T, 0.0)
    if isinstance(bandwidth, str):
        off = np.sqrt(dist2[np.triu_indices(k, 1)])
        off = off[off > 0]
        h = float(np.median(off)) if len(off) else 1.0
    else:
        h = float(bandwidth)
    V = np.exp(-dist2 / (2.0 * h * h))
    np.fill_diagonal(V, 0.0)
    degree = V.sum(axis=1)
    if degree.sum() > 0:
        scale = degree.mean()
        V, degree = V / scale, degree / scale
    La = np.diag(degree) - V
    p, q = shares, 1.0 - shares
    system = np.block(
        [
            [np.diag(p * p) + weight * La, np.diag(p * q)],
            [np.diag(p * q), np.diag(q * q) + weight * La],
        ]
    )
    system[np.diag_indices(2 * k)] += _EPS
    rhs = np.vstack([p[:, None] * means, q[:, None] * means])
    both = solve(system, rhs, assume_a="sym")
    return both[:k], both[k:]


def homogeneous_class_means(means: np.ndarray, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MeanMap's class means, the same for every bag: least squares of ``b_j = p_j b^+ + (1 -
    p_j) b^-`` over the bags (minimum norm when all shares are equal), as (K, D) arrays."""
    Pi = np.column_stack([shares, 1.0 - shares])
    pos, neg = np.linalg.lstsq(Pi, means, rcond=None)[0]
    k = len(shares)
    return np.tile(pos, (k, 1)), np.tile(neg, (k, 1))


def mean_operator(
    pos: np.ndarray, neg: np.ndarray, shares: np.ndarray, sizes: np.ndarray
) -> np.ndarray:
    """``m mu = sum_j |B_j| (p_j b_j^+ - (1 - p_j) b_j^-)`` with the exact bias entry appended:
    (D + 1,), the sum of ``y_i x~_i`` the labels would give."""
    w = sizes * shares
    features = w @ pos - (sizes - w) @ neg
    return np.append(features, np.sum(sizes * (2.0 * shares - 1.0)))


def fit_mean_operator(
    Phi: np.ndarray, mu_sum: np.ndarray, reg: float, theta0: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """``theta = (w, b)`` minimising ``sum_i s(w.phi_i + b) - theta.mu_sum / 2 + reg |w|^2`` and
    that minimum; with ``mu_sum = sum_i y_i x~_i`` of ±1 labels this is logistic regression."""
    D = Phi.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:D], theta[D]
        z = Phi @ w + b
        value = np.sum(np.logaddexp(0.0, z) - 0.5 * z) - 0.5 * theta @ mu_sum + reg * w @ w
        r = expit(z) - 0.5
        grad = np.append(Phi.T @ r + 2.0 * reg * w, r.sum()) - 0.5 * mu_sum
        return float(value), grad

    start = np.zeros(D + 1) if theta0 is None else theta0
    result = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 500})
    return result.x, float(result.fun)


@dataclass(eq=False)
class FittedMeanMap(LinearDecision):
    """The binary model of LMM / AMM: the linear decision plus what the fit recorded —
    ``objective`` (the regularised risk, ``m`` times the paper's), ``mean_operator`` (``m mu``
    the model was fitted to), ``n_iter`` (AMM alternations of the winning run, 0 for LMM)
    and ``start_objectives`` (AMM: the final risk of every start)."""

    objective: float = np.nan
    mean_operator: np.ndarray | None = None
    n_iter: int = 0
    start_objectives: np.ndarray | None = None


_LMM_CONSTRAINTS = {
    "reg": [POSITIVE],
    "laplacian_weight": [POSITIVE],
    "bandwidth": [POSITIVE, StrOptions({"median"})],
    **FEATURE_MAP_CONSTRAINTS,
    "random_state": ["random_state"],
}


class LaplacianMeanMap(MarginLLPClassifier):
    """Laplacian Mean Map (Patrini et al. 2014, Algorithm 1; module docstring).

    Parameters
    ----------
    reg : ridge weight on ``|w|^2`` against the summed logistic risk (MeanMap's scale).
    laplacian_weight : ``gamma``, the weight of the graph Laplacian on the per-bag class means;
        large values tend to MeanMap.
    bandwidth : of the Gaussian bag similarity, a positive number or ``"median"`` (the median
        distance between bag means).
    kernel, gamma, n_components, exact_kernel_max_n : the feature map
        (:mod:`qcllp.learn.core.kernels`).
    random_state : seeds the Nystroem map (the only randomness).

    Fitted attributes beyond the base class: ``objective_`` (one per binary task).
    """

    _parameter_constraints = dict(_LMM_CONSTRAINTS)

    def __init__(
        self,
        reg: float = 1.0,
        laplacian_weight: float = 1.0,
        bandwidth: float | str = "median",
        kernel: str = "linear",
        gamma: float | str = "scale",
        n_components: int = 500,
        exact_kernel_max_n: int = 1000,
        random_state=None,
    ):
        self.reg = reg
        self.laplacian_weight = laplacian_weight
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.exact_kernel_max_n = exact_kernel_max_n
        self.random_state = random_state

    def fit(self, X, bags, proportions, y=None):
        """Fit as :meth:`MarginLLPClassifier.fit`; records ``objective_``."""
        super().fit(X, bags, proportions, y)
        self.objective_ = np.array([m.objective for m in self.estimators_])
        return self

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        with single_threaded():  # small dense algebra: contending BLAS threads only slow it
            feature_map, Phi = estimator_features(self, X, random_state)
            mu_sum = _lmm_mean_operator(self, Phi, bag_codes, shares, "lmm")
            theta, value = fit_mean_operator(Phi, mu_sum, self.reg)
        return FittedMeanMap(feature_map, theta[:-1], float(theta[-1]), value, mu_sum)


def _lmm_mean_operator(estimator, Phi, bag_codes, shares, how: str) -> np.ndarray:
    k = len(shares)
    sizes = np.bincount(bag_codes, minlength=k).astype(float)
    means = bag_means(Phi, bag_codes, k)
    if how == "lmm":
        pos, neg = laplacian_class_means(
            means, shares, estimator.laplacian_weight, estimator.bandwidth
        )
    else:
        pos, neg = homogeneous_class_means(means, shares)
    return mean_operator(pos, neg, shares, sizes)


class AlternatingMeanMap(MarginLLPClassifier):
    """Alternating Mean Map (Patrini et al. 2014, Algorithm 2; module docstring).

    Parameters
    ----------
    reg, laplacian_weight, bandwidth : as :class:`LaplacianMeanMap` (the latter two for the
        LMM start).
    variant : ``"min"`` (AMM^min, default: the labeling of least risk, i.e. each bag's top-
        scored rows positive) or ``"max"`` (AMM^max: the labeling of largest risk).
    init : the starting model: ``"lmm"`` (default), ``"meanmap"`` (homogeneous class means) or
        ``"random"`` (random labels within the proportions instead of a model).
    max_iter : alternations per run (label step + refit); a run also stops when the label step
        repeats its labeling.
    n_restarts : runs from the initial model and its mirror image count as one; ``n_restarts -
        1`` more start from random proportion-consistent labels. The run of least risk wins.
    kernel, gamma, n_components, exact_kernel_max_n : the feature map.
    n_jobs : joblib workers over the runs (``None``: one); the result does not depend on it.
    random_state : seeds the Nystroem map and the random starts.

    Fitted attributes beyond the base class: ``objective_``, ``n_iter_`` (one per binary task).
    """

    _parameter_constraints = {
        **_LMM_CONSTRAINTS,
        "variant": [StrOptions({"min", "max"})],
        "init": [StrOptions({"lmm", "meanmap", "random"})],
        "max_iter": [COUNT],
        "n_restarts": [COUNT],
        "n_jobs": [None, INTEGER],
    }

    def __init__(
        self,
        reg: float = 1.0,
        variant: str = "min",
        init: str = "lmm",
        max_iter: int = 10,
        n_restarts: int = 1,
        laplacian_weight: float = 1.0,
        bandwidth: float | str = "median",
        kernel: str = "linear",
        gamma: float | str = "scale",
        n_components: int = 500,
        exact_kernel_max_n: int = 1000,
        n_jobs: int | None = None,
        random_state=None,
    ):
        self.reg = reg
        self.variant = variant
        self.init = init
        self.max_iter = max_iter
        self.n_restarts = n_restarts
        self.laplacian_weight = laplacian_weight
        self.bandwidth = bandwidth
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.exact_kernel_max_n = exact_kernel_max_n
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, X, bags, proportions, y=None):
        """Fit as :meth:`MarginLLPClassifier.fit`; records ``objective_`` and ``n_iter_``."""
        super().fit(X, bags, proportions, y)
        self.objective_ = np.array([m.objective for m in self.estimators_])
        self.n_iter_ = np.array([m.n_iter for m in self.estimators_])
        return self

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        seeds = random_state.randint(SEED_MAX, size=int(self.n_restarts))
        starts: list[tuple[np.ndarray | None, int]] = []
        with single_threaded():  # as LaplacianMeanMap; every run is single-threaded too
            feature_map, Phi = estimator_features(self, X, random_state)
            if self.init == "random":
                starts.append((None, int(seeds[0])))
            else:
                mu_sum = _lmm_mean_operator(self, Phi, bag_codes, shares, self.init)
                theta0, _ = fit_mean_operator(Phi, mu_sum, self.reg)
                starts += [(theta0, 0), (-theta0, 0)]
        starts += [(None, int(seed)) for seed in seeds[1:]]
        labeler = BagLabeler(bag_codes, shares, known)
        runs = Parallel(n_jobs=self.n_jobs)(
            delayed(_alternate)(
                Phi, labeler, theta, seed, self.variant, self.reg, int(self.max_iter)
            )
            for theta, seed in starts
        )
        values = np.array([r[0] for r in runs])
        value, theta, n_iter, mu_sum = runs[int(np.argmin(values))]
        return FittedMeanMap(
            feature_map, theta[:-1], float(theta[-1]), value, mu_sum, n_iter, values
        )


def _alternate(
    Phi: np.ndarray,
    labeler: BagLabeler,
    theta: np.ndarray | None,
    seed: int,
    variant: str,
    reg: float,
    max_iter: int,
) -> tuple[float, np.ndarray, int, np.ndarray]:
    """One AMM run (Algorithm 2) from ``theta`` or, when ``None``, from random labels drawn with
    ``seed``: ``(least risk, its theta, alternations until then, its m mu)``."""
    sign = 1.0 if variant == "min" else -1.0
    best = (np.inf, theta, 0, None)
    labels = None
    with single_threaded():
        for t in range(1, max_iter + 1):
            if theta is None:
                scores = np.random.RandomState(seed).uniform(-1.0, 1.0, len(Phi))
            else:
                scores = sign * (Phi @ theta[:-1] + theta[-1])
            new = labeler.random_labels(scores)
            if labels is not None and np.array_equal(new, labels):
                break
            labels = new
            mu_sum = np.append(labels @ Phi, labels.sum())
            theta, value = fit_mean_operator(Phi, mu_sum, reg, theta)
            if value < best[0]:
                best = (value, theta, t, mu_sum)
    return best
