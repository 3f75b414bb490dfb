"""Drift watch: is the station's active model still the plant's model? Two signals.

**(a) With counts** (:func:`count_drift`): on the newest labeled charges the model was not
trained on (at most ``retrainer.drift.window_charges``), its bag-level error -- Yu et al.
(2013) eq. (23) on expected shares, as the promotion gate measures it (:mod:`.promotion`) --
against the same error out of fold in training (``calibration_error`` in the model's
metrics). Past ``bag_error_ratio`` times that (the reference floored at 0.01: a model that
fitted its training counts almost exactly must not alarm on noise), the process has moved
away from what the model learned: an alarm, and the daemon retrains the station.

**(b) Before counts exist** (:func:`feature_drift`): final QC counts a charge hours or days
after its sticks passed the station; the sensors say at once whether the sticks look like the
training ones. Per feature the population stability index (PSI) of the recent sticks (the
newest ``window_charges`` charges after the training window) against the training window's
sticks, over ten reference-quantile bins plus one for missing values::

    PSI = sum_b (r_b - e_b) * ln(r_b / e_b)

(``e``: reference shares, ``r``: recent shares, both floored at 1e-4). PSI rather than a
two-sample test: with thousands of sticks every test rejects for shifts far too small to
matter, while PSI measures the size of the shift with the industry's usual reading (below
0.1 stable, 0.1-0.25 moderate, above 0.25 a real shift: the default ``psi_max``).

But sticks come in charges, and charges differ (alloy batch, set points): a window of twenty
charges is a small sample of charges, and its PSI against the training window is well above
zero on an unchanged plant (0.2-0.35 on the simulated plant, measured). So the limit is
``psi_max`` or what the training window's own charge-to-charge variation produces, whichever
is larger: the largest feature PSI of ``NULL_DRAWS`` random windows of as many training
charges against the other training charges (seeded by the model id, computed once per
model). The model's predicted failure share on the recent sticks against the training sticks
is reported with it (the trend an engineer looks at next). Feature drift raises an alarm but
does not retrain: without new counts a retraining would learn nothing new.

Alarms are edge-triggered: one when a station's signal crosses its limit for its active
model, none while it stays there, a new one after it has been back below (or for a new model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from qcllp.features import station_features
from qcllp.plant.config import PlantConfig, Retrainer
from qcllp.retraining.charge_windows import recent_charges
from qcllp.retraining.promotion import holdout_figures, labeled_counts, window_data
from qcllp.scoring.step import insert_alarm
from qcllp.station.registry import LoadedModel
from qcllp.store import Store
from qcllp.store.events import events, insert_event
from qcllp.training.train import station_costs

__all__ = [
    "CountDrift",
    "FeatureDrift",
    "REFERENCE_FLOOR",
    "count_drift",
    "feature_drift",
    "null_psi",
    "population_stability",
    "watch_station",
]

BINS = 10
NULL_DRAWS = 20
REFERENCE_FLOOR = 0.01
MAX_REFERENCE_CHARGES = 200
_SHARE_FLOOR = 1e-4


def population_stability(
    reference: pd.DataFrame, recent: pd.DataFrame, *, bins: int = BINS
) -> pd.Series:
    """PSI of every column of ``recent`` against ``reference`` (module docstring), largest
    first; vectorized over columns (one bincount for all bins of all features)."""
    cols = list(reference.columns)
    ref = reference[cols].to_numpy(float)
    new = recent.reindex(columns=cols).to_numpy(float)
    if not len(ref) or not len(new):
        raise ValueError("population stability needs sticks in both windows")
    with np.errstate(all="ignore"):
        inner = np.nanquantile(ref, np.linspace(0, 1, bins + 1)[1:-1], axis=0)  # (bins-1, d)
    inner = np.where(np.isnan(inner), np.inf, inner)  # an all-missing column: one bin

    def shares(values: np.ndarray) -> np.ndarray:
        which = (values[:, None, :] > inner[None, :, :]).sum(axis=1)  # (n, d) bin 0..bins-1
        which = np.where(np.isnan(values), bins, which)  # missing values: bin `bins`
        d = values.shape[1]
        flat = which + (bins + 1) * np.arange(d)[None, :]
        counts = np.bincount(flat.ravel(), minlength=d * (bins + 1)).reshape(d, bins + 1)
        return np.maximum(counts / len(values), _SHARE_FLOOR)

    e, r = shares(ref), shares(new)
    psi = ((r - e) * np.log(r / e)).sum(axis=1)
    return pd.Series(psi, index=cols, name="psi").sort_values(ascending=False)


@dataclass(frozen=True)
class CountDrift:
    """Signal (a) for one station's active model."""

    station: str
    model_id: int
    n_charges: int
    bag_error: float
    reference: float
    limit: float

    @property
    def alarm(self) -> bool:
        return self.bag_error > self.limit

    def detail(self) -> dict[str, Any]:
        return {
            "n_charges": self.n_charges,
            "bag_error": self.bag_error,
            "reference": self.reference,
            "limit": self.limit,
        }


