"""Training a station model from the plant database and recording it in the registry.

The charges with final-QC counts are the labeled bags; the station-s features of their sticks
are the rows (stations up to s only). The bag-aware grid search picks the hyper-parameters by
the bag-level error on held-out charges, the chosen model is refitted on all charges, its
out-of-fold probabilities (charge-grouped CV, never a charge split) give the honest
validation metrics and the cost-based lock-out threshold, and the artifact plus its metadata
enter the registry as a candidate.

The learners calibrate their probabilities on their own training charges, where the latent
labels were fitted: out of fold they are over-confident, and a threshold chosen on them
locks out good sticks (seen in ``benchmarks/bench_plant_quality.py``). So a second bag
calibration (the same monotone sigmoid, Yu et al.'s bag-level criterion) is fitted on the
out-of-fold probabilities against the charges' shares; it is stored with the model, the
threshold is chosen on recalibrated probabilities and the scorer applies it.

The out-of-fold pass reuses the hyper-parameters chosen on all charges, so its figures are
slightly optimistic for the grid's choice; nesting the search would multiply the training
time by the number of folds, which a nightly retraining on two cores cannot afford.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sqlalchemy.engine import make_url

from qcllp.features import StationFeatures, station_features
from qcllp.learn import BagGridSearchCV, BagKFold
from qcllp.learn.calibration import BagCalibrator
from qcllp.plant.config import PlantConfig
from qcllp.store import Store

from .artifacts import save_artifact
from .evaluate import cross_validate_charges, score_probabilities
from .methods import canonical_name, method
from .registry import register_model
from .thresholds import LockoutCosts, ThresholdChoice, choose_threshold, expected_saving

__all__ = [
    "FailureView",
    "LabeledData",
    "TrainingError",
    "TrainingResult",
    "labeled_data",
    "lockout_threshold",
    "logit",
    "train_station",
]

Progress = Callable[[str], None] | None


class TrainingError(ValueError):
    """Training cannot start: no labeled charges, an unknown target, too few charges."""


@dataclass(frozen=True)
class LabeledData:
    """The station-s training set: features, the charge of each stick and the targets."""

    features: StationFeatures
    proportions: pd.Series | pd.DataFrame
    defective_counts: pd.Series
    target: str
    n_sticks: pd.Series

    @property
    def bags(self) -> np.ndarray:
        return self.features.bags.to_numpy()

    @property
    def failing_shares(self) -> pd.Series:
        """Share of failing sticks per charge, whatever the target (multiclass: 1 - ok)."""
        if isinstance(self.proportions, pd.Series):
            return self.proportions
        return (1.0 - self.proportions["ok"]).rename("defective")


@dataclass(frozen=True)
class TrainingResult:
    """What ``train_station`` recorded."""

    model_id: int
    station: str
    method: str
    target: str
    params: dict[str, Any]
    metrics: dict[str, float]
    n_charges: int
    n_sticks: int
    artifact_path: Path
    per_charge: pd.DataFrame = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "station": self.station,
            "method": self.method,
            "target": self.target,
            "params": self.params,
            "metrics": self.metrics,
            "n_charges": self.n_charges,
            "n_sticks": self.n_sticks,
            "artifact": str(self.artifact_path),
        }


def charge_times(store: Store) -> pd.Series:
    """When each charge was first seen (its first stick's first reading), UTC."""
    sticks = store.read_sticks()
    return sticks.groupby("charge_id")["first_seen"].min()


def labeled_data(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    target: str = "defective",
    since: datetime | None = None,
    until: datetime | None = None,
) -> LabeledData:
    """Features and proportions of the charges that have final-QC counts."""
    config.station(station)  # an unknown station fails here, with the known ones listed
    check_target(config, target)
    counts = store.read_defect_counts(list(config.defect_types))
    if since is not None or until is not None:
        times = charge_times(store).reindex(counts.index)
        keep = pd.Series(True, index=counts.index)
        if since is not None:
            keep &= times >= pd.Timestamp(since)
        if until is not None:
            keep &= times < pd.Timestamp(until)
        counts = counts.loc[keep.to_numpy()]
    if counts.empty:
        raise TrainingError(
            "no labeled charges yet: ingest final-QC defect counts first (qcllp ingest defects)"
            + (" or widen --since/--until" if since or until else "")
        )
    features = station_features(store, config, station, charge_ids=list(counts.index))
    if features.X.empty:
        raise TrainingError(
            f"none of the {len(counts)} labeled charges has readings at station {station!r}"
        )
    counts = counts.loc[pd.unique(features.bags.to_numpy())]
    if len(counts) < 4:
        raise TrainingError(
            f"only {len(counts)} labeled charges with readings at {station!r}; "
            "at least 4 are needed to validate a model on held-out charges"
        )
    types = list(config.defect_types)
    n_sticks = counts["n_sticks"].astype(float)
    defective = counts[types].sum(axis=1)
    if target == "defective":
        proportions: pd.Series | pd.DataFrame = (defective / n_sticks).rename("defective")
    elif target in types:
        proportions = (counts[target] / n_sticks).rename(target)
        defective = counts[target]
    else:
        table = counts[types].div(n_sticks, axis=0)
        table.insert(0, "ok", 1.0 - table.sum(axis=1))
        proportions = table
    return LabeledData(features, proportions, defective.astype(float), target, n_sticks)


def check_target(config: PlantConfig, target: str) -> None:
    """Targets: ``defective`` (any defect), one defect type, or ``multiclass`` (ok + types)."""
    if target not in ("defective", "multiclass", *config.defect_types):
        raise TrainingError(
            f"unknown target {target!r}; choose defective, multiclass or a defect type "
            f"({', '.join(config.defect_types)})"
        )


def defect_probability(model, X) -> np.ndarray:
    """Probability that a stick fails (binary: class 1; multiclass: 1 - P(ok))."""
    proba = model.predict_proba(X)
    classes = list(model.classes_)
    if "ok" in classes:
        return 1.0 - proba[:, classes.index("ok")]
    return proba[:, -1]


def failure_probability(payload: dict, X) -> np.ndarray:
    """P(stick fails) from a model artifact: the model's, recalibrated on held-out charges."""
    p = defect_probability(payload["model"], X)
    recalibration = payload.get("recalibration")
    return p if recalibration is None else recalibration.predict(logit(p))


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), clipped away from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=float), 1e-6, 1 - 1e-6)
    return np.log(p) - np.log1p(-p)


