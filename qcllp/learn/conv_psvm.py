"""conv-pSVM (Yu et al. 2013, Alg. 2): the convex relaxation of proportion-SVM.

The label proportions become the constraint ``y in Y`` of pSVM eq. 10 (every bag's positive
share within ``epsilon`` of the given one), the bias is dropped (footnote 2: a constant feature
stands in for it) and the problem over ``M = y y'`` is relaxed to the convex hull (eq. 13-14).
That relaxation is solved by the WellSVM engine (:mod:`qcllp.learn.wellsvm`): cutting plane
over label vectors, violated labels by the l-infinity relaxation and per-bag sorting
(eq. 19-21), multiple label-kernel learning over the working set. Labels are recovered by the
rank-1 approximation of ``M`` (Sect. 5.3), with the global sign chosen so that the training
bags' predicted shares fit their proportions best (footnote 3), and rows are scored by eq. 22,
``f(x) = sum_i alpha_i y_i phi(x_i)' phi(x)``.

Unlike alter-pSVM it needs no random restarts: the relaxation is convex, and the only
randomness is the choice of Nystroem landmarks for rbf kernels on more than ``n_components``
rows.

Cost: ``max_iter`` cutting-plane iterations, each a few MKL alternations, each one L2-SVM
solved by finite Newton in the primal (:func:`qcllp.learn.wellsvm._svm_primal`), linear in N.
On one core, 5,000 x 69 in bags of 50 takes about 4 s (linear) and 12 s (rbf, 500 Nystroem
landmarks); 20,000 rows about 8 s and 39 s (``benchmarks/bench_conv_psvm.py scale``).
"""

from __future__ import annotations

import numpy as np

from .margin import MarginLLPClassifier
from .wellsvm import feature_space, fit_wellsvm, oriented_weights, proportion_label_space

__all__ = ["ConvPSVM"]


class ConvPSVM(MarginLLPClassifier):
    """conv-pSVM: convex proportion-SVM by cutting plane and label-kernel learning.

    Parameters
    ----------
    C : loss weight of the SVM (pSVM eq. 9; squared hinge loss, see :mod:`qcllp.learn.wellsvm`).
    epsilon : tolerance on each bag's positive share (eq. 10); 0 demands the exact count
        (the nearest integer count when ``share * bag size`` is not an integer).
    kernel : ``"linear"`` or ``"rbf"``.
    gamma : rbf width, a float or ``"scale"`` (``1 / (n_features * X.var())``).
    max_iter : cutting-plane iterations (label vectors added) at most.
    tol : stop when the objective decreases by less than this fraction (the paper: 1e-4).
    n_components : rbf on more rows than this uses that many Nystroem landmarks instead of
        the exact kernel map (which is solved by libsvm on the precomputed mixed kernel); the
        linear kernel and Nystroem features are solved in the primal, linear in N.
    random_state : seeds the Nystroem landmarks.

    Known labels passed as ``y`` to ``fit`` stay fixed. Multi-class problems are fitted
    one-vs-rest, and ``predict_proba`` is calibrated on the training bags
    (:class:`~qcllp.learn.margin.MarginLLPClassifier`). Fitted binary models expose
    ``n_iter_``, ``mu_`` and ``objective_`` through ``estimators_[j]``.
    """

    def __init__(
        self,
        C: float = 1.0,
        epsilon: float = 0.0,
        kernel: str = "linear",
        gamma="scale",
        max_iter: int = 10,
        tol: float = 1e-4,
        n_components: int = 500,
        random_state=None,
    ):
        self.C = C
        self.epsilon = epsilon
        self.kernel = kernel
        self.gamma = gamma
        self.max_iter = max_iter
        self.tol = tol
        self.n_components = n_components
        self.random_state = random_state

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        if self.C <= 0:
            raise ValueError(f"C must be positive, got {self.C!r}")
        if not 0 <= self.epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon!r}")
        space = proportion_label_space(bag_codes, shares, self.epsilon, known)
        space_, Phi = feature_space(X, self.kernel, self.gamma, self.n_components, random_state)
        result = fit_wellsvm(Phi, space, self.C, max_iter=self.max_iter, tol=self.tol)
        model = space_.decision(oriented_weights(Phi, result, space, result.rank1_labels()))
        model.n_iter_ = result.n_iter
        model.mu_ = result.mu
        model.objective_ = np.asarray(result.objective)
        model.converged_ = result.converged
        return model