@dataclass(frozen=True)
class FeatureDrift:
    """Signal (b) for one station's active model: PSI per feature, largest first."""

    station: str
    model_id: int
    n_recent_sticks: int
    n_reference_sticks: int
    psi: pd.Series = field(repr=False)
    limit: float
    predicted_share_recent: float
    predicted_share_training: float
    null_psi: float = 0.0  # largest PSI of training windows against the rest of training

    @property
    def alarm(self) -> bool:
        return bool(len(self.psi)) and float(self.psi.iloc[0]) > self.limit

    def detail(self) -> dict[str, Any]:
        return {
            "n_recent_sticks": self.n_recent_sticks,
            "n_reference_sticks": self.n_reference_sticks,
            "limit": self.limit,
            "null_psi": self.null_psi,
            "top_psi": {k: round(float(v), 4) for k, v in self.psi.head(5).items()},
            "predicted_share_recent": self.predicted_share_recent,
            "predicted_share_training": self.predicted_share_training,
        }


def count_drift(
    store: Store, config: PlantConfig, station: str, loaded: LoadedModel
) -> CountDrift | None:
    """Signal (a), or ``None`` while fewer than half a window of fresh labeled charges exist."""
    settings = config.retrainer
    window = recent_charges(
        store,
        labeled=True,
        after=loaded.record["trained_until"],
        limit=settings.drift_window_charges,
    ).index
    counts = labeled_counts(store, config, window)
    if len(counts) < _enough(settings):
        return None
    features, shares = window_data(store, config, station, counts)
    if features.X.empty:
        return None
    figures = holdout_figures(loaded.model, features, shares, station_costs(config, station))
    reference = max(float(loaded.model.metrics.get("calibration_error", 0.0)), REFERENCE_FLOOR)
    return CountDrift(
        station,
        loaded.id,
        figures.n_charges,
        figures.bag_error,
        reference,
        settings.drift_bag_error_ratio * reference,
    )


@dataclass(frozen=True)
class _Reference:
    """A model's training-window sticks (prepared features), their charges, its mean predicted
    failure share there and the PSI its own charge-to-charge variation produces."""

    X: pd.DataFrame
    bags: np.ndarray
    predicted_share: float
    null_psi: float


