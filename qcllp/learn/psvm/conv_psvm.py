"""conv-pSVM (Yu et al. 2013, Alg. 2): the convex relaxation of proportion-SVM.

The label proportions become the constraint ``y in Y`` of pSVM eq. 10 (every bag's positive
share within ``epsilon`` of the given one), the bias is dropped (footnote 2: a constant feature
stands in for it) and the problem over ``M = y y'`` is relaxed to the convex hull (eq. 13-14).
That relaxation is solved by the WellSVM engine (:mod:`.wellsvm_solver`): cutting plane
over label vectors, violated labels by the l-infinity relaxation and per-bag sorting
(eq. 19-21), multiple label-kernel learning over the working set. Labels are recovered by the
rank-1 approximation of ``M`` (Sect. 5.3), with the global sign chosen so that the training
bags' predicted shares fit their proportions best (footnote 3), and rows are scored by eq. 22,
``f(x) = sum_i alpha_i y_i phi(x_i)' phi(x)``.

Unlike alter-pSVM it needs no random restarts: the relaxation is convex, and the only
randomness is the choice of Nystroem landmarks for rbf kernels on more than ``n_components``
rows.

**Initialisation.** pSVM Alg. 2 starts from ``alpha = 1/N`` and lets the violated-label search
choose the first label vector; WellSVM Alg. 1 starts from a given label vector instead
(supervised SVM, or the best of random labelings). ``init="invcal"`` takes the latter road
with InvCal's best proportion-consistent labeling. The relaxation is convex, but the working
set is capped at ``max_iter`` label vectors, and the violated labels are large-margin splits
of the data: on the simulated plant they follow the high-variance directions (alloy batches,
trends), not the rarer defects. Measured at the cooling station, 100 charges, 4,906 sticks,
C = 1: every label vector of the default run ranks the defective sticks at ROC AUC 0.55-0.59
and the model at 0.61 (training sticks); started from InvCal's labeling (AUC 0.71), which
then keeps a kernel weight of 0.68, the model reaches 0.87 (InvCal alone 0.84). On fresh
charges of a reseeded plant (``benchmarks/bench_plant_quality.py``, C = 0.1) the four stations
rank at ROC AUC 0.74 / 0.76 / 0.88 / 0.84 from InvCal's start against 0.62 / 0.63 / 0.36 / 0.36
from the paper's. On heart with few, large bags InvCal's labeling is the worse start
(``benchmarks/bench_conv_psvm.py heart``, linear, C = 0.1, 5-fold x 5: bags of 16 / 32 / 64
78.4 / 78.4 / 70.6 % against 82.7 / 82.1 / 81.2 %), so the paper's start stays the default and
``qcllp train`` lets the bag-level search choose.

Cost: ``max_iter`` cutting-plane iterations, each a few MKL alternations, each one L2-SVM
solved by finite Newton in the primal (:func:`qcllp.learn.psvm.wellsvm_solver.svm_primal`), linear
in N.
On one core, 5,000 x 69 in bags of 50 takes about 4 s (linear) and 12 s (rbf, 500 Nystroem
landmarks); 20,000 rows about 8 s and 39 s (``benchmarks/bench_conv_psvm.py scale``).
"""

from __future__ import annotations

import numpy as np

from qcllp.learn.baselines import InvCal
from qcllp.learn.core.kernels import KERNEL_CONSTRAINTS
from qcllp.learn.core.margin import MarginLLPClassifier, binary_scores
from qcllp.learn.core.params import COUNT, NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, StrOptions
from qcllp.learn.psvm.wellsvm_labels import proportion_label_space
from qcllp.learn.psvm.wellsvm_solver import feature_space, fit_wellsvm, oriented_weights

__all__ = ["ConvPSVM"]


class ConvPSVM(MarginLLPClassifier):
    """conv-pSVM: convex proportion-SVM by cutting plane and label-kernel learning.

    Parameters
    ----------
    C : loss weight of the SVM (pSVM eq. 9; squared hinge loss, see
        :mod:`qcllp.learn.psvm.wellsvm_solver`).
    epsilon : tolerance on each bag's positive share (eq. 10); 0 demands the exact count
        (the nearest integer count when ``share * bag size`` is not an integer).
    kernel : ``"linear"`` or ``"rbf"``.
    gamma : rbf width, a float or ``"scale"`` (``1 / (n_features * X.var())``).
    init : ``None`` (pSVM Alg. 2: the first label vector from the violated-label search at
        ``alpha = 1/N``) or ``"invcal"`` (WellSVM Alg. 1: the first label vector is InvCal's
        best proportion-consistent labeling); see the module docstring.
    max_iter : cutting-plane iterations (label vectors added) at most.
    tol : stop when the objective decreases by less than this fraction (the paper: 1e-4).
    n_components : rbf on more rows than this uses that many Nystroem landmarks instead of
        the exact kernel map (which is solved by libsvm on the precomputed mixed kernel); the
        linear kernel and Nystroem features are solved in the primal, linear in N.
    random_state : seeds the Nystroem landmarks.

    Known labels passed as ``y`` to ``fit`` stay fixed. Multi-class problems are fitted
    one-vs-rest, and ``predict_proba`` is calibrated on the training bags
    (:class:`~qcllp.learn.core.margin.MarginLLPClassifier`). Fitted binary models expose
    ``n_iter_``, ``mu_`` and ``objective_`` through ``estimators_[j]``.
    """

    _parameter_constraints = {
        "C": [POSITIVE],
        "epsilon": [UNIT_INTERVAL],
        **KERNEL_CONSTRAINTS,
        "init": [None, StrOptions({"invcal"})],
        "max_iter": [COUNT],
        "tol": [NON_NEGATIVE],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        C: float = 1.0,
        epsilon: float = 0.0,
        kernel: str = "linear",
        gamma="scale",
        init: str | None = None,
        max_iter: int = 10,
        tol: float = 1e-4,
        n_components: int = 500,
        random_state=None,
    ):
        self.C = C
        self.epsilon = epsilon
        self.kernel = kernel
        self.gamma = gamma
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.n_components = n_components
        self.random_state = random_state

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        init_scores = None
        if self.init == "invcal":
            invcal = InvCal(
                kernel=self.kernel,
                gamma=self.gamma,
                n_components=self.n_components,
                exact_kernel_max_n=self.n_components,
            )
            init_scores = binary_scores(invcal, X, bag_codes, shares, known, random_state)
        space = proportion_label_space(bag_codes, shares, self.epsilon, known)
        space_, Phi = feature_space(X, self.kernel, self.gamma, self.n_components, random_state)
        result = fit_wellsvm(
            Phi, space, self.C, max_iter=self.max_iter, tol=self.tol, init_scores=init_scores
        )
        model = space_.decision(oriented_weights(Phi, result, space, result.rank1_labels()))
        model.n_iter_ = result.n_iter
        model.mu_ = result.mu
        model.objective_ = np.asarray(result.objective)
        model.converged_ = result.converged
        return model
