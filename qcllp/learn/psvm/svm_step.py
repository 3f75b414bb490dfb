"""The SVM step of alter-pSVM (Yu et al. 2013, Alg. 1): (w, b) for fixed labels, two losses.

With the labels ``y`` fixed, eq. (4) is an ordinary SVM in (w, b). Each loss comes with its
solver, the sum of the loss over the margins (for the objective) and what labeling a row
positive saves (the ``delta_i`` of the label step, eq. 7); :data:`LOSSES` maps the loss name to
these three.

* **Squared hinge** ``max(0, 1 - y f)^2`` (the L2-SVM, alter-pSVM's default):
  :class:`SquaredHingeSVM` solves it exactly in the primal by the finite Newton method (Keerthi
  & DeCoste 2005; liblinear's primal L2-SVM), linear in N, warm-started from the previous
  solution across alternations and annealing steps, with its active-set Gram matrix updated
  only for the rows whose label or margin status changed.
* **Hinge** ``max(0, 1 - y f)`` (the paper's loss): :class:`HingeSVM`, libsvm up to 2,000 rows
  and liblinear above. Neither can be warm-started, so this step is 4-8 times slower on heart,
  without being more accurate there.

The bias ``b`` is free (``bias_penalty`` 0, eq. 4 read literally) or penalised as a weight
(``bias_penalty`` 1, ``1/2 b^2``, as liblinear does). Both solvers expose ``fit(y, C, warm)``
and ``mirror(state)`` (the model negated), which is what
:func:`qcllp.learn.psvm.alternating.run_annealing` calls.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC, LinearSVC

__all__ = [
    "LOSSES",
    "HingeSVM",
    "HingeState",
    "SVMState",
    "SquaredHingeSVM",
    "hinge_gain",
    "hinge_sum",
    "regulariser",
    "squared_hinge_gain",
    "squared_hinge_sum",
]


@dataclass(eq=False)
class SVMState:
    """A squared-hinge SVM solution with what the next warm start reuses.

    ``z`` = (w, b); ``f = Z z``; ``active`` rows with ``y f < 1`` for the labels ``y``; ``gram`` =
    sum over active rows of ``Z_i Z_i'`` and ``moment`` = sum over active rows of ``y_i Z_i``.
    """

    z: np.ndarray
    f: np.ndarray
    y: np.ndarray
    active: np.ndarray
    gram: np.ndarray
    moment: np.ndarray


class SquaredHingeSVM:
    """``argmin_z 1/2 |w|^2 + lam/2 b^2 + C sum_i max(0, 1 - y_i z.Z_i)^2``, ``z = (w, b)``.

    ``lam`` is ``bias_penalty``: 0 leaves the bias free as eq. (4) reads, 1 penalises it like a
    weight, as liblinear does.

    Finite Newton method (Keerthi & DeCoste 2005): for a fixed set A of margin violators the
    objective is quadratic and its minimiser solves ``(R + 2C G_A) z = 2C s_A`` with
    ``R = diag(1, ..., 1, lam)``, ``G_A = sum_A Z_i Z_i'`` and ``s_A = sum_A y_i Z_i``; step
    there with Armijo backtracking, recompute A, repeat until A no longer changes after a full
    step (then z is the exact optimum). ``G_A`` and ``s_A`` are *updated* from the rows whose
    label or margin status changed since the warm start, so a call costs a few passes of
    O(N D) plus O(changed rows x D^2), which is what makes alter-pSVM linear in N.
    """

    def __init__(self, Z: np.ndarray, bias_penalty: float = 0.0):
        self.Z = np.ascontiguousarray(Z)
        self.ZT = np.ascontiguousarray(Z.T)
        D = Z.shape[1]
        self.reg = np.ones(D)
        self.reg[-1] = bias_penalty

    def _scores(self, z: np.ndarray) -> np.ndarray:
        return z @ self.ZT

    def _update(self, state: SVMState, y: np.ndarray, active: np.ndarray) -> SVMState:
        changed = np.flatnonzero((active != state.active) | (y != state.y))
        if len(changed) > len(y) // 4:
            Za = self.Z[active]
            gram, moment = Za.T @ Za, Za.T @ y[active]
        else:
            Zc = self.Z[changed]
            weight = active[changed].astype(float) - state.active[changed]
            gram = state.gram + (Zc.T * weight) @ Zc
            signed = active[changed] * y[changed] - state.active[changed] * state.y[changed]
            moment = state.moment + Zc.T @ signed
        return SVMState(state.z, state.f, y, active, gram, moment)

    @staticmethod
    def mirror(state: SVMState) -> SVMState:
        """The model negated (w, b -> -w, -b), with its bookkeeping for the negated labels."""
        return SVMState(-state.z, -state.f, -state.y, state.active, state.gram, -state.moment)

    def _value(self, z: np.ndarray, f: np.ndarray, y: np.ndarray, C: float) -> float:
        return regulariser(z, self.reg[-1]) + C * squared_hinge_sum(y * f)

    def fit(self, y: np.ndarray, C: float, warm: SVMState | None = None, max_iter: int = 50):
        """Solve for labels ``y`` (±1) and weight ``C``, warm-started from ``warm``."""
        D = self.Z.shape[1]
        if warm is None:
            z, f = np.zeros(D), np.zeros(len(y))
            warm = SVMState(z, f, y, np.zeros(len(y), dtype=bool), np.zeros((D, D)), np.zeros(D))
        state = self._update(warm, y, y * warm.f < 1.0)
        z, f = state.z, state.f
        value = self._value(z, f, y, C)
        for _ in range(max_iter):
            hess = 2.0 * C * state.gram
            hess[np.diag_indices(D)] += self.reg + 1e-12 * (1.0 + hess.diagonal().max())
            target = _solve_spd(hess, 2.0 * C * state.moment)
            direction = target - z
            grad = self.reg * z - 2.0 * C * (state.moment - state.gram @ z)
            slope = float(grad @ direction)
            if slope >= -1e-14 * max(value, 1e-12):
                break
            f_dir = self._scores(direction)
            t = 1.0
            while True:
                new_value = self._value(z + t * direction, f + t * f_dir, y, C)
                if new_value <= value + 1e-4 * t * slope or t < 1e-10:
                    break
                t *= 0.5
            if new_value > value:
                break
            z, f, value = z + t * direction, f + t * f_dir, new_value
            active = y * f < 1.0
            settled = t == 1.0 and np.array_equal(active, state.active)
            state = self._update(
                SVMState(z, f, y, state.active, state.gram, state.moment), y, active
            )
            if settled:
                break
        f = self._scores(z)  # exact scores, free of accumulated rounding
        return self._update(SVMState(z, f, y, state.active, state.gram, state.moment), y, y * f < 1)


def regulariser(z: np.ndarray, bias_penalty: float) -> float:
    """``1/2 |w|^2 + bias_penalty/2 b^2`` for ``z = (w, b)``."""
    return 0.5 * (float(z[:-1] @ z[:-1]) + bias_penalty * float(z[-1]) ** 2)


def _solve_spd(hess: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``hess^{-1} rhs`` for the Newton system: Cholesky on large systems (a third of LU's
    time at D = 217, the exact RBF map of heart), LU where its lower overhead wins."""
    if len(rhs) > 64:
        try:
            return cho_solve(cho_factor(hess, check_finite=False), rhs, check_finite=False)
        except np.linalg.LinAlgError:
            pass  # numerically indefinite (no active rows, bias direction): LU below
    return np.linalg.solve(hess, rhs)


