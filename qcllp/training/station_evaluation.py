"""``qcllp evaluate``: what ``qcllp train`` would produce at a station, on held-out charges.

Reads the labeled charges of the station from the plant database and, optionally, a per-stick
truth file (simulator output or hand-inspected sticks: ``charge_id, stick_id, defect`` with
``ok`` for a good stick). The charges are split into folds that never split a charge; for each
fold the *whole* training of :func:`.train.fit_station_model` runs on the other charges -- the
bag-aware grid search, the per-defect-type models, the count recalibration and the lock-out
threshold, exactly as ``train`` would choose them for the target asked for -- and the model
decides the held-out charges' sticks. So the figures are of the procedure a plant would deploy,
not of a learner with default parameters at 0.5.

With truth, the target's truth is used: a defect type's sticks for a defect-type target, any
defect for ``defective`` and ``multiclass`` (their lock-out decision is "fails or not"); the
stick metrics then include the ROC AUC, the lock-out precision/recall and the realized saving
per 1,000 sticks at the thresholds train chose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from qcllp.learn import BagKFold
from qcllp.plant.config import PlantConfig
from qcllp.station.realized import realized_saving_per_1000
from qcllp.store import Store
from qcllp.training.evaluate import Evaluation, score_probabilities
from qcllp.training.train import (
    TrainingError,
    fit_station_model,
    labeled_data,
    station_costs,
    training_plan,
)

__all__ = ["StationEvaluation", "evaluate_station", "read_stick_truth", "target_truth"]

TRUTH_COLUMNS = ("charge_id", "stick_id", "defect")


@dataclass(frozen=True)
class StationEvaluation:
    """What ``evaluate_station`` measured (``thresholds``: the one chosen in each fold)."""

    station: str
    method: str
    target: str
    n_charges: int
    n_sticks: int
    evaluation: Evaluation
    thresholds: list[float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "station": self.station,
            "method": self.method,
            "target": self.target,
            "fold_thresholds": self.thresholds,
            **self.evaluation.metrics,
            "per_charge": self.evaluation.per_charge.reset_index().to_dict(orient="records"),
        }


def read_stick_truth(path: str | Path) -> pd.Series:
    """Per-stick defect (a defect type or ``ok``) from a CSV; index (charge_id, stick_id)."""
    try:
        frame = pd.read_csv(path, dtype={"charge_id": str, "stick_id": str, "defect": str})
    except (OSError, ValueError) as exc:  # missing, unreadable, not CSV
        raise TrainingError(f"{path}: cannot read the truth file: {exc}") from exc
    missing = [c for c in TRUTH_COLUMNS if c not in frame.columns]
    if missing:
        raise TrainingError(f"{path}: truth file lacks column(s) {', '.join(missing)}")
    return frame.set_index(["charge_id", "stick_id"])["defect"]


def target_truth(defect: pd.Series, target: str) -> pd.Series:
    """1.0 where the stick counts as positive for ``target``, 0.0 where not, NaN unknown."""
    positive = defect == target if target not in ("defective", "multiclass") else defect != "ok"
    return positive.astype(float).where(defect.notna())


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
    progress: Callable[[str], None] | None = None,
) -> StationEvaluation:
    """Train as ``train`` would on all but one fold of charges, decide the held-out fold."""
    say = progress or (lambda _msg: None)
    plan = training_plan(
        config,
        station,
        method_name=method_name,
        target=target,
        random_state=random_state,
        n_splits=folds,
    )
    defect = None if truth_path is None else read_stick_truth(truth_path)  # fail before work
    data = labeled_data(store, config, station, target=target, random_state=plan.seed)
    if data.subsample is not None and data.subsample.applied:
        say(f"{station}: {data.subsample.describe()}")
    X, bags = data.features.X, data.bags
    costs = station_costs(config, station)
    probability = np.full(len(X), np.nan)
    threshold = np.full(len(X), np.nan)
    chosen = []
    outer = BagKFold(plan.folds_for(data.n_charges), shuffle=True, random_state=plan.seed)
    for k, (train, test) in enumerate(outer.split(X, groups=bags), start=1):
        say(f"{station}: fold {k}: training on {len(pd.unique(bags[train]))} charges")
        fit = fit_station_model(plan, data.subset(pd.unique(bags[train])), costs)
        decided = fit.model.decide(X.iloc[test])
        probability[test] = decided["probability"].to_numpy()
        threshold[test] = fit.model.threshold
        chosen.append(float(fit.model.threshold))
    truth = None
    if defect is not None:
        truth = target_truth(defect.reindex(X.index), target).to_numpy(dtype=np.float64)
    evaluation = score_probabilities(
        probability, bags, data.failing_shares, truth=truth, threshold=threshold
    )
    if truth is not None and not np.isnan(truth).all():
        known = ~np.isnan(truth)
        evaluation.metrics["realized_saving_per_1000"] = realized_saving_per_1000(
            probability[known], truth[known] == 1, threshold[known], costs
        )
    return StationEvaluation(
        station, plan.method.name, target, data.n_charges, len(X), evaluation, chosen
    )
