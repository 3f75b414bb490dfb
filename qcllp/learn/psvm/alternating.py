"""The alternating engine shared by alter-pSVM (Yu et al. 2013, Alg. 1) and twin alter-pSVM.

Both treat the unknown labels ``y`` as latent variables and alternate a model step (labels
fixed) with a label step (model fixed, :class:`qcllp.learn.psvm.label_step.BagLabeler`) under an
annealed loss weight, from several random starts. What they share lives here:

* :func:`start_labels`: "randomly initialize y" within the proportions: every bag gets
  ``round(p_k |B_k|)`` positives at random positions (the label step with random scores and an
  overwhelming proportion weight), or at the top of given scores;
* :func:`run_annealing`: the annealing / alternation loop, with two guards of ours. The
  *monotonicity guard*: if a numerically imperfect model step would raise the objective, the
  previous model is kept, so the recorded history is non-increasing by construction as well as
  in theory. The *sign check*: at the end of every annealing step the mirror image of the model
  (decision function negated, labels re-optimised) is scored and taken if its objective is
  lower. Without it about half the random restarts end in the label-flipped solution (the early
  annealing steps, where the proportions are enforced exactly, are nearly symmetric under
  flipping); restarts then only pay for genuinely different local optima;
* :func:`run_restarts`: several restarts through joblib, seeds drawn up front so that a fixed
  ``random_state`` gives the same model for any ``n_jobs``; the restart with the smallest final
  objective wins (Sect. 4). Restarts are the unit of parallelism: the small dense algebra inside
  one restart runs faster on one BLAS thread than with contending threads, so every run is
  single-threaded;
* :func:`initial_scores`: ``init="invcal"`` / ``"conv"`` replaces the random ranking of the
  *first* restart by the decision values of InvCal / conv-pSVM (Sect. 7.2);
* :class:`AlternatingPSVM`: the parameters both learners share, with their constraints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from joblib import Parallel, delayed

from qcllp.learn.baselines import InvCal
from qcllp.learn.core.base import SEED_MAX
from qcllp.learn.core.kernels import FEATURE_MAP_CONSTRAINTS
from qcllp.learn.core.margin import MarginLLPClassifier, binary_scores
from qcllp.learn.core.params import COUNT, INTEGER, NON_NEGATIVE, POSITIVE, StrOptions
from qcllp.learn.psvm.conv_psvm import ConvPSVM
from qcllp.learn.psvm.label_step import BagLabeler

__all__ = [
    "AlternatingPSVM",
    "initial_scores",
    "run_annealing",
    "run_restarts",
    "start_labels",
]


def start_labels(
    codes: np.ndarray,
    shares: np.ndarray,
    known: np.ndarray,
    init_scores: np.ndarray | None,
    seed: int,
) -> tuple[BagLabeler, np.ndarray]:
    """The label step for these bags and one restart's initial ±1 labels (module docstring):
    within the proportions, ranked by ``init_scores`` or, without them, by uniform random
    scores drawn from ``seed``."""
    rng = np.random.RandomState(seed)
    scores = rng.uniform(-1, 1, len(codes)) if init_scores is None else init_scores
    labeler = BagLabeler(codes, shares, known)
    return labeler, labeler.random_labels(scores)


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
    """The annealing / alternation loop of alter-pSVM and twin alter-pSVM (module docstring).

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
        state, y, values, rounds = _alternate(
            y, c, state, fit, objective, relabel, tol=tol, max_iter=max_iter, mirror=mirror
        )
        n_iter += rounds
        history.append(np.array(values))
    return state, y, history, n_iter


def _alternate(
    y: np.ndarray,
    c,
    state,
    fit: Callable,
    objective: Callable,
    relabel: Callable,
    *,
    tol: float,
    max_iter: int,
    mirror: Callable | None,
):
    """One annealing step of :func:`run_annealing` at loss weight ``c`` (the alternation of
    Yu et al. 2013, Alg. 1): model steps (rejected when they would raise the objective) and
    label steps until the objective settles or ``y`` stays, then the sign check once.

    Returns ``(state, y, values, rounds)``: ``values`` the objective after every half step
    (and an accepted mirror), ``rounds`` the model steps taken."""
    values: list[float] = []
    current = objective(state, y, c) if state is not None else np.inf
    mirror_tried = mirror is None
    rounds = 0
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
        rounds += 1
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
    return state, y, values, rounds


def run_restarts(estimator, run, X, bag_codes, shares, known, random_state, Z, **problem):
    """``estimator.n_restarts`` calls of ``run`` through joblib; the smallest objective wins.

    Seeds are drawn from ``random_state`` before any work is dispatched, so the result does
    not depend on ``estimator.n_jobs``. The first restart may start from
    ``estimator.init``'s scores. ``run(codes, shares, known, tol, max_iter, init_scores, seed,
    Z=Z, **problem)`` returns a tuple whose first entry is the final objective; rows are handed
    to it grouped by bag (``Z`` the per-row features). Returns the objectives of all restarts
    and the winning run's tuple.
    """
    init_scores = initial_scores(estimator, X, bag_codes, shares, known, random_state)
    seeds = random_state.randint(SEED_MAX, size=int(estimator.n_restarts))
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
    """Decision values of the initialiser named by ``estimator.init`` (Sect. 7.2), or ``None``:
    InvCal or conv-pSVM with the estimator's kernel (and, for conv-pSVM, its ``C``)."""
    if estimator.init is None:
        return None
    kernel = {"kernel": estimator.kernel, "gamma": estimator.gamma}
    model = InvCal(**kernel) if estimator.init == "invcal" else ConvPSVM(C=estimator.C, **kernel)
    return binary_scores(model, X, bag_codes, shares, known, random_state)


class AlternatingPSVM(MarginLLPClassifier):
    """Parameters shared by the alternating proportion-SVMs
    (:class:`~qcllp.learn.psvm.alter_psvm.AlterPSVM`,
    :class:`~qcllp.learn.psvm.twin_psvm.TwinPSVM`), and their optimisation records on the
    estimator; subclasses implement ``_fit_binary``.

    ``C_p`` must be positive, as in every LLP learner here (InvCal's ``C_p`` too). At
    ``C_p = 0`` the proportion loss drops out of the objective: the label step only follows the
    signs of the model's scores, so after the proportion-consistent start the alternation is
    plain self-training and the bags' proportions are never used again, which is no longer
    learning from label proportions. The papers never go there (pSVM Sect. 6.2: C_p in
    {1, 10, 100}; the twin paper's experiments: c_p in {1, 10, 100}). ``tol`` may be 0 (stop
    only when the objective no longer decreases), as in conv-pSVM and WellSVM.
    """

    _parameter_constraints = {
        "C": [POSITIVE],
        "C_p": [POSITIVE],
        **FEATURE_MAP_CONSTRAINTS,
        "n_restarts": [COUNT],
        "init": [None, StrOptions({"invcal", "conv"})],
        "annealing_delta": [POSITIVE],
        "tol": [NON_NEGATIVE],
        "max_iter": [COUNT],
        "n_jobs": [None, INTEGER],
        "random_state": ["random_state"],
    }

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

    def fit(self, X, bags, proportions, y=None):
        """Fit as :meth:`MarginLLPClassifier.fit`, then expose the binary models' records:
        ``objective_``, ``objective_history_`` and ``n_iter_`` (one entry per binary task)."""
        super().fit(X, bags, proportions, y)
        self.objective_ = np.array([m.objective for m in self.estimators_])
        self.objective_history_ = [m.objective_history for m in self.estimators_]
        self.n_iter_ = np.array([m.n_iter for m in self.estimators_])
        return self