def squared_hinge_sum(yf: np.ndarray) -> float:
    """``sum_i max(0, 1 - yf_i)^2`` for the margins ``yf`` (overwritten: it is scratch space)."""
    np.subtract(1.0, yf, out=yf)
    np.maximum(yf, 0.0, out=yf)
    return float(yf @ yf)


def squared_hinge_gain(f: np.ndarray) -> np.ndarray:
    """``max(0, 1 + f)^2 - max(0, 1 - f)^2``: what labeling a row positive saves (eq. 7)."""
    up, down = np.maximum(1.0 + f, 0.0), np.maximum(1.0 - f, 0.0)
    up *= up
    down *= down
    up -= down
    return up


def hinge_sum(yf: np.ndarray) -> float:
    """``sum_i max(0, 1 - yf_i)`` for the margins ``yf`` (overwritten: it is scratch space)."""
    np.subtract(1.0, yf, out=yf)
    np.maximum(yf, 0.0, out=yf)
    return float(yf.sum())


def hinge_gain(f: np.ndarray) -> np.ndarray:
    """``max(0, 1 + f) - max(0, 1 - f)``: what labeling a row positive saves (eq. 7)."""
    return np.maximum(1.0 + f, 0.0) - np.maximum(1.0 - f, 0.0)


@dataclass(eq=False)
class HingeState:
    """A hinge-loss SVM solution: ``z`` = (w, b) and the scores ``f = Z z``."""

    z: np.ndarray
    f: np.ndarray


