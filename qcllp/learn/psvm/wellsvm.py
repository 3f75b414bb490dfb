"""WellSVM (Li et al. 2013) for semi-supervised learning (Alg. 2) and clustering (Alg. 4).

A weakly labeled SVM looks for labels ``y`` in a feasible set ``Y`` and a large margin at the
same time. :class:`WellSVM` builds the feasible set of its task, labeled rows fixed and the
unlabeled rows' positive share balanced (Sect. 4.1), or ``-B <= 1'y <= B`` for clustering
(Sect. 4.3) (:mod:`qcllp.learn.psvm.wellsvm_labels`), and solves the convex relaxation by cutting
plane and multiple label-kernel learning (:mod:`qcllp.learn.psvm.wellsvm_solver`, which also serves
conv-pSVM, :mod:`qcllp.learn.psvm.conv_psvm`). The prediction is WellSVM Alg. 2/4 step 7,
``f(x) = sum_t w_t' phi(x)``, with the global sign that fits the label space best.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted

from qcllp.learn.core.kernels import KERNEL_CONSTRAINTS
from qcllp.learn.core.params import (
    COUNT,
    NON_NEGATIVE,
    POSITIVE,
    UNIT_INTERVAL,
    StrOptions,
    check_params,
)
from qcllp.learn.psvm.wellsvm_labels import LabelSpace, balance_label_space, cluster_label_space
from qcllp.learn.psvm.wellsvm_solver import feature_space, fit_wellsvm, oriented_weights

__all__ = ["WellSVM"]


class WellSVM(ClassifierMixin, BaseEstimator):
    """WellSVM for semi-supervised learning (Alg. 2) and clustering (Alg. 4).

    Parameters
    ----------
    task : ``"semi-supervised"`` or ``"clustering"``.
    C : loss weight of the labeled rows (C_1 in WellSVM eq. 11); for clustering, of all rows
        (eq. 26).
    C_u : loss weight of the unlabeled rows (C_2 in eq. 11); ``None`` means ``C``.
    balance : semi-supervised: tolerance on the unlabeled rows' positive share around the
        labeled share (or ``positive_share``), 0 = the paper's equality; clustering:
        ``B / N`` in ``-B <= 1'y <= B`` (the paper uses 0.03 for balanced data).
    positive_share : semi-supervised only: the unlabeled rows' positive share, when known
        better than from the labeled rows.
    kernel, gamma, n_components : the feature space
        (:func:`~qcllp.learn.psvm.wellsvm_solver.feature_space`).
    max_iter, tol : cutting-plane iterations and relative objective decrease to stop at.
    random_state : seeds the Nystroem landmarks (rbf with more rows than ``n_components``).

    Label convention: ``fit(X, y)`` takes ``y`` with +1 / -1 for labeled rows and 0 or NaN for
    unlabeled ones (clustering ignores ``y``). ``labels_`` holds +1 / -1 for every training row:
    labeled rows keep theirs, the others get ``argmax_{y in Y} f' y`` for the learned decision
    values f (so they satisfy the balance constraint). ``predict`` is the sign of
    ``decision_function``; classes are ``[-1, 1]``.
    """

    _parameter_constraints = {
        "task": [StrOptions({"semi-supervised", "clustering"})],
        "C": [POSITIVE],
        "C_u": [None, POSITIVE],
        "balance": [UNIT_INTERVAL],
        "positive_share": [None, UNIT_INTERVAL],
        **KERNEL_CONSTRAINTS,
        "max_iter": [COUNT],
        "tol": [NON_NEGATIVE],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        task: str = "semi-supervised",
        C: float = 1.0,
        C_u: float | None = None,
        balance: float = 0.03,
        positive_share: float | None = None,
        kernel: str = "linear",
        gamma="scale",
        max_iter: int = 10,
        tol: float = 1e-4,
        n_components: int = 500,
        random_state=None,
    ):
        self.task = task
        self.C = C
        self.C_u = C_u
        self.balance = balance
        self.positive_share = positive_share
        self.kernel = kernel
        self.gamma = gamma
        self.max_iter = max_iter
        self.tol = tol
        self.n_components = n_components
        self.random_state = random_state

    def _space_and_weights(self, n: int, y) -> tuple[LabelSpace, np.ndarray, np.ndarray | None]:
        if self.task == "clustering":
            return cluster_label_space(n, self.balance), np.full(n, float(self.C)), None
        if y is None:
            raise ValueError("semi-supervised WellSVM needs y (+1/-1 labeled, 0/NaN unlabeled)")
        ya = np.asarray(y, dtype=float).ravel()
        if len(ya) != n:
            raise ValueError(f"y has {len(ya)} entries but X has {n} rows")
        ya = np.nan_to_num(ya, nan=0.0)
        bad = ~np.isin(ya, (-1.0, 0.0, 1.0))
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"y row {row}: {ya[row]!r} is not +1, -1, 0 or NaN (unlabeled)")
        fixed = ya.astype(np.int8)
        if not (fixed == 1).any() or not (fixed == -1).any():
            raise ValueError("semi-supervised WellSVM needs labeled rows of both classes")
        space = balance_label_space(fixed, self.balance, self.positive_share)
        C_u = self.C if self.C_u is None else self.C_u
        weights = np.where(fixed != 0, float(self.C), float(C_u))
        return space, weights, fixed.astype(float)

    def fit(self, X, y=None):
        """Learn labels for all rows of X and a decision function (see class docstring)."""
        check_params(self)
        X = check_array(X, dtype=float)
        self.n_features_in_ = X.shape[1]
        space, weights, fixed = self._space_and_weights(len(X), y)
        space_, Phi = feature_space(
            X, self.kernel, self.gamma, self.n_components, check_random_state(self.random_state)
        )
        init = None
        if fixed is not None:
            # labeled rows' kernel mean classifier: sum_{i in L} y_i k(x_i, x)
            init = Phi @ (Phi.T @ fixed)
        result = fit_wellsvm(
            Phi, space, weights, max_iter=self.max_iter, tol=self.tol, init_scores=init
        )
        w = oriented_weights(Phi, result, space, result.mean_labels())
        self.labels_ = space.argmax(Phi @ w).astype(np.int64)
        self.decision_ = space_.decision(w)
        self.mu_ = result.mu
        self.label_vectors_ = result.Y
        self.objective_ = np.asarray(result.objective)
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.classes_ = np.array([-1, 1])
        return self

    def fit_predict(self, X, y=None) -> np.ndarray:
        """``fit`` and return ``labels_``."""
        return self.fit(X, y).labels_

    def decision_function(self, X) -> np.ndarray:
        """f(x) = w' phi(x) (WellSVM Alg. 2/4 step 7); positive means class +1."""
        check_is_fitted(self, "decision_")
        X = check_array(X, dtype=float)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but the model was fitted on {self.n_features_in_}"
            )
        return self.decision_.decision_function(X)

    def predict(self, X) -> np.ndarray:
        """+1 / -1 by the sign of the decision function."""
        return np.where(self.decision_function(X) > 0, 1, -1)
