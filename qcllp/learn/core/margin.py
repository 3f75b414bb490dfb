"""Common frame of the LLP learners with a binary scoring core (the pSVM family, InvCal, the
mean maps, LLPFC, the boosted and EM learners).

Each learner implements a *binary* core: rows, their bag index, the positive share per bag and
optionally known labels in, a model with ``decision_function`` out (positive = class 1). This
base class turns that into the full estimator contract: validation, one-vs-rest for more than
two classes (class j against the rest has known per-bag shares: column j of the proportions),
probabilities calibrated on the training bags (:class:`BagCalibrator`) and reproducible seeds
per binary task, drawn up front, so a learner with ``n_jobs`` fits the one-vs-rest tasks in
parallel (joblib) and gives the same model for any ``n_jobs``. Parameters are checked against
the learner's ``_parameter_constraints`` at the start of ``fit`` (:mod:`qcllp.learn.core.params`).

:func:`binary_scores` fits the binary core of one learner on another's coded arrays: how
alter-pSVM and conv-pSVM start from InvCal's (or conv-pSVM's) decision values.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from qcllp.learn.calibration import BagCalibrator
from qcllp.learn.core.base import SEED_MAX, LLPClassifierMixin
from qcllp.learn.core.params import check_params
from qcllp.learn.core.problem import LLPProblem

__all__ = ["BinaryDecisionModel", "MarginLLPClassifier", "binary_scores"]


class BinaryDecisionModel(Protocol):
    """What a binary core returns: a model scoring rows, positive = class 1."""

    def decision_function(self, X: np.ndarray) -> np.ndarray: ...


class MarginLLPClassifier(LLPClassifierMixin, BaseEstimator):
    """Base class: subclasses implement :meth:`_fit_binary`.

    Fitted attributes: ``classes_``, ``estimators_`` (one binary model for binary problems, one
    per class otherwise), ``calibrators_`` (one :class:`BagCalibrator` per binary model).
    """

    def _fit_binary(
        self,
        X: np.ndarray,
        bag_codes: np.ndarray,
        shares: np.ndarray,
        known: np.ndarray,
        random_state: np.random.RandomState,
    ) -> BinaryDecisionModel:
        """Fit one binary problem.

        ``bag_codes`` (n,) index bags 0..h-1, ``shares`` (h,) the positive share per bag,
        ``known`` (n,) 1 / 0 for rows with a known label and -1 elsewhere.
        """
        raise NotImplementedError

    def fit(self, X, bags, proportions: pd.Series | pd.DataFrame, y=None):
        """Fit from bags and their label proportions; ``y`` optionally fixes known labels."""
        check_params(self)
        problem = self._validate_fit_input(X, bags, proportions, y)
        rng = check_random_state(getattr(self, "random_state", None))
        tasks = self._binary_tasks(problem)
        seeds = rng.randint(SEED_MAX, size=len(tasks))
        n_jobs = getattr(self, "n_jobs", None) if len(tasks) > 1 else None
        models = Parallel(n_jobs=n_jobs)(
            delayed(self._fit_binary)(
                problem.X, problem.bag_codes, shares, known, np.random.RandomState(seed)
            )
            for (shares, known), seed in zip(tasks, seeds, strict=True)
        )
        self.estimators_, self.calibrators_ = list(models), []
        for model, (shares, _) in zip(models, tasks, strict=True):
            decision = model.decision_function(problem.X)
            self.calibrators_.append(BagCalibrator().fit(decision, problem.bag_codes, shares))
        return self

    @staticmethod
    def _binary_tasks(problem: LLPProblem) -> list[tuple[np.ndarray, np.ndarray]]:
        if problem.n_classes == 2:
            known = np.where(problem.known >= 0, problem.known, -1)
            return [(problem.proportions[:, 1], known)]
        return [
            (problem.proportions[:, j], np.where(problem.known >= 0, problem.known == j, -1))
            for j in range(problem.n_classes)
        ]

    def decision_function(self, X) -> np.ndarray:
        """Signed distance to the decision boundary: (n,) for binary, (n, l) one-vs-rest."""
        Xa = self._validate_predict_input(X)
        scores = np.column_stack([m.decision_function(Xa) for m in self.estimators_])
        return scores[:, 0] if len(self.estimators_) == 1 else scores

    def predict_proba(self, X) -> np.ndarray:
        """Bag-calibrated class probabilities, shape (n, l); rows sum to one."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = self.calibrators_[0].predict(scores)
            return np.column_stack([1.0 - p, p])
        probs = np.column_stack(
            [cal.predict(scores[:, j]) for j, cal in enumerate(self.calibrators_)]
        )
        return probs / np.maximum(probs.sum(axis=1, keepdims=True), 1e-12)

    def predict(self, X) -> np.ndarray:
        """Binary: the sign of the decision function (1 = positive); else the likeliest class."""
        if len(getattr(self, "estimators_", ())) == 1:
            return self._decode((self.decision_function(X) > 0).astype(np.intp))
        return super().predict(X)


def binary_scores(
    learner: MarginLLPClassifier,
    X: np.ndarray,
    bag_codes: np.ndarray,
    shares: np.ndarray,
    known: np.ndarray,
    random_state: np.random.RandomState,
) -> np.ndarray:
    """Decision values on ``X`` of ``learner``'s binary core fitted on ``X``.

    The arrays are in the coded form :meth:`MarginLLPClassifier._fit_binary` takes (the caller
    has validated them in its own ``fit``); the learner's parameters are checked here. Used to
    start one learner from another's ranking (``init="invcal"``, ``init="conv"``).
    """
    check_params(learner)
    model = learner._fit_binary(X, bag_codes, shares, known, random_state)
    return model.decision_function(X)
