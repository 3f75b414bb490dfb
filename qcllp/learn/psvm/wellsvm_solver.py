"""The WellSVM solver (Li et al. 2013, Alg. 1 = pSVM Alg. 2): cutting plane over label vectors
with multiple label-kernel learning.

The weakly labeled SVM ``min_{y in Y} max_{alpha in A} G(alpha, y)`` with
``G = 1'alpha - 1/2 alpha' (K o y y') alpha`` (WellSVM eq. 3/11, pSVM eq. 11) is relaxed to the
convex hull of ``{y y'}`` (WellSVM Prop. 1, pSVM eq. 14) and solved over any
:class:`~qcllp.learn.psvm.wellsvm_labels.LabelSpace` (:mod:`qcllp.learn.psvm.wellsvm_labels`):

1. start from ``alpha = 1/N`` (pSVM Alg. 2) or from given scores and add a first label vector;
2. multiple label-kernel learning over the working set (WellSVM Sect. 4.1.2, MKLGL-style):
   alternate an SVM with the mixed kernel ``sum_t mu_t (K o y_t y_t')`` and the closed-form
   update ``mu_t = ||w_t|| / sum_s ||w_s||``, ``w_t = mu_t sum_i alpha_i y_ti phi(x_i)``;
3. add a violated label vector (Sect. 4.1.3, pSVM eq. 18-21) and repeat until none is left or
   the objective decreases by less than ``tol`` (relative).

Choices where the papers leave room:

* **Feature space.** Everything runs on an explicit feature matrix ``Phi`` with
  ``K = Phi Phi'`` (:func:`feature_space`): linear: ``[X, 1]``; rbf: the Nystroem map of
  ``k(x, x') + 1``, with *all* training rows as landmarks (the exact kernel) when
  ``N <= n_components`` and ``n_components`` random landmarks otherwise. The constant 1 stands
  in for the dropped bias (pSVM footnote 2). ``Phi`` is rotated onto its principal axes, so
  its columns are the kernel's eigen-directions in decreasing variance, which the
  l-infinity search of pSVM eq. 19 needs ("eigendecomposition of the kernel matrix, d such that
  90 % of the variance is preserved").
* **Loss and SVM solver.** The SVMs use the squared hinge loss (the L2-SVM, as WellSVM's own
  experiments do, Sect. 5, and as :class:`~qcllp.learn.psvm.alter_psvm.AlterPSVM` does): its dual
  ``max 1'a - 1/2 a'(Q + diag(1 / 2C)) a, a >= 0`` is strongly convex and the dual variables
  follow from the primal in closed form, ``a_i = 2 C_i xi_i``. The primal of WellSVM eq. 13
  is solved by finite Newton with conjugate gradients (:func:`svm_primal`), O(N d T) per
  step, linear in N, never an N x N matrix; the replaced L-BFGS needed 100-600 iterations per
  SVM, and an SVM is solved about 50-80 times per fit (MKL alternations x cutting-plane
  iterations). Only for near-full-rank features (``d >= N / 2``, the exact rbf map) with
  ``N <= EXACT_MAX_ROWS`` the mixed kernel ``Q = sum_t mu_t K o y_t y_t'`` is precomputed
  and solved by libsvm (``SVC(kernel="precomputed")``) on a doubled problem that removes
  libsvm's bias (:func:`_svm_libsvm`). The objective reported is the dual value
  ``G = 1'a - 1/2 a'Qa - |a|^2 / 4C``.
* **Violated label.** Candidates are the l-infinity maximisers of pSVM eq. 19-21 (every one of
  the leading ``d`` eigen-directions, both signs) plus WellSVM's eq. 16-17 candidate
  (``r = H y_hat`` for the best label vector of the working set). The candidate with the largest
  true value ``y' H y = ||Phi' (alpha o y)||^2`` (eq. 18) is then sharpened by repeating
  eq. 16-17 from it (each changed step is more violated, Prop. 4; WellSVM Prop. 3: more effort
  per search, fewer iterations; at most ``LOCAL_SEARCH_STEPS``) and added when it beats the
  working set (Prop. 4); otherwise the algorithm has converged. The search dimensions are
  capped at ``MAX_SEARCH_DIMS``.
* **Stopping.** ``max_iter`` label vectors at most (the paper: conv-pSVM "terminates in less
  than 10 iterations"), earlier when no violated label is left or the objective decreases by
  less than ``tol`` relative to its value. On noisy data such as heart the relaxed objective
  keeps falling for dozens of iterations, so ``max_iter`` is what usually ends a run.
* **Recovering labels.** pSVM Sect. 5.3: rank-1 approximation ``M ~ y y'`` of
  ``M = sum_t mu_t y_t y_t'`` (real-valued y), prediction by eq. 22. WellSVM Alg. 2/4 step 7:
  ``f(x) = sum_t w_t' phi(x)``, i.e. ``y = sum_t mu_t y_t``. Either way the global sign is then
  chosen so that the training predictions fit the label space best (pSVM footnote 3:
  "resolved by validation on the training bags"), so a model never flips all labels.
* **Threads.** The feature space and the engine run on one BLAS thread: the products are thin
  (``N x d`` times ``d x T``, memory-bound) and the factorizations small, and OpenBLAS threads
  contending for the 2 shared cores slowed them badly (measured next to another job: eigh of
  501 x 501 in 0.11 s on one thread, 3.8 s on two; 5,000 x 501 times 501 x 10 twice as fast
  on one). Parallelism belongs one level up (grid search, one-vs-rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.svm import SVC

from qcllp.learn.core.kernels import LinearDecision, apply_map, make_feature_map
from qcllp.learn.core.threads import single_threaded
from qcllp.learn.psvm.wellsvm_labels import LabelSpace

__all__ = [
    "EXACT_MAX_ROWS",
    "FeatureSpace",
    "WellSVMResult",
    "feature_space",
    "fit_wellsvm",
    "line_step",
    "oriented_weights",
    "svm_primal",
]

EXACT_MAX_ROWS = 500
"""Near-full-rank feature spaces up to this many rows go to libsvm (precomputed mixed kernel).
Above, the primal Newton solver is faster (rbf, 69 features, 10 iterations: 400 rows 6.1 s
libsvm vs 7.0 s Newton; 1,000 rows with 501 Nystroem features 44 s vs 17 s)."""

VARIANCE_KEPT = 0.9
"""pSVM Sect. 5.2: the l-infinity search uses the eigen-directions holding 90 % of the variance."""

MAX_SEARCH_DIMS = 32
"""Cap on those directions, so that a search costs at most O(N * 64 * d) on large sets."""

MKL_MAX_ITER = 100
"""WellSVM Sect. 4.1.2: the MKLGL alternation "always converges in fewer than 100 iterations"."""

MKL_TOL = 1e-3
"""Stop the MKLGL alternation when no kernel weight moves by more than this."""

LOCAL_SEARCH_STEPS = 20
"""Steps of the eq. 16-17 ascent that sharpens the violated label (see ``_Engine.improve``)."""

NEWTON_TOL = 1e-6
"""The primal Newton solver stops when the gradient norm falls below this fraction of its
norm at ``w = 0``."""

NEWTON_MAX_ITER = 50
CG_TOL = 1e-1
"""Relative residual at which conjugate gradients stop inside a Newton step (inexact Newton)."""
CG_MAX_ITER = 200


# --------------------------------------------------------------------------- feature space


@dataclass(frozen=True)
class FeatureSpace:
    """The engine's feature space: ``Phi = [phi(X), 1] @ rotation``.

    ``feature_map`` comes from :func:`qcllp.learn.core.kernels.make_feature_map` (``None`` for the
    linear kernel); ``rotation`` (D + 1, d) turns ``[phi(x), 1]`` onto the principal axes of the
    training features (eigenvectors of ``Phi' Phi``, decreasing eigenvalue, null directions
    dropped). Weights ``w`` learned on ``Phi`` become an ordinary linear model on ``phi(x)``.
    """

    feature_map: object | None
    rotation: np.ndarray

    def decision(self, w: np.ndarray) -> LinearDecision:
        """``f(x) = [phi(x), 1] @ rotation @ w`` as a :class:`LinearDecision`."""
        v = self.rotation @ w
        return LinearDecision(self.feature_map, v[:-1], float(v[-1]))


def feature_space(
    X: np.ndarray, kernel: str, gamma, n_components: int, random_state
) -> tuple[FeatureSpace, np.ndarray]:
    """Fit the feature space on ``X`` and return it with the training features ``Phi``.

    ``"linear"``: ``phi(x) = x``; ``"rbf"``: the exact kernel map when ``N <= n_components``,
    Nystroem with ``n_components`` landmarks otherwise (:mod:`qcllp.learn.core.kernels`). A constant
    1 is appended (kernel ``k + 1``) in place of the dropped bias (pSVM footnote 2).
    """
    X = np.asarray(X, dtype=float)
    with single_threaded():  # module docstring, Threads
        fmap = make_feature_map(
            X,
            kernel,
            gamma,
            n_components=n_components,
            exact_kernel_max_n=n_components,
            random_state=random_state,
        )
        base = np.column_stack([apply_map(fmap, X), np.ones(len(X))])
        eigval, eigvec = np.linalg.eigh(base.T @ base)
    keep = eigval > 1e-10 * max(eigval.max(), 1e-300)
    order = np.argsort(-eigval[keep])
    rotation = eigvec[:, keep][:, order]
    return FeatureSpace(fmap, rotation), base @ rotation


# --------------------------------------------------------------------------- the engine


@dataclass
class WellSVMResult:
    """What :func:`fit_wellsvm` learned.

    ``alpha`` (n,) dual variables, ``mu`` (T,) kernel weights, ``Y`` (T, n) the working set of
    label vectors, ``objective`` the MKL objective after each cutting-plane iteration
    (non-increasing up to solver accuracy), ``converged`` whether no violated label was left.
    """

    alpha: np.ndarray
    mu: np.ndarray
    Y: np.ndarray
    objective: list[float] = field(default_factory=list)
    converged: bool = False

    @property
    def n_iter(self) -> int:
        return len(self.objective)

    def rank1_labels(self) -> np.ndarray:
        """pSVM Sect. 5.3: real-valued y from the rank-1 approximation of sum_t mu_t y_t y_t'."""
        A = self.Y.T.astype(float) * np.sqrt(self.mu)
        u, s, _ = np.linalg.svd(A, full_matrices=False)
        return s[0] * u[:, 0]

    def mean_labels(self) -> np.ndarray:
        """WellSVM Alg. 2/4 step 7: f = sum_t w_t' phi, i.e. the labels sum_t mu_t y_t."""
        return self.mu @ self.Y


