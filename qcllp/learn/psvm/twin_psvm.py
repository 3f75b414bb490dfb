"""Twin alter-pSVM: label proportions with two nonparallel hyperplanes (Wang et al., Alg. 1).

Instead of one separating hyperplane, the twin SVM (TWSVM) fits one plane close to the
positives and at distance >= 1 from the negatives (problem 2, dual 4) and one plane close to the
negatives and away from the positives (problem 3, dual 5). The latent labels alternate with the
planes as in alter-pSVM: with ``y`` fixed both planes are TWSVM solutions; with the planes fixed
every bag's labels follow from sorting ``delta_a + delta_b`` (the reductions of the first two
terms of problems 8 and 9 when a row turns positive) with the absolute proportion loss, which
is :class:`qcllp.learn.psvm.label_step.BagLabeler` with weight ``C_p``. Annealing raises
``c1 = 1e-5 p C`` and ``c2 = 1e-5 (1 - p) C`` by ``1 + Delta`` per step, capped at C, while
both are below C (Alg. 1; ``p`` is the overall positive share). A row is classified by the
nearer plane.

Choices where the papers leave room:

* **The QPs.** The duals (4) and (5) are box-constrained QPs with the q x q (p x p) matrix
  ``G (H'H + eps I)^{-1} G'``. They are solved by accelerated projected gradient (FISTA)
  through the factor ``P = G L^{-T}`` (``L`` the Cholesky factor of ``H'H + eps I``), so one
  iteration costs O(N D) and the N x N matrix is never formed; dual variables are kept per row
  and warm-start the next solve. ``eps = 1e-6 (1 + |Z|_F^2 / D)`` is the usual TWSVM ridge
  that keeps ``H'H`` invertible; it is part of the objective (``eps/2 |z|^2``).
* **Sign of the second plane.** Stationarity of (3) gives ``(w_-, b_-) = +(G'G)^{-1} H'
  gamma`` (the twin paper prints a minus, a typo inherited from TWSVM write-ups).
* **One objective.** The alternation monitors the sum of problems (6) and (7) with the
  proportion loss counted once: ``sum_i loss_i(y_i) + C_p sum_k |p~_k - p_k|`` plus the ridge
  terms; this is what the label step minimises exactly.
* The sign check of :func:`.alternating.run_annealing` applies, with the mirror image ``(-z_neg,
  -z_pos)`` (the planes swap roles).
* The features (linear, exact RBF map, Nystroem) are those of :mod:`qcllp.learn.core.kernels`; the
  twin paper itself is linear.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import cho_factor, solve_triangular

from qcllp.learn.core.kernels import apply_map, estimator_features
from qcllp.learn.core.threads import single_threaded
from qcllp.learn.psvm.alternating import AlternatingPSVM, run_annealing, run_restarts, start_labels

__all__ = ["CollapsedPlaneWarning", "TwinPSVM", "twin_schedule", "twsvm_plane", "twsvm_ridge"]


def twin_schedule(p: float, C: float, delta: float) -> list[tuple[float, float]]:
    """(c1, c2) per annealing step of Alg. 1: start at 1e-5 (p C, (1-p) C), grow by 1 + delta."""
    c1, c2 = 1e-5 * p * C, 1e-5 * (1.0 - p) * C
    steps = []
    while c1 < C and c2 < C:
        c1, c2 = min((1.0 + delta) * c1, C), min((1.0 + delta) * c2, C)
        steps.append((c1, c2))
    return steps


def twsvm_plane(
    near: np.ndarray,
    far: np.ndarray,
    c: float,
    sign: float,
    eps: float,
    alpha0: np.ndarray | None = None,
    max_iter: int = 1000,
    tol: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray]:
    """One TWSVM plane: ``min 1/2 |near z|^2 + eps/2 |z|^2 + c sum max(0, 1 + sign far z)``.

    ``eps`` from :func:`twsvm_ridge`. ``sign=+1`` is problem (2) (plane of the positives,
    ``near = H``, ``far = G``; dual 4),
    ``sign=-1`` problem (3) (``near = G``, ``far = H``; dual 5). Solves the dual ``max e'a -
    1/2 a' far M^{-1} far' a``, ``0 <= a <= c`` by FISTA (stopped when the projected gradient
    is below ``tol`` in every coordinate) and returns ``(z, a)`` with ``z = -sign
    M^{-1} far' a``, ``M = near'near + eps I``.
    """
    D = near.shape[1]
    M = near.T @ near
    M[np.diag_indices(D)] += eps
    L, _ = cho_factor(M, lower=True)
    L = np.tril(L)
    P = solve_triangular(L, far.T, lower=True).T  # far L^{-T}, so P P' = far M^{-1} far'
    lipschitz = max(float(np.linalg.norm(P, 2)) ** 2, 1e-12)
    a = np.zeros(len(far)) if alpha0 is None else np.clip(alpha0, 0.0, c)
    v, t = a.copy(), 1.0
    for it in range(max_iter):
        grad = P @ (P.T @ v) - 1.0
        a_new = np.clip(v - grad / lipschitz, 0.0, c)
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        v = a_new + ((t - 1.0) / t_new) * (a_new - a)
        a, t = a_new, t_new
        if it % 10 == 9:  # projected-gradient optimality check every 10 iterations
            grad_a = P @ (P.T @ a) - 1.0
            if np.abs(a - np.clip(a - grad_a, 0.0, c)).max(initial=0.0) <= tol:
                break
    u = solve_triangular(L, far.T @ a, lower=True)
    z = -sign * solve_triangular(L.T, u, lower=False)
    return z, a


@dataclass(eq=False)
class TwinDecision:
    """Two planes ``z_pos``, ``z_neg`` (weights and bias); positive = nearer the first."""

    feature_map: object | None
    z_pos: np.ndarray
    z_neg: np.ndarray
    objective: float = np.nan
    objective_history: list = field(default_factory=list)
    restart_objectives: np.ndarray | None = None
    n_iter: int = 0

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Distance to the negative plane minus distance to the positive plane."""
        Phi = apply_map(self.feature_map, X)
        d_pos = np.abs(Phi @ self.z_pos[:-1] + self.z_pos[-1]) / _norm(self.z_pos[:-1])
        d_neg = np.abs(Phi @ self.z_neg[:-1] + self.z_neg[-1]) / _norm(self.z_neg[:-1])
        return d_neg - d_pos


