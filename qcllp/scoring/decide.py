"""Deciding a station's due sticks: their readings read, their features built, the model asked.

The part of a scoring step (:mod:`.step`, step 2) that needs the readings and the model: the
due sticks' readings of the stations up to this one (:func:`read_stick_readings`, in
proportion to the charges asked for), the sensors of this station each stick still lacks
(:func:`read_due` postpones a stick that may still get them, and decides one that cannot
as ``unscorable`` with the sensors named), and the model's ``lock_out`` or ``pass`` on the
features built exactly as at training time -- for the active model and a shadow model alike,
from one read of the readings (:func:`decide_due`). Runs inside the step's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection

from qcllp.features import READING_COLUMNS, build_station_features
from qcllp.plant.config import PlantConfig, Station
from qcllp.scoring.pending import postpone
from qcllp.station.registry import LoadedModel
from qcllp.store import IN_CHUNK, Reading, Series, charge_time_bounds, placeholders, us_to_utc

__all__ = ["DueSticks", "decide_due", "read_due", "read_stick_readings"]


def read_stick_readings(
    conn: Connection, sticks: pd.DataFrame, stations: list[str]
) -> pd.DataFrame:
    """Long readings (as ``Store.read_readings``) of the given sticks at the given stations.

    Series are looked up by ``station`` and ``charge_id`` -- the unique index's prefix, so the
    lookup costs in proportion to the charges asked for, not to the stored history -- and
    narrowed to the sticks in pandas; their readings are bounded by the charges' time span
    (:func:`qcllp.store.charge_time_bounds`), so of a partitioned ``readings`` only the
    months of these charges are probed, however many years are stored. Both queries run on
    the driver's cursor of the step's transaction and return plain tuples: SQLAlchemy's row
    objects cost more than the database here (``benchmarks/bench_scorer.py``).
    """
    wanted = pd.MultiIndex.from_frame(sticks[["charge_id", "stick_id"]].astype(str))
    charges = sorted(set(wanted.get_level_values(0)))
    names = ["id", "charge_id", "stick_id", "station", "sensor"]
    in_stations = placeholders(conn, len(stations))
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        found = []
        for start in range(0, len(charges), IN_CHUNK):
            part = charges[start : start + IN_CHUNK]
            in_charges = placeholders(conn, len(part))
            cursor.execute(
                f"SELECT {', '.join(names)} FROM {Series.__tablename__} "
                f"WHERE station IN ({in_stations}) AND charge_id IN ({in_charges})",
                [*stations, *part],
            )
            found += cursor.fetchall()
        series = pd.DataFrame.from_records(found, columns=names)
        keep = pd.MultiIndex.from_frame(series[["charge_id", "stick_id"]].astype(str)).isin(wanted)
        series = series.loc[keep].reset_index(drop=True)
        if series.empty:
            return pd.DataFrame(columns=list(READING_COLUMNS))
        bounds = charge_time_bounds(conn, charges)
        mark = placeholders(conn, 1)
        within = "" if bounds is None else f" AND ts_us BETWEEN {mark} AND {mark}"
        ids = series["id"].astype("int64").tolist()
        parts = []
        for start in range(0, len(ids), IN_CHUNK):
            chunk = ids[start : start + IN_CHUNK]
            cursor.execute(
                f"SELECT series_id, ts_us, value FROM {Reading.__tablename__} "
                f"WHERE series_id IN ({placeholders(conn, len(chunk))}){within}",
                [*chunk, *(bounds or ())],
            )
            parts.append(np.array(cursor.fetchall(), dtype=np.float64).reshape(-1, 3))
    finally:
        cursor.close()
    values = np.concatenate(parts)  # ids and epoch microseconds (< 2**53) are exact here
    position = pd.Index(series["id"].astype("int64")).get_indexer(values[:, 0].astype(np.int64))
    frame = series.drop(columns="id").take(position).reset_index(drop=True).astype(str)
    frame.insert(3, "timestamp", us_to_utc(values[:, 1].astype(np.int64)))
    frame["value"] = values[:, 2]
    return frame


@dataclass(frozen=True)
class DueSticks:
    """The due sticks that completed the station, ready for a model: ``base`` (one row per
    stick: ``charge_id, stick_id, probability, decision, reason, arrived_at``; ``unscorable``
    with the missing sensors named until a model decides the ``scorable`` ones) and the
    sticks' ``readings`` of the stations up to this one. Read once, decided by the active and
    the shadow model alike."""

    base: pd.DataFrame
    scorable: np.ndarray
    readings: pd.DataFrame


def read_due(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    due: pd.DataFrame,
    now: datetime,
    assume_complete: bool,
) -> DueSticks:
    """The due sticks that have completed, with their readings; sticks still waiting for a
    missing sensor (before the timeout) get a later ``due_at`` and are left out."""
    stations = [s.name for s in config.stations_up_to(st.name)]
    readings = read_stick_readings(conn, due, stations)
    missing = _missing_sensors(readings, st, due)
    first = pd.to_datetime(due["first_arrived_at"], utc=True)
    timed_out = (pd.Timestamp(now) - first).dt.total_seconds().to_numpy() >= st.timeout_s
    complete = due["later_seen"].to_numpy(bool) | timed_out | assume_complete
    has_all = np.array([not m for m in missing], dtype=bool)
    waiting = ~has_all & ~complete
    if waiting.any():
        postpone(conn, st, due.loc[waiting], first[waiting])
    decided = due.loc[~waiting].reset_index(drop=True)
    base = pd.DataFrame(
        {
            "charge_id": decided["charge_id"].astype(str),
            "stick_id": decided["stick_id"].astype(str),
            "probability": np.nan,
            "decision": "unscorable",
            "reason": [
                f"no reading from sensor(s) {', '.join(m)} at {st.name}" if m else None
                for m, w in zip(missing, waiting, strict=True)
                if not w
            ],
            "arrived_at": pd.to_datetime(decided["arrived_at"], utc=True),
        }
    )
    return DueSticks(base, has_all[~waiting], readings)


def decide_due(
    config: PlantConfig,
    st: Station,
    due: DueSticks,
    models: list[LoadedModel | None],
) -> list[pd.DataFrame | None]:
    """Each model's decisions (``None`` for no model) on the same completed sticks, in the
    order of ``due.base``. The features are built once per distinct (feature list,
    imputation): an active and a shadow model trained alike share them."""
    built: list[tuple[tuple, pd.DataFrame]] = []
    out: list[pd.DataFrame | None] = []
    for loaded in models:
        if loaded is None:
            out.append(None)
            continue
        model = loaded.model
        key = (tuple(model.features), tuple(sorted(dict(model.imputation).items())))
        X = next((x for k, x in built if k == key), None)
        if X is None and due.scorable.any():
            X = build_station_features(due.readings, config, st.name, imputation=model.imputation).X
            built.append((key, X))
        out.append(_model_decisions(due, loaded, X))
    return out


def _model_decisions(due: DueSticks, loaded: LoadedModel, X: pd.DataFrame | None) -> pd.DataFrame:
    """One model's ``lock_out`` or ``pass`` (``unscorable`` without a probability) for the
    scorable sticks of ``due`` on their features ``X``."""
    out = due.base.copy()
    scorable = due.scorable
    if X is None or not scorable.any():
        return out
    keys_ok = pd.MultiIndex.from_frame(out.loc[scorable, ["charge_id", "stick_id"]])
    decisions = loaded.model.decide(X.reindex(keys_ok))
    p = decisions["probability"].to_numpy(dtype=float)
    finite = np.isfinite(p)
    out.loc[scorable, "probability"] = p
    out.loc[scorable, "decision"] = np.where(
        ~finite, "unscorable", np.where(decisions["flagged"].to_numpy(bool), "lock_out", "pass")
    )
    out.loc[scorable, "reason"] = np.where(finite, None, "the model gave no probability")
    return out


def _missing_sensors(readings: pd.DataFrame, st: Station, due: pd.DataFrame) -> list[list[str]]:
    """Per due stick (in order), the sensors of station ``st`` without any reading."""
    index = pd.MultiIndex.from_frame(due[["charge_id", "stick_id"]].astype(str))
    here = readings[readings["station"] == st.name]
    names = list(st.sensor_names)
    stick = index.get_indexer(pd.MultiIndex.from_frame(here[["charge_id", "stick_id"]]))
    sensor = pd.Index(names).get_indexer(here["sensor"])
    ok = (stick >= 0) & (sensor >= 0)
    seen = np.zeros((len(index), len(names)), dtype=bool)
    seen[stick[ok], sensor[ok]] = True
    complete = seen.all(axis=1)
    return [
        [] if done else [n for n, has in zip(names, row, strict=True) if not has]
        for done, row in zip(complete, seen, strict=True)
    ]