def null_psi(X: pd.DataFrame, bags: np.ndarray, window: int, *, random_state: int) -> float:
    """Largest feature PSI of ``NULL_DRAWS`` random windows of ``window`` charges of ``X``
    against its other charges: the PSI an unchanged plant shows (module docstring)."""
    charges = pd.unique(bags)
    k = min(window, len(charges) // 2)
    if k < 1:
        return 0.0
    rng = np.random.default_rng(random_state)
    worst = 0.0
    for _ in range(NULL_DRAWS):  # a few small PSI computations, each vectorized
        inside = np.isin(bags, rng.choice(charges, size=k, replace=False))
        worst = max(worst, float(population_stability(X[~inside], X[inside]).iloc[0]))
    return worst


def _reference(
    store: Store, config: PlantConfig, station: str, loaded: LoadedModel
) -> _Reference | None:
    record, model = loaded.record, loaded.model
    training = recent_charges(
        store,
        labeled=False,
        after=_just_before(record["trained_from"]),
        before=_just_after(record["trained_until"]),
        limit=MAX_REFERENCE_CHARGES,
    ).index
    features = station_features(store, config, station, charge_ids=list(training))
    if features.X.empty:
        return None
    X, bags = model.prepare(features.X), features.bags.to_numpy()
    return _Reference(
        X,
        bags,
        float(np.mean(model.failure_probability(features.X))),
        null_psi(X, bags, config.retrainer.drift_window_charges, random_state=loaded.id),
    )


def feature_drift(
    store: Store,
    config: PlantConfig,
    station: str,
    loaded: LoadedModel,
    reference_cache: dict[int, _Reference | None] | None = None,
) -> FeatureDrift | None:
    """Signal (b), or ``None`` while fewer than half a window of charges arrived after the
    model's training window. ``reference_cache`` keeps each model's reference sticks between
    calls (they never change for a model)."""
    settings = config.retrainer
    model, record = loaded.model, loaded.record
    recent = recent_charges(
        store, labeled=False, after=record["trained_until"], limit=settings.drift_window_charges
    ).index
    if len(recent) < _enough(settings):
        return None
    cache = {} if reference_cache is None else reference_cache
    if loaded.id not in cache:
        cache[loaded.id] = _reference(store, config, station, loaded)
    ref = cache[loaded.id]
    new_features = station_features(store, config, station, charge_ids=list(recent))
    if ref is None or new_features.X.empty:
        return None
    new = model.prepare(new_features.X)
    return FeatureDrift(
        station,
        loaded.id,
        len(new),
        len(ref.X),
        population_stability(ref.X, new),
        max(settings.drift_psi_max, ref.null_psi),
        float(np.mean(model.failure_probability(new_features.X))),
        ref.predicted_share,
        ref.null_psi,
    )


def watch_station(
    store: Store,
    config: PlantConfig,
    station: str,
    loaded: LoadedModel,
    *,
    counts: bool,
    reference_cache: dict[int, _Reference | None] | None = None,
) -> bool:
    """Check the signals (``counts``: signal (a) too), record each as an event, raise
    edge-triggered alarms; returns whether signal (a) newly crossed its limit (retrain)."""
    crossed = False
    feature = feature_drift(store, config, station, loaded, reference_cache)
    if feature is not None:
        top = ", ".join(f"{k} {v:.2f}" for k, v in feature.psi.head(3).items())
        reason = (
            f"largest PSI {top} (limit {feature.limit:g}); predicted failure share "
            f"{feature.predicted_share_recent:.3f} recent vs {feature.predicted_share_training:.3f}"
            " in training"
        )
        _signal(store, "feature_drift", station, loaded.id, feature.alarm, reason, feature.detail())
    if counts:
        drift = count_drift(store, config, station, loaded)
        if drift is not None:
            reason = (
                f"bag error {drift.bag_error:.4f} on the {drift.n_charges} newest labeled charges "
                f"vs {drift.reference:.4f} in training (limit {drift.limit:.4f})"
            )
            crossed = _signal(
                store,
                "count_drift",
                station,
                loaded.id,
                drift.alarm,
                reason,
                drift.detail(),
                retrain=True,
            )
    return crossed


def _signal(
    store: Store,
    kind: str,
    station: str,
    model_id: int,
    alarm: bool,
    reason: str,
    detail: dict[str, Any],
    *,
    retrain: bool = False,
) -> bool:
    """Record the check; raise an alarm when it newly crossed (``retrain``: with a
    ``drift_retrain`` event, the retraining it wants, which the daemon's next start still
    queues should the daemon have stopped before queuing it). All in one transaction: the
    check is edge-triggered, so an alarm recorded without the rest would never be raised again.
    Returns whether it newly crossed."""
    previous = events(store, [kind], station=station, limit=1)
    was_alarm = (
        bool(previous) and previous[0]["outcome"] == "alarm" and previous[0]["model_id"] == model_id
    )
    crossed = alarm and not was_alarm
    with store.writing() as conn:
        outcome = "alarm" if alarm else "ok"
        insert_event(conn, kind, outcome, reason, station=station, model_id=model_id, detail=detail)
        if crossed:
            insert_alarm(conn, "retrainer", station, kind, f"model {model_id}: {reason}")
        if crossed and retrain:
            insert_event(
                conn,
                "drift_retrain",
                "wanted",
                f"retraining wanted: {kind.replace('_', ' ')} of model {model_id}",
                station=station,
                model_id=model_id,
            )
    return crossed


def _enough(settings: Retrainer) -> int:
    """Charges a drift verdict needs: half a window (at least 2)."""
    return max(2, settings.drift_window_charges // 2)


def _just_before(value: Any) -> Any:
    return None if value is None else pd.Timestamp(value) - timedelta(microseconds=1)


def _just_after(value: Any) -> Any:
    return None if value is None else pd.Timestamp(value) + timedelta(microseconds=1)