def twsvm_ridge(Z: np.ndarray) -> float:
    """The TWSVM ridge ``eps = 1e-6 (1 + |Z|_F^2 / D)``: fixed per problem, so that the
    objective does not depend on which rows are currently positive."""
    return 1e-6 * (1.0 + float(np.einsum("ij,ij->", Z, Z)) / Z.shape[1])


def _norm(w: np.ndarray) -> float:
    return max(float(np.linalg.norm(w)), 1e-12)


def _twin_run(codes, shares, known, tol, max_iter, init_scores, seed, *, Z, schedule, C_p):
    """One restart of the twin paper's Alg. 1; returns (objective, (z_pos, z_neg), history,
    n_iter)."""
    labeler, y = start_labels(codes, shares, known, init_scores, seed)
    duals = np.zeros((2, len(codes)))  # per row: alpha (as a negative), gamma (as a positive)
    eps = twsvm_ridge(Z)

    def fit(y, c, state):
        pos = y > 0
        z_pos, duals[0, ~pos] = twsvm_plane(Z[pos], Z[~pos], c[0], 1.0, eps, duals[0, ~pos])
        z_neg, duals[1, pos] = twsvm_plane(Z[~pos], Z[pos], c[1], -1.0, eps, duals[1, pos])
        return z_pos, z_neg

    def row_losses(state, c):
        f_pos, f_neg = Z @ state[0], Z @ state[1]
        as_pos = 0.5 * f_pos**2 + c[1] * np.maximum(0.0, 1.0 - f_neg)
        as_neg = 0.5 * f_neg**2 + c[0] * np.maximum(0.0, 1.0 + f_pos)
        return as_pos, as_neg

    def objective(state, y, c):
        as_pos, as_neg = row_losses(state, c)
        loss = np.where(y > 0, as_pos, as_neg).sum()
        ridge = 0.5 * eps * float(state[0] @ state[0] + state[1] @ state[1])
        return float(loss) + ridge + C_p * labeler.proportion_loss(y)

    def relabel(state, c):
        as_pos, as_neg = row_losses(state, c)
        return np.where(labeler(as_neg - as_pos, C_p), 1.0, -1.0)

    def mirror(state):  # the planes swap roles: the decision function changes sign
        return -state[1], -state[0]

    with single_threaded():
        state, y, history, n_iter = run_annealing(
            y, schedule, fit, objective, relabel, tol=tol, max_iter=max_iter, mirror=mirror
        )
    return objective(state, y, schedule[-1]), state, history, n_iter


