"""The two classic LLP baselines the pSVM paper compares against: InvCal and MeanMap.

Both summarise a bag by its mean feature vector, which is exactly their weakness (Yu et al.
2013, Sect. 3.3 and Fig. 1: when a bag's mean lies on the "wrong" side, both fail). They are
here as comparison points, kept simple and faithful; both return the linear model
``f(x) = w.phi(x) + b`` on the same explicit feature maps as the pSVM learners
(:mod:`qcllp.learn.core.kernels`: linear, exact RBF map for small N, Nystroem for large N).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import minimize
from sklearn.svm import SVR

from qcllp.learn.core.kernels import FEATURE_MAP_CONSTRAINTS, LinearDecision, estimator_features
from qcllp.learn.core.margin import MarginLLPClassifier
from qcllp.learn.core.params import NON_NEGATIVE, POSITIVE

__all__ = ["InvCal", "MeanMap", "bag_means"]


def bag_means(Phi: np.ndarray, bag_codes: np.ndarray, n_bags: int) -> np.ndarray:
    """(K, D) mean feature vector of every bag, ``m_k = 1/|B_k| sum_{i in B_k} phi(x_i)``."""
    sizes = np.bincount(bag_codes, minlength=n_bags).astype(float)
    n = len(bag_codes)
    averaging = sparse.csr_matrix(
        (1.0 / sizes[bag_codes], (bag_codes, np.arange(n))), shape=(n_bags, n)
    )
    return np.asarray(averaging @ Phi)


class InvCal(MarginLLPClassifier):
    """Inverse Calibration (Rueping 2010; pSVM paper eq. 5-6).

    Every bag becomes one "super-instance", its mean ``m_k``, with the soft label ``p_k``.
    An epsilon-insensitive support vector regression fits ``w.m_k + b`` to the inverse
    sigmoid ``-log(1/p_k - 1)`` of the share, i.e. eq. (5): minimise ``1/2 |w|^2 + C_p
    sum_k (xi_k + xi*_k)`` subject to ``|w.m_k + b + log(1/p_k - 1)| <= epsilon + xi``; the
    model's bag proportion is then ``q_k = sigmoid(w.m_k + b)`` (eq. 6) and an instance is
    classified by the sign of ``w.phi(x) + b``.

    Choices: one ``epsilon`` for all bags (the paper's grid tunes a single value); shares of 0
    or 1, whose inverse sigmoid is infinite, are clipped to ``[1 / (2 |B_k|), 1 - 1 / (2
    |B_k|)]`` (half an instance away from the boundary). Solved by scikit-learn's ``SVR`` with
    a linear kernel on the (mapped) bag means.
    """

    _parameter_constraints = {
        "C_p": [POSITIVE],
        "epsilon": [NON_NEGATIVE],
        **FEATURE_MAP_CONSTRAINTS,
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        C_p: float = 1.0,
        epsilon: float = 0.0,
        kernel: str = "linear",
        gamma: float | str = "scale",
        n_components: int = 500,
        exact_kernel_max_n: int = 1000,
        random_state=None,
    ):
        self.C_p = C_p
        self.epsilon = epsilon
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.exact_kernel_max_n = exact_kernel_max_n
        self.random_state = random_state

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        feature_map, Phi = estimator_features(self, X, random_state)
        sizes = np.bincount(bag_codes, minlength=len(shares)).astype(float)
        p = np.clip(shares, 0.5 / sizes, 1.0 - 0.5 / sizes)
        target = -np.log(1.0 / p - 1.0)
        svr = SVR(kernel="linear", C=self.C_p, epsilon=self.epsilon)
        svr.fit(bag_means(Phi, bag_codes, len(shares)), target)
        return LinearDecision(feature_map, np.ravel(svr.coef_), float(svr.intercept_[0]))


class MeanMap(MarginLLPClassifier):
    """MeanMap (Quadrianto, Smola, Caetano & Le 2009), linear-feature version.

    1. The mean map: bag means are mixtures of the class means, ``m_k = p_k mu_1 + (1 - p_k)
       mu_0``, so ``(mu_0, mu_1)`` is the least-squares solution over the bags of
       ``Pi M_class = M_bags`` (``Pi`` the K x 2 proportion matrix; unweighted as in the
       original).
    2. A conditional exponential model ``p(y | x) ∝ exp(theta_y . phi~(x))`` with
       ``phi~ = (phi, 1)`` is fitted by maximum likelihood where the unknown labeled sufficient
       statistic ``sum_i phi~(x_i, y_i)`` is replaced by ``N sum_y pi_y mu_y`` (``pi_y`` the
       overall class shares): minimise ``sum_i log sum_y exp(theta_y . phi~_i) - N sum_y pi_y
       theta_y . mu_y + reg |theta|^2`` with L-BFGS.

    "Linear-feature version": the mean map is taken of the explicit features (``kernel``
    "linear", or an RBF feature map) rather than a general joint kernel on (x, y), and the
    decision value is ``(theta_1 - theta_0) . phi~(x)``. When all shares are equal the
    least-squares system is rank deficient and the minimum-norm solution is used (the paper's
    Sect. 7.1 notes MeanMap is ill-posed there).
    """

    _parameter_constraints = {
        "reg": [POSITIVE],
        **FEATURE_MAP_CONSTRAINTS,
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        reg: float = 1.0,
        kernel: str = "linear",
        gamma: float | str = "scale",
        n_components: int = 500,
        exact_kernel_max_n: int = 1000,
        random_state=None,
    ):
        self.reg = reg
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.exact_kernel_max_n = exact_kernel_max_n
        self.random_state = random_state

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        feature_map, Phi = estimator_features(self, X, random_state)
        Phi = np.column_stack([Phi, np.ones(len(Phi))])
        n, D = Phi.shape
        Pi = np.column_stack([1.0 - shares, shares])
        class_means = np.linalg.lstsq(Pi, bag_means(Phi, bag_codes, len(shares)), rcond=None)[0]
        sizes = np.bincount(bag_codes, minlength=len(shares))
        prior = np.array([sizes @ (1.0 - shares), sizes @ shares]) / n
        statistic = n * prior[:, None] * class_means  # (2, D)

        def loss(theta_flat: np.ndarray) -> tuple[float, np.ndarray]:
            theta = theta_flat.reshape(2, D)
            scores = Phi @ theta.T  # (n, 2)
            log_norm = np.logaddexp(scores[:, 0], scores[:, 1])
            prob = np.exp(scores - log_norm[:, None])
            value = log_norm.sum() - np.sum(statistic * theta) + self.reg * np.sum(theta**2)
            grad = prob.T @ Phi - statistic + 2.0 * self.reg * theta
            return float(value), grad.ravel()

        result = minimize(loss, np.zeros(2 * D), jac=True, method="L-BFGS-B")
        theta = result.x.reshape(2, D)
        direction = theta[1] - theta[0]
        return LinearDecision(feature_map, direction[:-1], float(direction[-1]))
