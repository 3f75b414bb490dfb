"""A fitted station model: everything the scorer needs to turn a stick's features into a flag.

``StationModel`` is what ``train_station`` writes into an artifact and what every scorer (the
``qcllp score`` command, the station service) reads back. It holds the fitted LLP estimator,
the feature columns in training order with their imputation values, the recalibration fitted
on out-of-fold probabilities against the charges' shares, the cost-based lock-out threshold
with the costs it was chosen for, the validation metrics and the training window. One method,
:meth:`StationModel.decide`, turns a feature frame into failure probabilities and lock-out
decisions, so training-time and scoring-time arithmetic cannot drift apart.

An artifact stores it as plain parts (:meth:`StationModel.to_state`): its two pandas tables
as arrays, its times as ISO text, so that the artifact format builds no pandas internals and
no type outside its allow-list (:mod:`.artifacts`); :func:`station_model_from_state` reverses it.

Artifacts written before this object existed (format 1: a plain dict) load through
:func:`station_model_from_v1`, which takes what the dict and its registry row recorded; the
costs were not stored then and stay ``None`` (the threshold, which is what scoring uses, was).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from qcllp.features import apply_imputation
from qcllp.station.lockout_rule import LockoutCosts

__all__ = [
    "FailureView",
    "ModelMismatchError",
    "StationModel",
    "defect_probability",
    "logit",
    "station_model_from_state",
    "station_model_from_v1",
]


class ModelMismatchError(ValueError):
    """A model was asked to score for a station, target or feature set it was not built for."""


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), clipped away from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=float), 1e-6, 1 - 1e-6)
    return np.log(p) - np.log1p(-p)


def defect_probability(model: Any, X: Any) -> np.ndarray:
    """Probability that a stick fails (binary: class 1; multiclass: 1 - P(ok))."""
    proba = model.predict_proba(X)
    classes = list(model.classes_)
    if "ok" in classes:
        return 1.0 - proba[:, classes.index("ok")]
    return proba[:, -1]


class FailureView(BaseEstimator):
    """Wraps an LLP model so that ``predict_proba(X)[:, 1]`` is the probability of failing.

    Charge-grouped validation scores every target (one defect type, any defect, multiclass) as
    the binary "fails or not"; this view lets it treat them alike.
    """

    def __init__(self, model: Any = None):
        self.model = model

    def fit(self, X: Any, bags: Any, shares: Any, y: Any = None) -> FailureView:
        """Fit the wrapped model (``y``: known labels, passed on when given)."""
        self.model.fit(X, bags, shares, *(() if y is None else (y,)))
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        p = defect_probability(self.model, X)
        return np.column_stack([1.0 - p, p])


@dataclass(frozen=True, eq=False)
class StationModel:
    """A trained, validated station model with its lock-out decision.

    ``threshold`` > 1 means the model locks out nothing (no threshold was expected to save
    money). ``recalibration`` maps the estimator's failure probability (on the logit scale) to
    the probability the threshold was chosen on; ``None`` applies none.
    ``lockout_rate_bound``: the largest share of sticks a healthy model locks out (from its
    training charges); ``lockout_excess_bound``: the most sticks it locks out beyond that share
    in a run. The scorer suspends lock-outs beyond them (:mod:`qcllp.station.guard_bounds`;
    artifacts written before a bound existed read ``None``: that rule is not applied).
    """

    station: str
    method: str
    target: str
    estimator: Any
    features: tuple[str, ...]
    imputation: Mapping[str, float]
    threshold: float
    recalibration: Any = None
    costs: LockoutCosts | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    trained_from: datetime | None = None
    trained_until: datetime | None = None
    per_charge: pd.DataFrame | None = field(default=None, repr=False)
    importances: pd.Series | None = field(default=None, repr=False)
    lockout_rate_bound: float | None = None  # the scorer's lock-out guard; None: no guard
    lockout_excess_bound: float | None = None  # its recent-excess rule; None: not applied

    def prepare(self, X: pd.DataFrame) -> pd.DataFrame:
        """The columns in training order, missing values filled as at training time. A frame
        already in that order (the scorer's, built from the model's own feature list) is not
        copied by a ``reindex``: a tenth of a line step's model call."""
        if tuple(X.columns) != self.features:
            X = X.reindex(columns=list(self.features))
        return apply_imputation(X, self.imputation)

    def failure_probability(self, X: pd.DataFrame) -> np.ndarray:
        """P(stick fails) for each row of a station feature frame (recalibrated)."""
        p = defect_probability(self.estimator, self.prepare(X))
        return p if self.recalibration is None else self.recalibration.predict(logit(p))

    def decide(self, X: pd.DataFrame) -> pd.DataFrame:
        """One row per stick: its index columns, ``probability`` and ``flagged`` (lock out)."""
        probability = self.failure_probability(X) if len(X) else np.empty(0)
        frame = X.index.to_frame(index=False)
        frame["probability"] = probability
        frame["flagged"] = self.flagged(probability)
        return frame

    def flagged(self, probability: np.ndarray) -> np.ndarray:
        """The lock-out rule on failure probabilities: lock out from the threshold up."""
        return probability >= self.threshold

    def check_matches(self, *, station: str, target: str, features: list[str] | None) -> None:
        """Refuse a model whose station, target or feature list is not the one expected."""
        problems = []
        if station != self.station:
            problems.append(f"it was trained for station {self.station!r}, not {station!r}")
        if target != self.target:
            problems.append(f"its target is {self.target!r}, not {target!r}")
        if features is not None and list(features) != list(self.features):
            problems.append(
                f"its {len(self.features)} features differ from the {len(features)} expected"
            )
        if problems:
            raise ModelMismatchError("; ".join(problems))

    def to_state(self) -> dict[str, Any]:
        """The model as plain parts an artifact stores (:func:`station_model_from_state`)."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["features"] = list(self.features)
        state["imputation"], state["params"] = dict(self.imputation), dict(self.params)
        state["metrics"] = dict(self.metrics)
        for name in ("trained_from", "trained_until"):
            state[name] = None if state[name] is None else state[name].isoformat()
        if self.per_charge is not None:
            state["per_charge"] = _frame_state(self.per_charge)
        if self.importances is not None:
            state["importances"] = _frame_state(self.importances.to_frame("value"))
        return state


def station_model_from_state(state: Mapping[str, Any]) -> StationModel:
    """A :class:`StationModel` from :meth:`StationModel.to_state`'s parts."""
    parts = dict(state)
    parts["features"] = tuple(parts["features"])
    for name in ("trained_from", "trained_until"):
        if parts.get(name) is not None:
            parts[name] = datetime.fromisoformat(parts[name])
    if parts.get("per_charge") is not None:
        parts["per_charge"] = _frame_from_state(parts["per_charge"])
    if parts.get("importances") is not None:
        parts["importances"] = _frame_from_state(parts["importances"])["value"].rename(None)
    return StationModel(**parts)