class HingeSVM:
    """``argmin_z 1/2 |w|^2 + lam/2 b^2 + C sum_i max(0, 1 - y_i z.Z_i)``: the paper's SVM step.

    With a free bias (``bias_penalty`` 0, as eq. 4 reads) it is solved exactly by libsvm on
    the Gram matrix of the features (``SVC(kernel="precomputed")``) up to ``exact_max_n`` rows,
    and above by liblinear's dual coordinate descent (``LinearSVC``), linear in N per pass,
    which can only regularise the bias, here as a feature of value ``intercept_scaling = 10``
    (larger values stall its convergence: on heart at C = 1, 217 against the optimum 92.5 with
    100, 92.6 with 10). With ``bias_penalty`` 1 it is liblinear with ``intercept_scaling = 1``
    at every N: exactly the penalty 1/2 b^2. Neither solver can be warm-started, so the hinge
    is several times slower than the squared hinge. An imprecise step that would raise the
    objective is rejected by :func:`qcllp.learn.psvm.alternating.run_annealing`.
    """

    def __init__(self, Z: np.ndarray, exact_max_n: int = 2000, bias_penalty: float = 0.0):
        if bias_penalty not in (0.0, 1.0):
            raise ValueError(f"the hinge step takes bias_penalty 0 or 1, got {bias_penalty!r}")
        self.Z = Z
        self.bias_penalty = bias_penalty
        exact = len(Z) <= exact_max_n and not bias_penalty
        self.gram = Z[:, :-1] @ Z[:, :-1].T if exact else None

    def fit(self, y: np.ndarray, C: float, warm: HingeState | None = None) -> HingeState:
        if np.all(y == y[0]):  # one class: w = 0; b = y[0] fits every row with zero loss
            z = np.zeros(self.Z.shape[1])  # (with 1/2 b^2 on top, b stops at C n if that is less)
            z[-1] = y[0] * (min(1.0, C * len(y)) if self.bias_penalty else 1.0)
            return HingeState(z, self.Z @ z)
        if self.gram is not None:
            svm = SVC(kernel="precomputed", C=C, tol=1e-5).fit(self.gram, y)
            w = svm.dual_coef_[0] @ self.Z[svm.support_, :-1]
            z = np.append(w, svm.intercept_[0])
        else:
            scaling = 1.0 if self.bias_penalty else 10.0
            svm = LinearSVC(
                C=C, loss="hinge", dual=True, intercept_scaling=scaling, tol=1e-5, random_state=0
            )
            with warnings.catch_warnings():  # an unconverged step is caught by the guard
                warnings.simplefilter("ignore", ConvergenceWarning)
                svm.fit(self.Z[:, :-1], y)
            z = np.append(svm.coef_[0], svm.intercept_[0])
        return HingeState(z, self.Z @ z)

    @staticmethod
    def mirror(state: HingeState) -> HingeState:
        return HingeState(-state.z, -state.f)


LOSSES = {  # loss name: (SVM-step solver, sum of the loss over margins, label-step gain)
    "squared_hinge": (SquaredHingeSVM, squared_hinge_sum, squared_hinge_gain),
    "hinge": (HingeSVM, hinge_sum, hinge_gain),
}
