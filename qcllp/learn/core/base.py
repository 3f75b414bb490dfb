"""What every qcllp learner shares: the LLP estimator contract on top of scikit-learn's.

A learner subclasses ``sklearn.base.BaseEstimator`` and :class:`LLPClassifierMixin`, stores its
parameters untouched in ``__init__`` and implements ``fit(X, bags, proportions)`` plus
``predict_proba``. The mixin validates inputs once at the boundary, records ``classes_``,
``n_features_in_`` (and ``feature_names_in_`` for DataFrames), decodes class indices back to
the user's labels and scores a model on bags by the bag-level error (Yu et al. eq. 23).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from qcllp.learn.core.problem import LLPProblem, check_features, check_llp_input
from qcllp.learn.metrics import bag_error_from_labels

__all__ = ["SEED_MAX", "LLPClassifierMixin", "positive_proba"]

SEED_MAX = np.iinfo(np.int32).max  # per-task and per-restart seeds are drawn below this


class LLPClassifierMixin:
    """Mixin for classifiers learned from label proportions."""

    _estimator_type = "classifier"

    def _validate_fit_input(self, X, bags, proportions, y=None) -> LLPProblem:
        """Check the training data and record ``classes_`` and the feature signature."""
        problem = check_llp_input(X, bags, proportions, y)
        self.classes_ = problem.classes
        self.n_features_in_ = problem.X.shape[1]
        if problem.feature_names is not None:
            self.feature_names_in_ = problem.feature_names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return problem

    def _validate_predict_input(self, X) -> np.ndarray:
        check_is_fitted(self, "classes_")
        return check_features(X, self.n_features_in_, getattr(self, "feature_names_in_", None))

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        """Class indices -> class labels (0/1 ints for binary problems)."""
        return self.classes_[np.asarray(codes, dtype=np.intp)]

    def predict(self, X) -> np.ndarray:
        """The most probable class per row (binary: 0/1, 1 = positive/defective)."""
        return self._decode(np.argmax(self.predict_proba(X), axis=1))

    def bag_error(self, X, bags, proportions: pd.Series | pd.DataFrame) -> float:
        """Mean over bags of |predicted share - given share| (eq. 23 divided by the bag count).

        Lower is better; needs no instance labels, so it serves model selection on held-out
        bags.
        """
        return bag_error_from_labels(bags, proportions, self.predict(X))


def positive_proba(model, proba: np.ndarray) -> np.ndarray:
    """The column of class 1 of ``model``'s ``predict_proba`` output; zeros when the model only
    ever saw the other class (a fold or a defect type without positives)."""
    classes = list(getattr(model, "classes_", [0, 1]))
    return proba[:, classes.index(1)] if 1 in classes else np.zeros(len(proba))