def _svm_libsvm(Q: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Bias-free L2-SVM dual ``max 1'a - a'(Q + diag(1/2C))a/2, a >= 0`` by libsvm.

    libsvm always has a bias, so it gets the doubled problem, rows (phi_i, +1) and
    (-phi_i, -1): the kernel it sees is ``[[Q', Q'], [Q', Q']]`` and its equality constraint
    ``sum a - sum b = 0`` always has a feasible split, so ``a + b`` solves the bias-free problem
    (libsvm's own bias is unused). The box is set above any reachable value
    (``a_i = 2 C_i xi_i <= 2 C_i sqrt(N)``), so it never binds.
    """
    n = len(Q)
    Qp = Q + np.diag(1.0 / (2.0 * C))
    box = 4.0 * float(C.max()) * np.sqrt(n) + 1.0
    svc = SVC(C=box, kernel="precomputed", tol=1e-5, cache_size=500)
    svc.fit(np.block([[Qp, -Qp], [-Qp, Qp]]), np.r_[np.ones(n), -np.ones(n)])
    both = np.zeros(2 * n)
    both[svc.support_] = np.abs(svc.dual_coef_[0])
    return both[:n] + both[n:]


def line_step(a: float, b: float, m: np.ndarray, q: np.ndarray, c: np.ndarray) -> float:
    """Exact line search: ``argmin_t a t^2 / 2 + b t + sum_i c_i max(0, m_i - t q_i)^2``.

    The function is convex and piecewise quadratic; its derivative is continuous, increasing
    and linear between the breakpoints ``m_i / q_i``. Sorting them and accumulating the active
    rows' sums left to right gives the derivative at every breakpoint; the minimum lies in the
    first interval whose right end has a non-negative derivative. O(N log N), no loop.
    """
    nz = q != 0
    m, q, c = m[nz], q[nz], c[nz]
    with np.errstate(over="ignore", divide="ignore"):  # tiny q: a breakpoint at +-inf is right
        bp = m / q
    order = np.argsort(bp)
    bp, m, q, c = bp[order], m[order], q[order], c[order]
    start = q > 0  # active for t -> -inf; a row with q > 0 leaves at its breakpoint, q < 0 enters
    sign = np.where(start, -1.0, 1.0)
    A = np.r_[0.0, np.cumsum(sign * c * q * q)] + np.sum(c[start] * q[start] ** 2)
    B = np.r_[0.0, np.cumsum(sign * c * q * m)] + np.sum(c[start] * q[start] * m[start])
    slope = a + 2.0 * A
    with np.errstate(over="ignore", invalid="ignore"):
        right = slope[:-1] * bp + b - 2.0 * B[:-1] >= 0
    k = int(np.argmax(right)) if right.any() else len(bp)
    return float((2.0 * B[k] - b) / slope[k])


def _pcg(hess, diag: np.ndarray, rhs: np.ndarray, rtol: float, max_iter: int) -> np.ndarray:
    """Conjugate gradients for ``hess(x) = rhs`` (matrices, Frobenius inner product) with the
    diagonal preconditioner ``diag``, from 0, until the residual is below ``rtol * |rhs|``."""
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = r / diag
    p = z
    rz = np.vdot(r, z)
    stop = rtol * np.linalg.norm(rhs)
    for _ in range(max_iter):
        hp = hess(p)
        step = rz / np.vdot(p, hp)
        x += step * p
        r -= step * hp
        if np.linalg.norm(r) <= stop:
            break
        z = r / diag
        rz, rz_old = np.vdot(r, z), rz
        p = z + (rz / rz_old) * p
    return x


def svm_primal(
    Phi: np.ndarray,
    Y: np.ndarray,
    mu: np.ndarray,
    C: np.ndarray,
    alpha0: np.ndarray,
    g_zero: float | None = None,
    Phi32: np.ndarray | None = None,
) -> np.ndarray:
    """The mixed-kernel L2-SVM in the primal of WellSVM eq. 13, by finite Newton.

    With ``v_t = w_t / sqrt(mu_t)`` the problem is ``min 1/2 sum_t |v_t|^2 + sum_i C_i xi_i^2``,
    ``xi_i = max(0, 1 - z_i' v)``, ``z_i = (sqrt(mu_t) y_ti phi_i)_t``: a linear L2-SVM without
    bias in ``d T`` dimensions. It is solved by the modified finite Newton method of Keerthi &
    DeCoste (2005, JMLR 6): the Newton direction of the quadratic on the current active set
    ``{xi > 0}``, an exact line search along it (:func:`line_step`), repeated until the
    gradient vanishes (finitely many steps once the active set settles). The Newton system is
    solved by conjugate gradients with products ``H D = D + 2 Z_A' (C_A o Z_A D)``, O(|A| d T),
    no ``dT x dT`` matrix, preconditioned by the Hessian's diagonal
    ``1 + 2 mu_t sum_{i in A} C_i phi_ij^2``: as ``Phi`` is rotated onto its principal axes
    (:func:`feature_space`), ``Phi' Phi`` is diagonal and each block ``t`` of the Hessian,
    ``I + 2 mu_t Phi_A' C_A Phi_A``, is nearly so; CG then needs about ten products per Newton
    step (measured: 5k x 70, T = 6; a block-Kronecker preconditioner needed ~100). Warm-started
    from the dual ``alpha0`` (``v_t = sqrt(mu_t) Phi' (alpha0 o y_t)``, the optimum's form).
    The CG products run in single precision (half the memory traffic of these memory-bound
    products, about twice as fast): CG only has to reach a 10 % residual, and the gradient, the
    line search and hence the solution stay in double precision. Stops when the gradient norm
    is below ``NEWTON_TOL`` times ``g_zero``, its norm at ``v = 0`` (computed when not given).
    Only the active rows enter gradient and Hessian (5-45 % of them on the plant-size
    benchmark); each Newton step costs one ``Phi @ D`` over all rows (the line search) plus
    O(|A| d T) per CG step: linear in N. Returns ``alpha = 2 C xi``.
    """
    U = Y.T * np.sqrt(mu)  # (n, T): z_i = u_i (x) phi_i
    support = np.flatnonzero(alpha0 > 0)  # integer indices: row gathers 4x faster than masks
    V = Phi[support].T @ (alpha0[support, None] * U[support])
    margin = np.einsum("nt,nt->n", Phi @ V, U)
    xi = np.maximum(0.0, 1.0 - margin)
    if g_zero is None:
        g_zero = np.linalg.norm(2.0 * Phi.T @ (C[:, None] * U))
    if Phi32 is None:
        Phi32 = Phi.astype(np.float32)
    for _ in range(NEWTON_MAX_ITER):
        active = np.flatnonzero(xi > 0)  # only these rows enter the gradient and the Hessian
        PA, UA, CA = Phi[active], U[active], C[active]
        G = V - 2.0 * PA.T @ ((CA * xi[active])[:, None] * UA)
        if np.linalg.norm(G) <= NEWTON_TOL * g_zero:
            break
        D = _newton_direction(PA, UA, CA, Phi32[active], mu, G)
        q = np.einsum("nt,nt->n", Phi @ D, U)
        t = line_step(np.vdot(D, D), np.vdot(V, D), 1.0 - margin, q, C)
        V = V + t * D
        margin = margin + t * q
        xi = np.maximum(0.0, 1.0 - margin)
    return 2.0 * C * xi


def _newton_direction(
    PA: np.ndarray, UA: np.ndarray, CA: np.ndarray, PA32: np.ndarray, mu: np.ndarray, G: np.ndarray
) -> np.ndarray:
    """The Newton direction of :func:`svm_primal` on its active rows (``PA``, ``UA``, ``CA``;
    ``PA32`` their features in single precision): ``H D = -G`` solved by conjugate gradients
    (:func:`_pcg`) with products ``H D = D + 2 Z_A' (C_A o Z_A D)`` in single precision,
    preconditioned by the Hessian's diagonal ``1 + 2 mu_t sum_{i in A} C_i phi_ij^2``
    (:func:`svm_primal`'s docstring says why)."""
    diag = 1.0 + 2.0 * np.outer(np.einsum("n,nd,nd->d", CA, PA, PA), mu)  # H's diagonal
    UA32, CA32 = UA.astype(np.float32), CA.astype(np.float32)

    def hess(D, PA=PA32, UA=UA32, CA=CA32):  # single precision: see svm_primal's docstring
        q = np.einsum("nt,nt->n", PA @ D.astype(np.float32), UA)
        return D + 2.0 * (PA.T @ ((CA * q)[:, None] * UA)).astype(float)

    return _pcg(hess, diag, -G, CG_TOL, CG_MAX_ITER)


class _Engine:
    """One WellSVM run on a fixed feature matrix and label space (WellSVM Alg. 1)."""

    def __init__(self, Phi: np.ndarray, space: LabelSpace, C: np.ndarray, exact: bool):
        self.Phi = Phi
        self.space = space
        self.C = C
        self.exact = exact
        self.K = Phi @ Phi.T if self.exact else None
        self.c_norms = np.zeros(0)
        self.Phi32 = None if exact else Phi.astype(np.float32)
        var = np.sum(Phi**2, axis=0)
        kept = np.searchsorted(np.cumsum(var) / var.sum(), VARIANCE_KEPT) + 1
        self.n_search = int(min(kept, MAX_SEARCH_DIMS, Phi.shape[1]))

    def label_norms(self, alpha: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """``y' H y = ||Phi' (alpha o y)||^2`` for every column of Y (n, q) (pSVM eq. 18)."""
        G = self.Phi.T @ (alpha[:, None] * Y)
        return np.einsum("dq,dq->q", G, G)

    def _solve_svm(self, Y: np.ndarray, mu: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        if self.exact:
            return _svm_libsvm(self.K * ((Y.T * mu) @ Y), self.C)
        # |Phi'(C o y_t)|^2 per label vector, computed once (the working set only grows)
        new = Y[len(self.c_norms) :]
        if len(new):
            self.c_norms = np.r_[self.c_norms, self.label_norms(self.C, new.T)]
        g_zero = 2.0 * np.sqrt(mu @ self.c_norms[: len(Y)])
        return svm_primal(self.Phi, Y, mu, self.C, alpha, g_zero=g_zero, Phi32=self.Phi32)

    def mkl(self, Y: np.ndarray, mu: np.ndarray, alpha: np.ndarray):
        """WellSVM Sect. 4.1.2 (MKLGL): SVM with the mixed kernel, then
        ``mu_t = ||w_t|| / sum ||w_s||`` with ``||w_t|| = mu_t ||Phi'(alpha o y_t)||``."""
        for _ in range(MKL_MAX_ITER):
            alpha = self._solve_svm(Y, mu, alpha)
            norms = mu * np.sqrt(np.maximum(self.label_norms(alpha, Y.T), 0.0))
            if norms.sum() <= 0:
                break
            new_mu = norms / norms.sum()
            done = np.max(np.abs(new_mu - mu)) < MKL_TOL
            mu = new_mu
            if done:
                break
        alpha = self._solve_svm(Y, mu, alpha)
        objective = float(
            alpha.sum() - 0.5 * mu @ self.label_norms(alpha, Y.T) - alpha @ (alpha / (4 * self.C))
        )
        return alpha, mu, objective

    def candidates(self, alpha: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        """Violated-label candidates (n, q): pSVM eq. 19-21 per eigen-direction and sign, plus
        WellSVM eq. 16-17 (``r = H y_hat``) for the best working-set vector ``y_hat``."""
        R = alpha[:, None] * self.Phi[:, : self.n_search]
        scores = [R, -R]
        if Y is not None:
            best = Y[np.argmax(self.label_norms(alpha, Y.T))]
            scores.append((alpha * (self.Phi @ (self.Phi.T @ (alpha * best))))[:, None])
        return self.space.argmax(np.hstack(scores))

    def improve(self, alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Ascend ``y' H y`` from ``y`` by repeating WellSVM eq. 16-17, ``y <- argmax (H y)' y``:
        by Prop. 4 every changed step is more violated (Prop. 3: more effort per search, fewer
        cutting-plane iterations). Stops at a fixed point or after ``LOCAL_SEARCH_STEPS``."""
        for _ in range(LOCAL_SEARCH_STEPS):
            step = self.space.argmax(alpha * (self.Phi @ (self.Phi.T @ (alpha * y))))
            if np.array_equal(step, y):
                break
            y = step
        return y

    def run(self, init_scores: np.ndarray | None, max_iter: int, tol: float) -> WellSVMResult:
        n = len(self.Phi)
        if init_scores is None:
            alpha = np.full(n, 1.0 / n)  # pSVM Alg. 2: alpha_i = 1/N
            cands = self.candidates(alpha, None)
            y0 = cands[:, np.argmax(self.label_norms(alpha, cands))]
        else:
            y0 = self.space.argmax(init_scores)
        Y = y0[None, :].astype(np.int8)
        mu = np.ones(1)
        alpha = np.full(n, 1.0 / n)
        result = WellSVMResult(alpha, mu, Y)
        for _ in range(max(int(max_iter), 1)):
            alpha, mu, objective = self.mkl(Y, mu, alpha)
            previous = result.objective[-1] if result.objective else np.inf
            result = WellSVMResult(alpha, mu, Y, [*result.objective, objective])
            if previous - objective < tol * max(abs(objective), 1e-12):
                result.converged = True
                break
            cands = self.candidates(alpha, Y)
            y_new = self.improve(alpha, cands[:, np.argmax(self.label_norms(alpha, cands))])
            value = self.label_norms(alpha, y_new[:, None])[0]
            working_best = self.label_norms(alpha, Y.T).max()
            duplicate = np.any(np.all(y_new == Y, axis=1))
            # WellSVM Prop. 4: violated iff y*' H y* > max over the working set.
            if duplicate or value <= working_best * (1 + 1e-9):
                result.converged = True
                break
            Y = np.vstack([Y, y_new])
            mu = np.append(mu * (1 - 1 / len(Y)), 1 / len(Y))
        return result


def fit_wellsvm(
    Phi: np.ndarray,
    space: LabelSpace,
    C: float | np.ndarray = 1.0,
    *,
    max_iter: int = 10,
    tol: float = 1e-4,
    init_scores: np.ndarray | None = None,
    exact_max_rows: int = EXACT_MAX_ROWS,
) -> WellSVMResult:
    """Run WellSVM (Alg. 1) on features ``Phi`` (n, d) over the label space ``space``.

    ``C`` is a scalar or a per-row loss weight (e.g. C_l on labeled, C_u on unlabeled rows);
    ``init_scores`` (n,) gives the first label vector as ``space.argmax(init_scores)``,
    otherwise it is found by the violated-label search at ``alpha = 1/N`` (pSVM Alg. 2).
    Near-full-rank features (``d >= N / 2``, e.g. the exact rbf map) of at most
    ``exact_max_rows`` rows go to libsvm, all others to the primal Newton solver.
    """
    C = np.broadcast_to(np.asarray(C, dtype=float), (len(Phi),)).copy()
    if np.any(C <= 0):
        raise ValueError("C must be positive")
    Phi = np.asarray(Phi, dtype=float)
    exact = len(Phi) <= exact_max_rows and Phi.shape[1] >= len(Phi) // 2
    with single_threaded():  # module docstring, Threads
        return _Engine(Phi, space, C, exact).run(init_scores, max_iter, tol)


def oriented_weights(
    Phi: np.ndarray, result: WellSVMResult, space: LabelSpace, labels: np.ndarray
) -> np.ndarray:
    """Weights ``w = Phi' (alpha o labels)`` of eq. 22, with the global sign that makes the
    training predictions fit ``space`` best (pSVM footnote 3); ties keep the sign."""
    w = Phi.T @ (result.alpha * labels)
    f = Phi @ w
    if space.violation(-f) < space.violation(f):
        w = -w
    return w
