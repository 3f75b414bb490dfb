"""A model that locks out, for the shadow-trial tests: the retraining plant's station model
trained up to the holdout window (as the daemon trains its candidates), registered again with
its threshold just above its highest probability on the holdout charges: it locks out none of
them (a saving of 0, which the gate accepts of a first model) and the riskiest sticks of later
charges (the fast training setup's own rule declines to lock out anything on so few charges,
and any lower threshold loses money on this holdout)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from qcllp.features import station_features
from qcllp.plant.config import PlantConfig
from qcllp.station.registry import load_model
from qcllp.store import Store, stored_utc
from qcllp.training.train import labeled_data, record_model, train_station


def locking_candidate(store: Store, config: PlantConfig, station: str, margin: float = 1e-6) -> int:
    """Register the candidate described above; its id (status ``candidate``)."""
    times = store.read_charge_times().sort_values()
    until = times.iloc[len(times) - config.retrainer.holdout_charges - 1].to_pydatetime()
    base = load_model(store, train_station(store, config, station, until=until).model_id).model
    holdout = times.index[len(times) - config.retrainer.holdout_charges :].tolist()
    features = station_features(store, config, station, charge_ids=holdout)
    t = float(np.max(base.failure_probability(features.X))) + margin
    metrics = {**base.metrics, "threshold": t, "lockout_declined": False}
    model = replace(base, threshold=t, metrics=metrics)
    data = labeled_data(store, config, station, until=until)
    return record_model(store, config, model, data).model_id


def probabilities(
    store: Store, config: PlantConfig, station: str, model_id: int, charges
) -> pd.DataFrame:
    """``charge_id, stick_id, probability`` of the model on these charges' sticks."""
    features = station_features(store, config, station, charge_ids=list(charges))
    p = load_model(store, model_id).model.failure_probability(features.X)
    index = features.X.index
    return pd.DataFrame(
        {
            "charge_id": index.get_level_values(0).astype(str),
            "stick_id": index.get_level_values(1).astype(str),
            "probability": p,
        }
    )


def with_threshold(store: Store, config: PlantConfig, model_id: int, threshold: float) -> int:
    """Register a copy of model ``model_id`` with another threshold; its id (a candidate)."""
    loaded = load_model(store, model_id)
    metrics = {**loaded.model.metrics, "threshold": threshold, "lockout_declined": False}
    model = replace(loaded.model, threshold=threshold, metrics=metrics)
    until = stored_utc(loaded.record["trained_until"])
    data = labeled_data(store, config, loaded.record["station"], until=until)
    return record_model(store, config, model, data).model_id


def with_metrics(store: Store, config: PlantConfig, model_id: int, metrics: dict) -> int:
    """Register a copy of model ``model_id`` with ``metrics`` added; its id (a candidate)."""
    loaded = load_model(store, model_id)
    model = replace(loaded.model, metrics={**loaded.model.metrics, **metrics})
    until = stored_utc(loaded.record["trained_until"])
    data = labeled_data(store, config, loaded.record["station"], until=until)
    return record_model(store, config, model, data).model_id
