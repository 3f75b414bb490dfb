"""Registering a fitted station model: its artifact written to the models folder and its row
entered in the registry as a candidate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from qcllp.plant.config import PlantConfig
from qcllp.station.model import StationModel
from qcllp.station.registry import register_model, save_station_model
from qcllp.store import Store
from qcllp.training.labeled import LabeledData

__all__ = ["TrainingResult", "record_model"]


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


def record_model(
    store: Store,
    config: PlantConfig,
    model: StationModel,
    data: LabeledData,
    *,
    also: Callable[[Any, int], None] | None = None,
) -> TrainingResult:
    """Write the model's artifact and register it as a candidate (``also``: as for
    :func:`qcllp.station.registry.register_model`)."""
    created = datetime.now().astimezone()
    stem = f"{model.station}-{model.method}-{created:%Y%m%dT%H%M%S%f}"
    path, sha = save_station_model(model, store.models_dir or config.models_dir, stem)
    model_id = register_model(
        store,
        also=also,
        station=model.station,
        method=model.method,
        target=model.target,
        params=_jsonable(model.params),
        metrics=_jsonable(model.metrics),
        features=list(model.features),
        artifact_path=path.name,  # relative to the models folder
        sha256=sha,
        trained_from=model.trained_from,
        trained_until=model.trained_until,
        n_charges=data.n_charges,
        n_sticks=len(data.features.X),
    )
    return TrainingResult(
        model_id,
        model.station,
        model.method,
        model.target,
        dict(model.params),
        dict(model.metrics),
        data.n_charges,
        len(data.features.X),
        path,
        model.per_charge,
    )


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """The values as JSON stores them: numpy scalars as Python ones, NaN and infinities as
    ``None``."""
    out = {}
    for key, value in values.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not np.isfinite(value):
            value = None
        out[key] = value
    return out
