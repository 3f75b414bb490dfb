"""Charge-grouped evaluation of a station model.

Every charge is held out whole (:class:`qcllp.learn.BagKFold`), so a model is never scored on
sticks of a charge whose rows or proportions it saw. Without stick labels the evidence is per
charge: the predicted versus the counted share of defective sticks —

* ``bag_error``: Yu et al. (2013) eq. (23) averaged over charges, ``mean_k |p~_k - p_k|`` with
  ``p~_k`` the share of the charge's sticks labeled defective (``p >= 0.5``, the most probable
  class), as :func:`qcllp.learn.bag_error_from_labels` computes it for ``predict``;
* ``err_pi``: Stolpe & Morik (2011) eq. (5) for the same labels (``ok``/defective matrix);
* ``calibration_error``: ``mean_k |mean p - p_k|``, how well the mean probability of a charge
  matches its share (what the lock-out threshold estimate relies on).

Where per-stick truth exists — simulator output or hand-inspected sticks — stick-level
accuracy (of the ``p >= 0.5`` labels), ROC AUC of the probabilities, and the precision/recall
of the lock-out decision ``p >= threshold`` are reported as well. The threshold is a separate
argument because the lock-out threshold of a station is cost-based
(:mod:`qcllp.station.lockout_rule`) and usually far from 0.5.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.metrics import precision_score, recall_score, roc_auc_score

from qcllp.learn import BagKFold, err_pi, model_proportions
from qcllp.learn.core.base import positive_proba

__all__ = [
    "LABEL_THRESHOLD",
    "Evaluation",
    "FoldModels",
    "cross_validate_charges",
    "score_probabilities",
]

LABEL_THRESHOLD = 0.5  # a stick is *labeled* defective when it is more likely defective than ok


@dataclass
class Evaluation:
    """Results: per-charge table (index ``charge_id``), summary metrics, the probabilities.

    ``per_charge`` columns: ``n_sticks``, ``predicted_share`` (mean probability),
    ``labeled_share`` (share with ``p >= 0.5``), ``locked_share`` (share with ``p >=
    threshold``), ``actual_share`` (final QC) and ``abs_error`` (``|labeled - actual|``).
    """

    per_charge: pd.DataFrame
    metrics: dict[str, float] = field(default_factory=dict)
    probability: np.ndarray | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"metrics": dict(self.metrics), "charges": int(len(self.per_charge))}


@dataclass(frozen=True)
class FoldModels:
    """A model fitted on each fold's training charges, in fold order, and the rows each fold
    held out (a grid search's best parameters on its folds, kept by
    :class:`qcllp.learn.BagGridSearchCV` with ``keep_fold_estimators``)."""

    estimators: list[Any]
    test_rows: list[np.ndarray]


def cross_validate_charges(
    make_model: Callable[[], Any] | Any,
    features: pd.DataFrame | np.ndarray,
    charges: np.ndarray,
    shares: pd.Series,
    *,
    n_splits: int = 5,
    truth: np.ndarray | None = None,
    threshold: float = LABEL_THRESHOLD,
    random_state=None,
    fit_proportions: pd.Series | pd.DataFrame | None = None,
    known: np.ndarray | None = None,
    fitted: FoldModels | None = None,
) -> Evaluation:
    """Out-of-fold probability of class 1 (defective) for every stick, scored per charge and
    per stick.

    ``make_model`` is an unfitted LLP estimator (cloned per fold) or a callable returning one;
    it needs ``fit(X, bags, proportions)`` and ``predict_proba``. ``charges`` holds the charge
    id of every row, ``shares`` the defective share per charge (a Series indexed by charge id);
    ``truth`` (optional) 0/1 per stick, NaN where unknown; ``threshold`` the lock-out
    threshold. The folds (``random_state``) never split a charge. ``fit_proportions``: what
    the models are fitted on when it is not ``shares`` (per defect type, multiclass);
    ``known``: known labels per row (``y`` of the learners, e.g. inspected sticks), each fold's
    model fitted with those of its training rows (a held-out stick's own never).
    ``fitted``: the folds' models already fitted on these folds (a grid search's, on the same
    data); they predict their held-out rows and nothing is fitted again. Their folds must be
    the ones ``n_splits`` and ``random_state`` make here.
    """
    charges = np.asarray(charges)
    if len(charges) != len(features):
        raise ValueError(f"{len(features)} feature rows but {len(charges)} charge ids")
    missing = pd.Index(pd.unique(charges)).difference(shares.index)
    if len(missing):
        raise ValueError(f"charge {missing[0]!r} has no defective share")
    fitted_on = shares if fit_proportions is None else fit_proportions
    rows = (lambda idx: features.iloc[idx]) if hasattr(features, "iloc") else features.__getitem__
    probability = np.empty(len(features))
    folds = list(BagKFold(n_splits, random_state=random_state).split(features, groups=charges))
    if fitted is not None:
        _predict_held_out(fitted, folds, rows, probability)
        return score_probabilities(probability, charges, shares, truth=truth, threshold=threshold)
    jobs = (
        delayed(_fold_probability)(
            clone(make_model() if callable(make_model) else make_model),
            rows(train),
            charges[train],
            fitted_on.loc[pd.unique(charges[train])],
            None if known is None else known[train],
            rows(test),
        )
        for train, test in folds
    )
    for (_train, test), fold_probability in zip(folds, Parallel()(jobs), strict=True):
        probability[test] = fold_probability
    return score_probabilities(probability, charges, shares, truth=truth, threshold=threshold)


def _predict_held_out(
    fitted: FoldModels, folds: list, rows: Callable, probability: np.ndarray
) -> None:
    """Each fold's held-out rows' probability of class 1 from its fitted model, into
    ``probability``; models fitted on other folds than ``folds`` are refused."""
    for (_train, test), held_out, model in zip(
        folds, fitted.test_rows, fitted.estimators, strict=True
    ):
        if not np.array_equal(test, held_out):
            raise ValueError("the fitted fold models were fitted on other folds")
        probability[test] = positive_proba(model, model.predict_proba(rows(test)))


def _fold_probability(
    model: Any,
    X_train: Any,
    bags: np.ndarray,
    proportions: pd.Series | pd.DataFrame,
    known: np.ndarray | None,
    X_test: Any,
) -> np.ndarray:
    """One fold of :func:`cross_validate_charges`: ``model`` fitted on the training rows,
    its probability of class 1 on the held-out ones. A function of its arguments alone, so
    that joblib can run the folds side by side (``training.n_jobs``, a Dask cluster)."""
    fold_y = {} if known is None else {"y": known}
    model.fit(X_train, bags, proportions, **fold_y)
    return positive_proba(model, model.predict_proba(X_test))


def score_probabilities(
    probability: np.ndarray,
    charges: np.ndarray,
    shares: pd.Series,
    *,
    truth: np.ndarray | None = None,
    threshold: float | np.ndarray = LABEL_THRESHOLD,
) -> Evaluation:
    """Per-charge and (with ``truth``) per-stick metrics of given probabilities of class 1.

    ``threshold``: the lock-out threshold, one for all sticks or one per stick (models of
    different folds); the metrics report the median.
    """
    probability = np.asarray(probability, dtype=float)
    threshold = np.broadcast_to(np.asarray(threshold, dtype=float), probability.shape)
    charges = np.asarray(charges)
    if probability.shape != charges.shape:
        raise ValueError(f"{len(probability)} probabilities but {len(charges)} charge ids")
    frame = pd.DataFrame(
        {
            "charge_id": charges,
            "p": probability,
            "label": probability >= LABEL_THRESHOLD,
            "locked": probability >= threshold,
        }
    )
    per_charge = frame.groupby("charge_id", sort=True).agg(
        n_sticks=("p", "size"),
        predicted_share=("p", "mean"),
        labeled_share=("label", "mean"),
        locked_share=("locked", "mean"),
    )
    actual = shares.reindex(per_charge.index).to_numpy(dtype=float)
    if np.isnan(actual).any():
        missing = per_charge.index[np.isnan(actual)][0]
        raise ValueError(f"charge {missing!r} has no defective share")
    per_charge["actual_share"] = actual
    per_charge["abs_error"] = (per_charge["labeled_share"] - actual).abs()
    sizes = per_charge["n_sticks"].to_numpy(dtype=float)
    counted = np.column_stack([1.0 - actual, actual])
    codes = per_charge.index.get_indexer(charges)
    gamma = model_proportions(frame["label"].to_numpy(np.intp), codes, len(per_charge), 2)
    metrics: dict[str, float] = {
        "bag_error": float(per_charge["abs_error"].mean()),
        "err_pi": err_pi(counted, gamma, sizes),
        "calibration_error": float((per_charge["predicted_share"] - actual).abs().mean()),
        "lockout_rate": float(frame["locked"].mean()),
        "threshold": float(np.median(threshold)) if len(threshold) else float("nan"),
    }
    if truth is not None:
        metrics.update(_stick_metrics(probability, np.asarray(truth, dtype=float), threshold))
    return Evaluation(per_charge=per_charge, metrics=metrics, probability=probability)


def _stick_metrics(probability: np.ndarray, truth: np.ndarray, threshold: np.ndarray) -> dict:
    if truth.shape != probability.shape:
        raise ValueError(f"{len(probability)} probabilities but {len(truth)} truth values")
    known = ~np.isnan(truth)
    if not known.any():
        return {"sticks_with_truth": 0}
    t, p = truth[known].astype(int), probability[known]
    locked = p >= threshold[known]
    return {
        "stick_accuracy": float(np.mean((p >= LABEL_THRESHOLD) == t)),
        "roc_auc": float(roc_auc_score(t, p)) if len(np.unique(t)) == 2 else float("nan"),
        "lockout_precision": float(precision_score(t, locked, zero_division=0)),
        "lockout_recall": float(recall_score(t, locked, zero_division=0)),
        "sticks_with_truth": int(known.sum()),
    }