def artifact_directory(config: PlantConfig, database_url: str) -> Path:
    """Model files live beside an SQLite database, else beside the plant config."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return Path(url.database).resolve().parent / "models"
    base = config.path.parent if config.path is not None else Path.cwd()
    return base / "models"


def train_station(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    database_url: str,
    method_name: str | None = None,
    target: str = "defective",
    since: datetime | None = None,
    until: datetime | None = None,
    random_state: int | None = None,
    n_splits: int | None = None,
    progress: Progress = None,
) -> TrainingResult:
    """Train, validate and register one station model; returns what was recorded."""
    say = progress or (lambda _msg: None)
    config.station(station)
    check_target(config, target)
    training = config.training or {}
    name = canonical_name(method_name or training.get("default_method", "alter-psvm"))
    chosen = method(name)
    seed = int(random_state if random_state is not None else training.get("random_state", 0))
    folds = int(n_splits or training.get("cv", 5))
    grids = {canonical_name(k): v for k, v in (training.get("methods") or {}).items()}

    say(f"{station}: reading features of labeled charges")
    data = labeled_data(store, config, station, target=target, since=since, until=until)
    X, bags, props = data.features.X, data.bags, data.proportions
    folds = max(2, min(folds, len(props) // 2))

    grid = chosen.param_grid(grids.get(name))
    say(f"{station}: {name} grid search over {len(props)} charges, {len(X)} sticks")
    cv = BagKFold(folds, shuffle=True, random_state=seed)
    estimator = chosen.estimator(seed)
    if grid:
        search = BagGridSearchCV(estimator, grid, cv=cv, random_state=seed).fit(X, bags, props)
        model, params = search.best_estimator_, dict(search.best_params_)
        cv_bag_error = float(search.best_bag_error_)
    else:
        model, params, cv_bag_error = clone(estimator).fit(X, bags, props), {}, float("nan")

    say(f"{station}: charge-grouped validation ({folds} folds)")
    binary_props = data.failing_shares
    evaluation = cross_validate_charges(
        lambda: FailureView(clone(model)),
        X,
        bags,
        binary_props,
        n_splits=folds,
        random_state=seed,
    )
    codes, uniques = pd.factorize(bags)
    recalibration = BagCalibrator().fit(
        logit(evaluation.probability), codes, binary_props.reindex(uniques).to_numpy()
    )
    oof = recalibration.predict(logit(evaluation.probability))
    station_cfg = config.station(station)
    costs = LockoutCosts(station_cfg.fail_cost, station_cfg.good_cost)
    choice = lockout_threshold(
        oof,
        codes,
        data.defective_counts.reindex(uniques).to_numpy(),
        data.n_sticks.reindex(uniques).to_numpy(),
        costs,
    )
    evaluation = score_probabilities(oof, bags, binary_props, threshold=choice.threshold)

    metrics = {
        **evaluation.metrics,
        "cv_bag_error": cv_bag_error,
        "threshold": choice.threshold,
        "bayes_threshold": choice.bayes_threshold,
        "expected_saving_per_1000": choice.saving_per_1000,
    }
    importances = _importances(X, oof)
    created = datetime.now().astimezone()
    payload = {
        "model": model,
        "station": station,
        "method": name,
        "target": target,
        "features": list(X.columns),
        "imputation": dict(data.features.imputation),
        "threshold": choice.threshold,
        "recalibration": recalibration,
        "per_charge": evaluation.per_charge,
        "importances": importances,
    }
    stem = f"{station}-{name}-{created:%Y%m%dT%H%M%S%f}"
    path, sha = save_artifact(payload, artifact_directory(config, database_url), stem)
    times = charge_times(store).reindex(props.index)
    model_id = register_model(
        store,
        station=station,
        method=name,
        target=target,
        params=_jsonable(params),
        metrics=_jsonable(metrics),
        features=list(X.columns),
        artifact_path=str(path),
        sha256=sha,
        trained_from=_py_time(times.min()),
        trained_until=_py_time(times.max()),
        n_charges=len(props),
        n_sticks=len(X),
    )
    say(f"{station}: registered model {model_id} ({name}) as a candidate")
    return TrainingResult(
        model_id,
        station,
        name,
        target,
        params,
        metrics,
        len(props),
        len(X),
        path,
        evaluation.per_charge,
    )


def lockout_threshold(
    probability: np.ndarray,
    codes: np.ndarray,
    defective: np.ndarray,
    n_sticks: np.ndarray,
    costs: LockoutCosts,
) -> ThresholdChoice:
    """The cost-based threshold, never below the Bayes threshold good / (good + fail).

    The estimate behind :func:`choose_threshold` knows each training charge's count; a fresh
    charge's is unknown when its sticks are scored, so the estimate is optimistic for
    thresholds below the Bayes rule's (in the demo, rolling's chosen 0.6 precision against a
    break-even of 0.78 lost money on fresh charges). Below the Bayes threshold a calibrated
    probability itself says that locking the stick out loses money on average, so we do not.
    """
    choice = choose_threshold(probability, codes, defective, costs, n_sticks=n_sticks)
    if choice.threshold >= costs.bayes_threshold:
        return choice
    threshold = costs.bayes_threshold
    saving = expected_saving(probability, codes, defective, threshold, costs, n_sticks=n_sticks)
    return ThresholdChoice(
        threshold=threshold,
        saving_per_1000=float(1000 * saving[0] / len(probability)),
        lockout_rate=float(np.mean(probability >= threshold)),
        bayes_threshold=costs.bayes_threshold,
    )


class FailureView(BaseEstimator):
    """Wraps a model so that ``predict_proba(X)[:, 1]`` is the probability of failing."""

    def __init__(self, model=None):
        self.model = model

    def fit(self, X, bags, shares):
        self.model.fit(X, bags, shares)
        return self

    def predict_proba(self, X) -> np.ndarray:
        p = defect_probability(self.model, X)
        return np.column_stack([1.0 - p, p])


def _importances(X: pd.DataFrame, probability: np.ndarray) -> pd.Series:
    """|correlation| of each feature with the predicted failure probability (model-agnostic)."""
    Z = X.to_numpy(float)
    Z = Z - Z.mean(axis=0)
    p = probability - probability.mean()
    denom = np.sqrt((Z * Z).sum(axis=0) * (p * p).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.where(denom > 0, np.abs(Z.T @ p) / denom, 0.0)
    return pd.Series(corr, index=X.columns).sort_values(ascending=False)


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not np.isfinite(value):
            value = None
        out[key] = value
    return out


def _py_time(value) -> datetime | None:
    return None if pd.isna(value) else pd.Timestamp(value).to_pydatetime()