def _frame_state(frame: pd.DataFrame) -> dict[str, Any]:
    """A table of number or text columns as NumPy arrays (text as fixed-width strings)."""

    def plain(values: Any) -> np.ndarray:
        array = np.asarray(values)
        return array if array.dtype.kind in "biuf" else np.asarray(values, dtype=str)

    return {
        "index": plain(frame.index),
        "index_name": frame.index.name,
        "columns": {str(name): plain(frame[name]) for name in frame.columns},
    }


def _frame_from_state(state: Mapping[str, Any]) -> pd.DataFrame:
    index = pd.Index(state["index"], name=state["index_name"])
    return pd.DataFrame(dict(state["columns"]), index=index)


def station_model_from_v1(payload: Mapping[str, Any], record: Mapping[str, Any]) -> StationModel:
    """Convert an artifact of format 1 (a plain dict) and its registry row to a StationModel.

    Format 1 held ``model, station, method, target, features, imputation, threshold,
    recalibration, per_charge, importances``; params, metrics and the training window were
    only in the registry row; the costs were not recorded.
    """
    return StationModel(
        station=payload["station"],
        method=payload["method"],
        target=payload["target"],
        estimator=payload["model"],
        features=tuple(payload["features"]),
        imputation=dict(payload["imputation"]),
        threshold=float(payload["threshold"]),
        recalibration=payload.get("recalibration"),
        params=dict(record.get("params") or {}),
        metrics=dict(record.get("metrics") or {}),
        trained_from=record.get("trained_from"),
        trained_until=record.get("trained_until"),
        per_charge=payload.get("per_charge"),
        importances=payload.get("importances"),
    )
