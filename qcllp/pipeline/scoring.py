"""Scoring sticks at a station with its active model and writing lock-out flags, once each.

A stick is scored at a station when its readings there are in the database; its flag row
(station, charge, stick) is unique, and flags are inserted with "on conflict do nothing", so
two scorers racing, a rerun after a crash or a repeated poll never flag a stick twice. The
features are built exactly as at training time: same stations, same imputation values (recorded
in the artifact), same column order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite

from qcllp.features import build_station_features, station_features
from qcllp.ingest.measurements import read_readings
from qcllp.plant.config import PlantConfig
from qcllp.store import Flag, Store

from .registry import LoadedModel, load_model

__all__ = ["ScoreResult", "flags_frame", "score_file", "score_readings", "score_station"]


@dataclass(frozen=True)
class ScoreResult:
    """Scored sticks (``charge_id, stick_id, probability, flagged``) and what was written."""

    station: str
    model_id: int
    threshold: float
    scores: pd.DataFrame
    flags_written: int

    def as_dict(self) -> dict:
        return {
            "station": self.station,
            "model_id": self.model_id,
            "threshold": self.threshold,
            "sticks_scored": int(len(self.scores)),
            "sticks_flagged": int(self.scores["flagged"].sum()) if len(self.scores) else 0,
            "flags_written": self.flags_written,
        }


def score_readings(
    store: Store, config: PlantConfig, station: str, readings: pd.DataFrame
) -> ScoreResult:
    """Score the sticks of a readings frame (long format) with the active model; no flags."""
    loaded = load_model(store, station=station)
    model = loaded.model
    features = build_station_features(readings, config, station, imputation=model.imputation)
    return ScoreResult(station, loaded.id, model.threshold, model.decide(features.X), 0)


def score_file(store: Store, config: PlantConfig, station: str, path: str | Path) -> ScoreResult:
    """Score the sticks of a measurement file (checked as ingest checks it); no flags."""
    return score_readings(store, config, station, read_readings(config, path))


def score_station(
    store: Store, config: PlantConfig, station: str, *, now: datetime | None = None
) -> ScoreResult:
    """Score the sticks at ``station`` that are still on the line and not yet flagged there;
    write their flags."""
    loaded = load_model(store, station=station)
    model = loaded.model
    pending = _unscored_sticks(store, station)
    if pending.empty:
        empty = pd.DataFrame(columns=["charge_id", "stick_id", "probability", "flagged"])
        return ScoreResult(station, loaded.id, model.threshold, empty, 0)
    features = station_features(
        store,
        config,
        station,
        charge_ids=sorted(pending["charge_id"].unique()),
        imputation=model.imputation,
    )
    wanted = pd.MultiIndex.from_frame(pending[["charge_id", "stick_id"]])
    scores = model.decide(features.X.loc[features.X.index.isin(wanted)])
    written = _write_flags(store, station, loaded, scores, now or datetime.now(UTC))
    return ScoreResult(station, loaded.id, model.threshold, scores, written)


def _unscored_sticks(store: Store, station: str) -> pd.DataFrame:
    """Sticks with readings at ``station``, no flag there yet, and still on the line.

    A charge with final-QC counts has left the line: there is nothing left to lock out.
    """
    finished = set(store.read_defect_counts().index)
    on_line = sorted(set(store.read_sticks()["charge_id"]) - finished)
    if not on_line:
        return pd.DataFrame(columns=["charge_id", "stick_id"])
    readings = store.read_readings(stations=[station], charge_ids=on_line)
    sticks = readings[["charge_id", "stick_id"]].drop_duplicates()
    with store.session() as session:
        done = session.execute(
            select(Flag.charge_id, Flag.stick_id).where(Flag.station == station)
        ).all()
    if not done:
        return sticks.reset_index(drop=True)
    flagged = pd.MultiIndex.from_tuples(done, names=["charge_id", "stick_id"])
    keep = ~pd.MultiIndex.from_frame(sticks).isin(flagged)
    return sticks.loc[keep].reset_index(drop=True)


def _write_flags(
    store: Store, station: str, loaded: LoadedModel, scores: pd.DataFrame, now: datetime
) -> int:
    rows = [
        {
            "station": station,
            "charge_id": str(c),
            "stick_id": str(s),
            "model_id": loaded.id,
            "probability": float(p),
            "flagged": bool(f),
            "threshold": float(loaded.model.threshold),
            "scored_at": now,
        }
        for c, s, p, f in zip(
            scores["charge_id"],
            scores["stick_id"],
            scores["probability"],
            scores["flagged"],
            strict=True,
        )
    ]
    if not rows:
        return 0
    dialect = postgresql if store.dialect == "postgresql" else sqlite
    statement = dialect.insert(Flag).on_conflict_do_nothing(
        index_elements=["station", "charge_id", "stick_id"]
    )
    count = select(func.count()).select_from(Flag).where(Flag.station == station)
    with store.session() as session:
        before = session.scalar(count)
        session.execute(statement, rows)
        return int(session.scalar(count) - before)


def flags_frame(store: Store, station: str | None = None) -> pd.DataFrame:
    """Stored flags (for reports): station, charge, stick, probability, flagged, scored_at."""
    query = select(
        Flag.station,
        Flag.charge_id,
        Flag.stick_id,
        Flag.model_id,
        Flag.probability,
        Flag.flagged,
        Flag.threshold,
        Flag.scored_at,
    )
    if station is not None:
        query = query.where(Flag.station == station)
    with store.session() as session:
        rows = session.execute(query).all()
    columns = [
        "station",
        "charge_id",
        "stick_id",
        "model_id",
        "probability",
        "flagged",
        "threshold",
        "scored_at",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    frame["flagged"] = frame["flagged"].astype(bool)
    return frame.astype({"probability": np.float64})
