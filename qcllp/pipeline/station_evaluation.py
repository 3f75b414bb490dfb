"""``qcllp evaluate``: charge-grouped cross-validation of a method at a station.

Reads the labeled charges of the station from the plant database, optionally a per-stick truth
file (simulator output or hand-inspected sticks: ``charge_id, stick_id, defect`` with ``ok``
for a good stick), and cross-validates the method's estimator with its default parameters,
no charge split (:func:`.evaluate.cross_validate_charges`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from qcllp.plant.config import PlantConfig
from qcllp.store import Store

from .evaluate import Evaluation, cross_validate_charges
from .station_model import FailureView
from .train import TrainingError, labeled_data, training_plan

__all__ = ["StationEvaluation", "evaluate_station", "read_stick_truth"]

TRUTH_COLUMNS = ("charge_id", "stick_id", "defect")


@dataclass(frozen=True)
class StationEvaluation:
    """What ``evaluate_station`` measured."""

    station: str
    method: str
    n_charges: int
    n_sticks: int
    evaluation: Evaluation

    def as_dict(self) -> dict[str, Any]:
        return {
            "station": self.station,
            "method": self.method,
            **self.evaluation.metrics,
            "per_charge": self.evaluation.per_charge.reset_index().to_dict(orient="records"),
        }


def read_stick_truth(path: str | Path) -> pd.Series:
    """Per-stick truth from a CSV: ``True`` where the stick failed; index (charge, stick)."""
    frame = pd.read_csv(path, dtype={"charge_id": str, "stick_id": str})
    missing = [c for c in TRUTH_COLUMNS if c not in frame.columns]
    if missing:
        raise TrainingError(f"{path}: truth file lacks column(s) {', '.join(missing)}")
    return frame.set_index(["charge_id", "stick_id"])["defect"] != "ok"


def evaluate_station(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    method_name: str | None = None,
    target: str = "defective",
    folds: int = 5,
    truth_path: str | Path | None = None,
    random_state: int = 0,
) -> StationEvaluation:
    """Cross-validate a method at ``station`` on held-out charges (and sticks, with truth)."""
    plan = training_plan(
        config,
        station,
        method_name=method_name,
        target=target,
        random_state=random_state,
        n_splits=folds,
    )
    data = labeled_data(store, config, station, target=target)
    X = data.features.X
    stick_truth = None
    if truth_path is not None:
        failing = read_stick_truth(truth_path)
        stick_truth = failing.reindex(X.index).astype(float).to_numpy(dtype=np.float64)
    evaluation = cross_validate_charges(
        lambda: FailureView(plan.method.estimator(plan.seed)),
        X,
        data.bags,
        data.failing_shares,
        n_splits=plan.folds_for(data.n_charges),
        truth=stick_truth,
        random_state=plan.seed,
    )
    return StationEvaluation(station, plan.method.name, data.n_charges, len(X), evaluation)
