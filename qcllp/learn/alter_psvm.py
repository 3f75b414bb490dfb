"""alter-pSVM: proportion-SVM by alternating optimisation with annealing (Yu et al. 2013, Alg. 1).

The unknown instance labels ``y`` are latent variables of the pSVM objective (eq. 4)::

    min_{y, w, b}  1/2 |w|^2 + C sum_i L(y_i, w.phi(x_i) + b) + C_p sum_k |p~_k(y) - p_k|

Alternate: with ``y`` fixed, (w, b) is an ordinary SVM; with (w, b) fixed, the best ``y`` of
every bag follows from sorting the loss reductions (Prop. 1, eq. 7-8). An annealing loop raises
the loss weight ``C*`` from ``1e-5 C`` by the factor ``1 + Delta`` up to ``C`` (the last step runs
at ``C``), alternating at each ``C*`` until the objective decreases by less than ``tol``
*relative* to its previous value. Several random restarts run through joblib (seeds drawn up
front, so a fixed ``random_state`` gives the same model for any ``n_jobs``); the restart with
the smallest final objective wins (Sect. 4).

Choices where the paper leaves room (all documented on the class too):

* **Loss.** ``L`` is by default the *squared* hinge ``max(0, 1 - y f)^2`` (the L2-SVM), not
  the paper's hinge (``loss="hinge"`` keeps the paper's). With the squared hinge the SVM step is
  solved exactly in the primal by the finite Newton method (Keerthi & DeCoste 2005; liblinear's
  primal L2-SVM, :class:`SquaredHingeSVM`), linear in N, warm-started from the previous
  solution across alternations and annealing steps, with its active-set Gram matrix updated
  only for the rows whose label or margin status changed; the hinge step
  (:class:`HingeSVM`: libsvm up to 2,000 rows, liblinear above) cannot be warm-started and is
  4-8 times slower on heart, without being more accurate there. Either way the label step uses
  the same loss, so every half step minimises the same objective and the objective cannot
  increase inside an annealing step. The bias ``b`` is not regularised, as in eq. (4).
* **Initialisation.** "Randomly initialize y" is done within the proportions: every bag gets
  ``round(p_k |B_k|)`` positives at random positions (the label step with random scores and an
  overwhelming proportion weight). ``init="invcal"`` / ``"conv"`` replaces the random ranking of
  the *first* restart by the scores of InvCal / conv-pSVM (Sect. 7.2); the others stay random.
  With few, large bags, prefer ``init="conv", n_restarts=1``: random restarts then find lower
  objectives that generalise worse (on heart in bags of 32, the paper's protocol, 5 repeats:
  79.1 +- 1.7 % against 73.4 +- 6.5 % with 10 random restarts; ``benchmarks/bench_psvm.py``).
* **One BLAS thread per restart.** Restarts are the unit of parallelism (``n_jobs``); the
  small dense algebra inside one restart runs faster single-threaded than with contending
  BLAS threads.
* **Sign check (ours).** At the end of every annealing step the mirror image of the model
  (w, b negated, labels re-optimised) is scored and taken if its objective is lower
  (:func:`run_annealing`). Without it about half the random restarts end in the label-flipped
  solution (the early annealing steps, where the proportions are enforced exactly, are nearly
  symmetric under flipping); restarts then only pay for genuinely different local optima.
* **Bias.** Eq. (4) regularises ``|w|^2`` and says nothing of ``b``; by default it is free, as
  in libsvm. ``regularize_bias=True`` adds ``b^2 / 2``, as liblinear (and llp-learn, which
  calls it) does. The choice matters where the objective is ambiguous: on heart in bags of 32
  (C = 0.1, C_p = 100, one bag draw, 5 folds) the free-bias model scores 66 % on the held-out
  bags and the penalised one 78 %; the free-bias solutions there have *lower* objectives than
  runs started from the true labels, so it is the objective, not the optimiser, that misleads.
  Through the paper's whole protocol it only trades bag sizes (16: 75.8 against 78.7 %; 64:
  70.8 against 63.9 %), and on the simulated plant, where defects are rare and the boundary
  lies far from the centre of the standardized features, it costs ROC AUC (cooling 0.858 ->
  0.815). Hence the free bias as default.
* **Bag weights.** The proportion term is eq. (4) as printed, ``C_p sum_k |p~_k - p_k|``, one
  unit per bag. The paper allows bag weights (Sect. 3.2), and the public MATLAB pSVM code
  weighs every bag by its size, ``C_p sum_k |B_k| |p~_k - p_k|`` (a count error: relabeling
  one row costs ``C_p`` whatever the bag size). Measured on heart, the paper's protocol, 5
  repeats, with the ``C_p`` grid scaled by the bag size (that weighting, for equal bags):
  76.7 +- 4.7 / 76.7 +- 3.8 / 58.5 +- 19.2 % at bags of 16 / 32 / 64 against 78.7 +- 2.9 /
  73.4 +- 6.5 / 63.9 +- 11.6 % unweighted. It does not remove the large-bag failures, so the
  printed form stays; the bag-level grid search over ``C_p`` absorbs the scale.
* **Monotonicity guard.** If a numerically imperfect SVM step would raise the objective, the
  previous (w, b) is kept, so the recorded history is non-increasing by construction as well as
  in theory.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed
from scipy.linalg import cho_factor, cho_solve
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC, LinearSVC

from .kernels import LinearDecision, estimator_features
from .label_step import BagLabeler
from .margin import MarginLLPClassifier
from .threads import single_threaded

__all__ = [
    "AlterPSVM",
    "AlternatingPSVM",
    "run_annealing",
]

_SEED_MAX = np.iinfo(np.int32).max


def run_annealing(
    y: np.ndarray,
    schedule: Sequence,
    fit: Callable,
    objective: Callable,
    relabel: Callable,
    *,
    tol: float,
    max_iter: int,
    mirror: Callable | None = None,
):
    """The annealing / alternation skeleton shared by alter-pSVM and twin alter-pSVM.

    For each value ``c`` of ``schedule``: repeat ``state = fit(y, c, state)`` (model step,
    warm-started) and ``y = relabel(state, c)`` (label step) until one round lowers the
    objective by less than ``tol`` relative to its value before the round (the first round of
    a step is measured from the objective of the previous step's model at the new ``c``), until
    the label step leaves ``y`` unchanged (then the next model step would repeat itself), or for
    ``max_iter`` rounds. A model step that would raise ``objective(state, y, c)`` is rejected
    (the old state is kept).

    Sign check: once per step, after the alternation has settled, the mirror image of the model
    (``mirror(state)``: the decision function negated) is labeled and scored; if its objective
    is lower the alternation continues from it. The objective still only decreases, and a run
    that drifted into the label-flipped basin leaves it as soon as the proportions tell the two
    apart.

    Returns ``(state, y, history, n_iter)``: ``history`` holds, per annealing step, the
    objective after every half step (model, label, model, label, ..., and an accepted mirror).
    """
    state, history, n_iter = None, [], 0
    for c in schedule:
        values: list[float] = []
        current = objective(state, y, c) if state is not None else np.inf
        mirror_tried = mirror is None
        for _ in range(max_iter):
            previous = current
            candidate = fit(y, c, state)
            after = objective(candidate, y, c)
            if after <= previous:
                state = candidate
            else:
                after = previous
            new_y = relabel(state, c)
            current = objective(state, new_y, c)
            values += [after, current]
            n_iter += 1
            unchanged = np.array_equal(new_y, y)
            y = new_y
            # an unchanged y means the next model step would return the same model
            if unchanged or (np.isfinite(previous) and previous - current <= tol * abs(previous)):
                if mirror_tried:
                    break
                mirror_tried = True
                flipped = mirror(state)
                flipped_y = relabel(flipped, c)
                flipped_value = objective(flipped, flipped_y, c)
                if not flipped_value < current:
                    break
                state, y, current = flipped, flipped_y, flipped_value
                values.append(current)
        history.append(np.array(values))
    return state, y, history, n_iter


def annealing_schedule(start: float, stop: float, delta: float) -> list[float]:
    """``start, start (1+delta), ...`` capped at ``stop``; the last value is ``stop`` (Alg. 1)."""
    values = [start]
    while values[-1] < stop:
        values.append(min(values[-1] * (1.0 + delta), stop))
    return values


# --- the SVM step: squared-hinge SVM in the primal by generalised Newton ---------------------


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


def squared_hinge_svm(
    Z: np.ndarray, y: np.ndarray, C: float, z0: np.ndarray | None = None
) -> np.ndarray:
    """``z = (w, b)`` of the squared-hinge SVM on ``Z`` (last column ones); see
    :class:`SquaredHingeSVM`."""
    solver = SquaredHingeSVM(Z)
    warm = None
    if z0 is not None:
        f = solver._scores(z0)
        active = np.zeros(len(y), dtype=bool)
        warm = SVMState(z0, f, y, active, np.zeros((Z.shape[1],) * 2), np.zeros(Z.shape[1]))
    return solver.fit(y, C, warm).z


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
    objective is rejected by :func:`run_annealing`.
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


def _alter_run(
    codes: np.ndarray,
    shares: np.ndarray,
    known: np.ndarray,
    tol: float,
    max_iter: int,
    init_scores: np.ndarray | None,
    seed: int,
    *,
    Z: np.ndarray,
    schedule: list[float],
    C_p: float,
    loss: str = "squared_hinge",
    bias_penalty: float = 0.0,
):
    """One restart of Alg. 1; returns (objective, z, history, n_iter)."""
    rng = np.random.RandomState(seed)
    scores = rng.uniform(-1, 1, len(codes)) if init_scores is None else init_scores
    labeler = BagLabeler(codes, shares, known)
    y = labeler.random_labels(scores)
    solver_class, loss_sum, gain = LOSSES[loss]
    solver = solver_class(Z, bias_penalty=bias_penalty)

    def fit(y, c, state):
        return solver.fit(y, c, state)

    def objective(state, y, c):
        return (
            regulariser(state.z, bias_penalty)
            + c * loss_sum(y * state.f)
            + C_p * labeler.proportion_loss(y)
        )

    def relabel(state, c):
        return np.where(labeler(gain(state.f), C_p / c), 1.0, -1.0)

    with single_threaded():
        state, y, history, n_iter = run_annealing(
            y, schedule, fit, objective, relabel, tol=tol, max_iter=max_iter, mirror=solver.mirror
        )
    return objective(state, y, schedule[-1]), state.z, history, n_iter


@dataclass(eq=False)
class FittedPSVM(LinearDecision):
    """A binary alter-pSVM model with its optimisation record."""

    objective: float = np.nan
    objective_history: list = field(default_factory=list)
    restart_objectives: np.ndarray | None = None
    n_iter: int = 0


class _HistoryMixin:
    """Expose the binary models' optimisation records on the estimator after ``fit``."""

    def fit(self, X, bags, proportions, y=None):
        super().fit(X, bags, proportions, y)
        self.objective_ = np.array([m.objective for m in self.estimators_])
        self.objective_history_ = [m.objective_history for m in self.estimators_]
        self.n_iter_ = np.array([m.n_iter for m in self.estimators_])
        return self


def check_positive(**params: float) -> None:
    """ValueError naming the first parameter that is not a positive number."""
    for name, value in params.items():
        if not (isinstance(value, int | float | np.number) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def run_restarts(estimator, run, X, bag_codes, shares, known, random_state, Z, **problem):
    """``estimator.n_restarts`` calls of ``run`` through joblib; the smallest objective wins.

    Seeds are drawn from ``random_state`` before any work is dispatched, so the result does
    not depend on ``estimator.n_jobs``. The first restart may start from
    ``estimator.init``'s scores. ``run(codes, shares, known, tol, max_iter, init_scores, seed,
    Z=Z, **problem)`` returns a tuple whose first entry is the final objective; rows are handed
    to it grouped by bag (``Z`` the per-row features). Returns the objectives of all restarts
    and the winning run's tuple.
    """
    check_positive(C=estimator.C, annealing_delta=estimator.annealing_delta, tol=estimator.tol)
    if not (np.isfinite(estimator.C_p) and estimator.C_p >= 0):
        raise ValueError(f"C_p must be a non-negative number, got {estimator.C_p!r}")
    if int(estimator.n_restarts) < 1 or int(estimator.max_iter) < 1:
        raise ValueError("n_restarts and max_iter must be at least 1")
    init_scores = initial_scores(estimator, X, bag_codes, shares, known, random_state)
    seeds = random_state.randint(_SEED_MAX, size=int(estimator.n_restarts))
    by_bag = np.argsort(bag_codes, kind="stable")  # bag-contiguous rows make the label step cheap
    runs = Parallel(n_jobs=estimator.n_jobs)(
        delayed(run)(
            bag_codes[by_bag],
            shares,
            known[by_bag],
            float(estimator.tol),
            int(estimator.max_iter),
            init_scores[by_bag] if i == 0 and init_scores is not None else None,
            seed,
            Z=Z[by_bag],
            **problem,
        )
        for i, seed in enumerate(seeds)
    )
    objectives = np.array([r[0] for r in runs])
    return objectives, runs[int(np.argmin(objectives))]


def initial_scores(estimator, X, bag_codes, shares, known, random_state):
    """Decision values of the initialiser named by ``init`` (Sect. 7.2), or ``None``."""
    init = estimator.init
    if init is None:
        return None
    if init == "invcal":
        from .baselines import InvCal

        model = InvCal(kernel=estimator.kernel, gamma=estimator.gamma)
    elif init == "conv":
        try:
            from .conv_psvm import ConvPSVM
        except ImportError as exc:
            raise ValueError(
                "init='conv' needs qcllp.learn.conv_psvm.ConvPSVM, which is not available"
            ) from exc
        model = ConvPSVM(C=estimator.C, kernel=estimator.kernel, gamma=estimator.gamma)
    else:
        raise ValueError(f"init must be None, 'invcal' or 'conv', got {init!r}")
    fitted = model._fit_binary(X, bag_codes, shares, known, random_state)
    return fitted.decision_function(X)


class AlternatingPSVM(_HistoryMixin, MarginLLPClassifier):
    """Parameters shared by the alternating proportion-SVMs (:class:`AlterPSVM`,
    :class:`qcllp.learn.twin_psvm.TwinPSVM`); subclasses implement ``_fit_binary``."""

    def __init__(
        self,
        C: float = 1.0,
        C_p: float = 10.0,
        kernel: str = "linear",
        gamma: float | str = "scale",
        n_restarts: int = 10,
        init: str | None = None,
        annealing_delta: float = 0.5,
        tol: float = 1e-4,
        max_iter: int = 100,
        n_components: int = 500,
        exact_kernel_max_n: int = 1000,
        n_jobs: int | None = None,
        random_state=None,
    ):
        self.C = C
        self.C_p = C_p
        self.kernel = kernel
        self.gamma = gamma
        self.n_restarts = n_restarts
        self.init = init
        self.annealing_delta = annealing_delta
        self.tol = tol
        self.max_iter = max_iter
        self.n_components = n_components
        self.exact_kernel_max_n = exact_kernel_max_n
        self.n_jobs = n_jobs
        self.random_state = random_state


class AlterPSVM(AlternatingPSVM):
    """alter-pSVM (Yu et al. 2013, Alg. 1); see the module docstring.

    Parameters
    ----------
    C : weight of the instance loss (final value of the annealed ``C*``).
    C_p : weight of the absolute proportion loss ``sum_k |p~_k - p_k|`` (eq. 4).
    loss : ``"squared_hinge"`` (default; exact warm-started Newton steps) or ``"hinge"`` (the
        paper's loss; liblinear steps, slower).
    regularize_bias : leave the bias free (default, eq. 4 read literally) or penalise it as a
        weight, ``1/2 (|w|^2 + b^2)``, as liblinear and llp-learn do; see the module docstring.
    kernel : ``"linear"`` or ``"rbf"`` (exact kernel map up to ``exact_kernel_max_n`` rows,
        Nystroem with ``n_components`` landmarks above; :mod:`qcllp.learn.kernels`).
    gamma : RBF width, a number or ``"scale"``.
    n_restarts : random initialisations; the smallest final objective wins.
    init : ``None``, ``"invcal"`` or ``"conv"``: scores ranking the first restart's labels.
    annealing_delta : ``Delta``; ``C*`` grows by ``1 + Delta`` per annealing step (0.5 as in
        the paper, following Chapelle et al. 2008).
    tol : relative decrease of the objective below which the alternation at one ``C*`` stops.
    max_iter : cap on alternations per annealing step.
    n_components, exact_kernel_max_n : see ``kernel``.
    n_jobs : joblib workers for the restarts.
    random_state : seed; fixes the model for any ``n_jobs``.

    Fitted attributes (besides the base class's): ``objective_`` (per binary task),
    ``objective_history_`` (per binary task: per annealing step an array of the objective after
    every half step), ``n_iter_`` (alternations of the winning restart); each binary model in
    ``estimators_`` also keeps ``restart_objectives``.
    """

    def __init__(
        self,
        C: float = 1.0,
        C_p: float = 10.0,
        kernel: str = "linear",
        loss: str = "squared_hinge",
        regularize_bias: bool = False,
        gamma: float | str = "scale",
        n_restarts: int = 10,
        init: str | None = None,
        annealing_delta: float = 0.5,
        tol: float = 1e-4,
        max_iter: int = 100,
        n_components: int = 500,
        exact_kernel_max_n: int = 1000,
        n_jobs: int | None = None,
        random_state=None,
    ):
        super().__init__(
            C=C,
            C_p=C_p,
            kernel=kernel,
            gamma=gamma,
            n_restarts=n_restarts,
            init=init,
            annealing_delta=annealing_delta,
            tol=tol,
            max_iter=max_iter,
            n_components=n_components,
            exact_kernel_max_n=exact_kernel_max_n,
            n_jobs=n_jobs,
            random_state=random_state,
        )
        self.loss = loss
        self.regularize_bias = regularize_bias

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {self.loss!r}")
        feature_map, Phi = estimator_features(self, X, random_state)
        Z = np.column_stack([Phi, np.ones(len(X))])
        objectives, (_, z, history, n_iter) = run_restarts(
            self,
            _alter_run,
            X,
            bag_codes,
            shares,
            known,
            random_state,
            Z=Z,
            schedule=annealing_schedule(1e-5 * self.C, self.C, self.annealing_delta),
            C_p=float(self.C_p),
            loss=self.loss,
            bias_penalty=1.0 if self.regularize_bias else 0.0,
        )
        return FittedPSVM(
            feature_map,
            z[:-1],
            float(z[-1]),
            objective=float(objectives.min()),
            objective_history=history,
            restart_objectives=objectives,
            n_iter=n_iter,
        )
