"""Assemble the engineers' report from the plant database: registry, artifacts and flags.

Per station the active model (or, before any promotion, the newest candidate) supplies the
out-of-fold predicted-vs-counted shares per charge and the feature importances recorded at
training; the flags give the lock-out rate per hour of production; the registry gives the
comparison table of all models.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from qcllp.plant.config import PlantConfig
from qcllp.store import Store

from .artifacts import ArtifactError
from .registry import list_models, load_model
from .report import StationSection, write_report
from .scoring import flags_frame

__all__ = ["build_plant_report", "comparison_table"]

SHOWN_METRICS = (
    "bag_error",
    "calibration_error",
    "roc_auc",
    "threshold",
    "expected_saving_per_1000",
)


def comparison_table(models: list[dict]) -> pd.DataFrame:
    """One row per registered model: what it is and how it validated."""
    rows = []
    for m in models:
        row = {
            "id": m["id"],
            "station": m["station"],
            "method": m["method"],
            "target": m["target"],
            "status": m["status"],
            "charges": m["n_charges"],
            "sticks": m["n_sticks"],
        }
        row.update({k: (m["metrics"] or {}).get(k) for k in SHOWN_METRICS})
        rows.append(row)
    return pd.DataFrame(rows).set_index("id") if rows else pd.DataFrame()


def build_plant_report(store: Store, config: PlantConfig, path: str | Path) -> Path:
    """Write the report of every station to ``path``; returns the path."""
    models = list_models(store)
    flags = flags_frame(store)
    times = store.read_charge_times() if len(flags) else pd.Series(dtype="datetime64[ns, UTC]")
    sections = []
    for station in config.station_names:
        candidates = [m for m in models if m["station"] == station]
        chosen = next((m for m in candidates if m["status"] == "active"), None)
        chosen = chosen or (candidates[0] if candidates else None)
        if chosen is None:
            sections.append(
                StationSection(station, {"model": "none trained yet"}, notes=["No model."])
            )
            continue
        summary = {
            "model": f"{chosen['id']} ({chosen['method']}, {chosen['status']})",
            "target": chosen["target"],
            "trained on": f"{chosen['n_charges']} charges, {chosen['n_sticks']} sticks",
            **{k: v for k, v in (chosen["metrics"] or {}).items() if k in SHOWN_METRICS},
        }
        section = StationSection(station, summary)
        try:
            model = load_model(store, chosen["id"]).model
            section.per_charge = model.per_charge
            section.importances = model.importances
        except ArtifactError as exc:
            section.notes.append(f"Artifact not readable: {exc}")
        station_flags = flags[flags["station"] == station]
        if len(station_flags):
            when = times.reindex(station_flags["charge_id"]).to_numpy()
            hourly = (
                pd.Series(station_flags["flagged"].to_numpy(), index=pd.DatetimeIndex(when))
                .sort_index()
                .resample("h")
                .mean()
                .dropna()
            )
            section.lockout_over_time = hourly
        sections.append(section)
    return write_report(Path(path), config.name, sections, comparison_table(models))
