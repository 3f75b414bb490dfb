"""Explicit feature maps for the large-margin LLP learners, and the linear model they share.

Every learner of the proportion-SVM family here works in the primal on explicit features, so
one linear solver serves every kernel:

* ``"linear"``: the features themselves;
* ``"rbf"`` with at most ``exact_kernel_max_n`` training rows: the *exact* empirical kernel
  map. With ``K = V diag(lam) V^T`` the RBF kernel matrix of the training rows, a row x is mapped
  to ``k(x, X_train) V diag(lam)^{-1/2}`` (eigenvalues below ``1e-10 * lam_max`` dropped). On
  the training rows the inner products of these features reproduce ``K``, and by the
  representer theorem the optimal SVM weight vector lies in the span of the training rows, so a
  linear SVM on these features *is* the kernel SVM (the precomputed-kernel solution), up to the
  dropped numerically-null directions;
* ``"rbf"`` with more rows: a Nystroem approximation with ``n_components`` landmarks, the
  explicit feature map the pSVM paper recommends for large N (Yu et al. 2013, Sect. 7.2), which
  keeps alter-pSVM linear in N.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import numpy as np
from sklearn.kernel_approximation import Nystroem
from sklearn.metrics.pairwise import rbf_kernel

from qcllp.learn.core.params import COUNT, POSITIVE, Interval, StrOptions
from qcllp.learn.core.threads import single_threaded

__all__ = [
    "FEATURE_MAP_CONSTRAINTS",
    "KERNEL_CONSTRAINTS",
    "ExactRBFMap",
    "LinearDecision",
    "apply_map",
    "estimator_features",
    "make_feature_map",
    "resolve_gamma",
]

KERNELS = ("linear", "rbf")

KERNEL_CONSTRAINTS = {
    "kernel": [StrOptions(KERNELS)],
    "gamma": [POSITIVE, StrOptions({"scale"})],
    "n_components": [COUNT],
}
"""Constraints (:mod:`qcllp.learn.core.params`) on the parameters naming a learner's kernel."""

FEATURE_MAP_CONSTRAINTS = {
    **KERNEL_CONSTRAINTS,
    "exact_kernel_max_n": [Interval(Integral, 0, None, closed="left")],
}
"""The same for learners whose features :func:`estimator_features` makes."""


def resolve_gamma(gamma: float | str, X: np.ndarray) -> float:
    """``gamma`` as a number; ``"scale"`` means 1 / (n_features * X.var()) as in scikit-learn."""
    if isinstance(gamma, str):
        if gamma != "scale":
            raise ValueError(f"gamma must be a positive number or 'scale', got {gamma!r}")
        var = float(X.var())
        return 1.0 / (X.shape[1] * var) if var > 0 else 1.0
    if not np.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma must be a positive number or 'scale', got {gamma!r}")
    return float(gamma)


class ExactRBFMap:
    """The empirical kernel map of the RBF kernel on the training rows (see module docstring)."""

    def __init__(self, gamma: float, rel_eig_tol: float = 1e-10):
        self.gamma = gamma
        self.rel_eig_tol = rel_eig_tol

    def fit(self, X: np.ndarray) -> ExactRBFMap:
        K = rbf_kernel(X, gamma=self.gamma)
        with single_threaded():  # contending BLAS threads slow a small eigh down
            lam, V = np.linalg.eigh(K)
        keep = lam > self.rel_eig_tol * lam[-1]
        self.basis_ = X
        self.projection_ = V[:, keep] / np.sqrt(lam[keep])
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        return rbf_kernel(X, self.basis_, gamma=self.gamma) @ self.projection_


def make_feature_map(
    X: np.ndarray,
    kernel: str,
    gamma: float | str,
    *,
    n_components: int,
    exact_kernel_max_n: int,
    random_state: np.random.RandomState | int | None,
):
    """A fitted feature map for ``kernel`` (``None`` for the identity of the linear kernel)."""
    if kernel == "linear":
        return None
    if kernel != "rbf":
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    g = resolve_gamma(gamma, X)
    if X.shape[0] <= exact_kernel_max_n:
        return ExactRBFMap(g).fit(X)
    return Nystroem(
        gamma=g, n_components=min(int(n_components), X.shape[0]), random_state=random_state
    ).fit(X)


def estimator_features(estimator, X: np.ndarray, random_state) -> tuple[object, np.ndarray]:
    """The feature map an estimator's ``kernel``, ``gamma``, ``n_components`` and
    ``exact_kernel_max_n`` ask for, fitted on ``X``, and the features of ``X``."""
    feature_map = make_feature_map(
        X,
        estimator.kernel,
        estimator.gamma,
        n_components=estimator.n_components,
        exact_kernel_max_n=estimator.exact_kernel_max_n,
        random_state=random_state,
    )
    return feature_map, apply_map(feature_map, X)


def apply_map(feature_map, X: np.ndarray) -> np.ndarray:
    """Features of ``X`` under a map from :func:`make_feature_map`."""
    return X if feature_map is None else feature_map.transform(X)


@dataclass(eq=False)
class LinearDecision:
    """``f(x) = <coef, phi(x)> + intercept``: the binary model the margin learners return."""

    feature_map: object | None
    coef: np.ndarray
    intercept: float

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return apply_map(self.feature_map, X) @ self.coef + self.intercept
