"""A copy of a trained model that locks out every stick, for the lock-out guard tests."""

from __future__ import annotations

from dataclasses import replace

from qcllp.station.registry import load_model, promote
from qcllp.training.train import labeled_data, record_model


def promote_locking_all(
    store,
    config,
    station: str,
    model_id: int,
    *,
    rate_bound: float | None = None,
    excess_bound: float | None = None,
) -> int:
    """Register and promote a copy of model ``model_id`` with threshold 0 (its record says so
    too) and the given lock-out guard bounds (``None``: that share rule does not apply); its
    id."""
    model = load_model(store, model_id).model
    eager = replace(
        model,
        threshold=0.0,
        metrics={**model.metrics, "threshold": 0.0},
        lockout_rate_bound=rate_bound,
        lockout_excess_bound=excess_bound,
    )
    eager_id = record_model(store, config, eager, labeled_data(store, config, station)).model_id
    promote(store, eager_id)
    return eager_id