class CollapsedPlaneWarning(UserWarning):
    """A fitted twin plane has (numerically) zero weights, so "the nearer plane" says nothing."""


class TwinPSVM(AlternatingPSVM):
    """Twin alter-pSVM (Wang et al., Alg. 1); see the module docstring.

    Parameters as :class:`qcllp.learn.psvm.alter_psvm.AlterPSVM`: ``C`` caps the annealed ``c1``,
    ``c2``; ``C_p`` weighs the absolute proportion loss; ``kernel``, ``gamma``,
    ``n_components``, ``exact_kernel_max_n`` choose the features; ``n_restarts`` random
    initialisations (joblib, ``n_jobs``), smallest objective wins; ``init`` ("invcal"/"conv")
    seeds the first restart; ``annealing_delta``, ``tol`` (relative), ``max_iter`` control the
    alternation.

    Known weakness (measured, not in the paper, which only reports heart): on bags with a small
    positive share in many dimensions the lowest objective found is often a degenerate pair, one
    plane with ``w = 0`` (on a 2,000 x 69 Gaussian mixture with 15 % positives the degenerate
    pair scored 62.8 against 81.8 for the run started from InvCal). Its predictions are
    meaningless; ``fit`` then issues a :class:`CollapsedPlaneWarning`. Prefer
    :class:`~qcllp.learn.psvm.alter_psvm.AlterPSVM` there.
    """

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        feature_map, Phi = estimator_features(self, X, random_state)
        sizes = np.bincount(bag_codes, minlength=len(shares))
        p = float(sizes @ shares / sizes.sum())
        objectives, (_, (z_pos, z_neg), history, n_iter) = run_restarts(
            self,
            _twin_run,
            X,
            bag_codes,
            shares,
            known,
            random_state,
            Z=np.column_stack([Phi, np.ones(len(X))]),
            schedule=twin_schedule(p, self.C, self.annealing_delta),
            C_p=float(self.C_p),
        )
        norms = [float(np.abs(z[:-1]).max(initial=0.0)) for z in (z_pos, z_neg)]
        if min(norms) <= 1e-10 * (1.0 + max(norms)):
            warnings.warn(
                "TwinPSVM: a fitted plane collapsed to zero weights (|w+|_max = "
                f"{norms[0]:.3g}, |w-|_max = {norms[1]:.3g}); the twin objective prefers this "
                "degenerate pair on these bags, and its predictions carry no information. "
                "Use AlterPSVM, or try init='invcal'.",
                CollapsedPlaneWarning,
                stacklevel=3,
            )
        return TwinDecision(
            feature_map,
            z_pos,
            z_neg,
            objective=float(objectives.min()),
            objective_history=history,
            restart_objectives=objectives,
            n_iter=n_iter,
        )
