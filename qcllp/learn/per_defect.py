"""The any-defect probability of a stick from one LLP model per defect type.

Final QC counts every failing stick under exactly one defect type, so a charge's per-type shares
are disjoint and add up to its failing share. Defect types have their own mechanisms, often at
their own stations (cracks start in the furnace, bends in the rolling mill): one binary model
per type learns its mechanism from that type's shares alone, where a single any-defect model
must find one direction in feature space that serves all types at once -- and with a linear
learner it cannot, when the types are driven by different sensors.

How the per-type probabilities ``p_j`` are combined (``combine``):

* ``"sum"``: ``P(fails) = min(1, sum_j p_j)``, exact for exclusive types (one defect per stick,
  as final QC counts them) when each ``p_j`` is calibrated;
* ``"noisy-or"``: ``1 - prod_j (1 - p_j)``, exact for independent types.

Which ranks and pays better on plant-like data is measured in
``benchmarks/bench_plant_quality.py`` (the pipeline default follows it). The learners'
probabilities are calibrated on their training bags (:mod:`.calibration`), so each ``p_j`` is
on the scale of its type's shares and the two rules differ only where several ``p_j`` are large.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_is_fitted

from qcllp.learn.core.base import LLPClassifierMixin, positive_proba
from qcllp.learn.core.params import StrOptions, check_params

__all__ = ["COMBINATIONS", "PerDefectClassifier"]

COMBINATIONS = ("sum", "noisy-or")


class PerDefectClassifier(LLPClassifierMixin, BaseEstimator):
    """Binary P(stick has any defect) from one binary LLP learner per defect type.

    Parameters
    ----------
    estimators : list of (defect type, LLP estimator)
        One unfitted learner per defect type; each is cloned and fitted on its type's shares.
        Learners may differ per type (e.g. the grid search chose other parameters).
    combine : {"sum", "noisy-or"}
        How the per-type probabilities become one (module docstring).

    ``fit(X, bags, proportions)`` takes a DataFrame indexed by bag with one column of shares
    per named defect type (other columns, such as ``ok``, are ignored). ``y`` (optional) holds
    known labels per row as the per-type problem has them: a defect type where the stick had
    that defect, any other label (``ok``, a type not named here) where it had none of the
    named ones, ``None``/NaN where unknown; each type's learner gets them as its binary
    labels (1: that type, 0: another or none). Classes are ``[0, 1]``,
    1 = the stick has a defect of any of the types. Fitted: ``estimators_`` (name -> fitted
    learner), ``defect_types_``.
    """

    _parameter_constraints = {"combine": [StrOptions(set(COMBINATIONS))]}

    def __init__(self, estimators: Sequence[tuple[str, BaseEstimator]] = (), combine: str = "sum"):
        self.estimators = estimators
        self.combine = combine

    def fit(self, X, bags, proportions: pd.DataFrame, y=None) -> PerDefectClassifier:
        check_params(self)
        names = [name for name, _ in self.estimators]
        if not names:
            raise ValueError("PerDefectClassifier needs at least one (defect type, estimator)")
        if len(set(names)) != len(names):
            raise ValueError(f"defect types must be named once each, got {names}")
        if not isinstance(proportions, pd.DataFrame):
            raise ValueError(
                "PerDefectClassifier needs per-type shares: a DataFrame indexed by bag with one "
                f"column per defect type ({', '.join(names)})"
            )
        absent = [n for n in names if n not in proportions.columns]
        if absent:
            raise ValueError(
                f"proportions lack the defect type column(s) {', '.join(map(str, absent))}; "
                f"they have {', '.join(map(str, proportions.columns))}"
            )
        return self._adopt(
            {
                name: clone(estimator).fit(X, bags, proportions[name], _binary(y, name))
                for name, estimator in self.estimators
            }
        )

    @classmethod
    def from_fitted(
        cls, estimators: Sequence[tuple[str, BaseEstimator]], combine: str = "sum"
    ) -> PerDefectClassifier:
        """The combination of learners each already fitted on its type's shares and binary
        labels, as :meth:`fit` fits them: the model ``fit`` would give, without fitting every
        type again (a grid search per type has fitted them, on all charges or on its folds).
        ``estimators`` keeps clones of them, unfitted, as a scikit-learn parameter."""
        model = cls([(name, clone(estimator)) for name, estimator in estimators], combine)
        check_params(model)
        names = [name for name, _ in estimators]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"defect types must be named once each, got {names}")
        return model._adopt(dict(estimators))

    def _adopt(self, fitted: dict[str, BaseEstimator]) -> PerDefectClassifier:
        """Take the fitted per-type learners and the attributes they give."""
        self.estimators_ = fitted
        first = next(iter(self.estimators_.values()))
        self.defect_types_ = list(fitted)
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = first.n_features_in_
        if hasattr(first, "feature_names_in_"):
            self.feature_names_in_ = first.feature_names_in_
        return self

    def defect_proba(self, X) -> np.ndarray:
        """(n, types) probability of each defect type, columns in ``defect_types_`` order."""
        check_is_fitted(self, "estimators_")
        return np.column_stack(
            [positive_proba(est, est.predict_proba(X)) for est in self.estimators_.values()]
        )

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2): P(no defect), P(any defect) from the per-type probabilities."""
        p = self.defect_proba(X)
        if self.combine == "sum":
            failing = np.minimum(p.sum(axis=1), 1.0)
        else:
            failing = 1.0 - np.prod(1.0 - p, axis=1)
        return np.column_stack([1.0 - failing, failing])


def _binary(y, name: str) -> np.ndarray | None:  # noqa: ANN001 - array-like labels
    """Known per-type labels as one type's binary ones: 1.0 where the label is ``name``, 0.0
    where it is another, NaN where unknown (``None`` stays ``None``)."""
    if y is None:
        return None
    labels = np.asarray(y, dtype=object)
    given = np.asarray(pd.notna(labels), dtype=bool)
    named = np.fromiter((isinstance(v, str) for v in labels[given]), bool, int(given.sum()))
    if not named.all():
        value = labels[given][int(np.argmin(named))]
        raise ValueError(
            f"PerDefectClassifier's y holds defect type names (or ok), got {value!r}: a 0/1 "
            "label cannot say which type failed"
        )
    return np.where(given, (labels == name).astype(float), np.nan)
