"""Scoring sticks as they complete a station: one flag per stick, exactly once.

This is the one scoring path: ``qcllp score`` runs :func:`score_station` (steps until nothing
is left), the station service (:mod:`qcllp.service.scorer`) runs :func:`score_step` on its
schedule. A step is one transaction under the station's lock:

1. **take in** the ingestion batches committed since the checkpoint (``commit_seq``, at most
   :data:`MAX_BATCHES_PER_STEP`): the sticks they brought to this station enter
   ``scorer_pending`` (arrival time = the batch's commit), sticks they brought to a later
   station are marked ``later_seen``. Only ``batch_sticks`` rows of those batches are read,
   so a step costs in proportion to new work, never to the history. Sticks of charges that
   final QC has already reported have left the line and are not taken in.
2. **decide** the pending sticks that have completed the station (the plant config's rule,
   :class:`qcllp.plant.config.Station`), oldest first, at most ``max_sticks``: their readings
   of the stations up to this one are read, the features built exactly as at training time
   (same columns, same imputation values, from the model), and the model decides ``lock_out``
   or ``pass``. A stick that lacks a sensor of this station is ``unscorable`` with the sensor
   named -- never imputed into a decision -- once the rule says it has completed.
   The lock-out guard (:mod:`qcllp.scoring.share_guard`) then turns lock-outs into passes, with the
   reason, once the model locks out far more sticks than it did in training, or once final
   QC's counts, taken in with the batches, show that it over-predicts failures on this plant
   (:mod:`.count_guard`, checked before deciding, so a trip holds this step's lock-outs).
3. **write** the flags (``INSERT ... ON CONFLICT DO NOTHING`` on the unique (station, charge,
   stick)), delete the decided sticks from ``scorer_pending``, append every flag of the
   station above the sink's cursor to the station's sink file for the line's gateway (the
   step's own and any written while no sink was open), and move the checkpoint (batch
   ``commit_seq``, the sink's byte offset and cursor) -- all committed together.

Exactly once across crashes: nothing of a step is visible before its commit. The sink file is
written and fsynced before the commit; a step that dies after writing but before committing
left bytes beyond the committed offset, and the next step, under the lock, cuts the file back
to that offset before it appends. The sink is the one the station's checkpoint names, claimed
(path and starting offset committed) before its first byte, so this holds for the first step
into a new sink too (:mod:`.flag_sink`: claims, ownership, moving a sink).

Two scorers for one station (started by mistake): on SQLite
a step runs in ``BEGIN IMMEDIATE``, the database's single writer lock, so steps serialize; on
PostgreSQL a step first takes ``pg_try_advisory_xact_lock`` on the station's key and, if
another scorer holds it, does nothing (the caller reports "standby"). An advisory lock rather
than ``SELECT ... FOR UPDATE SKIP LOCKED``: it also covers the very first step, when no
checkpoint row exists yet to be locked, and it never blocks the standby's thread or the
ingesters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Connection, func, select

from qcllp.features import READING_COLUMNS, build_station_features
from qcllp.ingest.measurements import read_readings
from qcllp.plant.config import PlantConfig, Station
from qcllp.scoring.count_guard import check_counts
from qcllp.scoring.flag_sink import FlagSink, SinkError, claim_sink, flag_line
from qcllp.scoring.pending import (
    MAX_BATCHES_PER_STEP,
    Intake,
    backlog,
    due_sticks,
    forget_pending,
    postpone,
    take_in,
)
from qcllp.scoring.share_guard import GuardState, apply_guard, guard_state
from qcllp.station.registry import LoadedModel, load_model
from qcllp.store import (
    IN_CHUNK,
    Alarm,
    Flag,
    Reading,
    ScorerCheckpoint,
    Series,
    Store,
    charge_time_bounds,
    dialect_insert,
    placeholders,
    rows_frame,
    us_to_utc,
)
from qcllp.store.leases import scorer_lock_key

__all__ = [
    "DECISIONS",
    "MAX_BATCHES_PER_STEP",
    "FlagSink",
    "ScoreResult",
    "SinkError",
    "StepResult",
    "flags_frame",
    "insert_alarm",
    "record_alarm",
    "score_file",
    "score_readings",
    "score_station",
    "score_step",
    "station_lock",
]

DECISIONS = ("lock_out", "pass", "unscorable")
SCORE_COLUMNS = ["charge_id", "stick_id", "probability", "decision", "reason", "arrived_at"]


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class ScoreResult:
    """What a scoring run decided (``scores``: one row per stick) and what it wrote."""

    station: str
    model_id: int | None
    threshold: float | None
    scores: pd.DataFrame
    flags_written: int
    sink: str | None = None  # the station's sink file (None: it has none)
    sink_lines: int = 0  # flags appended to it

    @property
    def counts(self) -> dict[str, int]:
        """Sticks per decision in ``scores``."""
        decided = self.scores["decision"]
        return {d: int((decided == d).sum()) for d in DECISIONS}

    def as_dict(self) -> dict:
        counts = self.counts
        return {
            "station": self.station,
            "model_id": self.model_id,
            "threshold": self.threshold,
            "sticks_decided": int(len(self.scores)),
            "locked_out": counts["lock_out"],
            "passed": counts["pass"],
            "unscorable": counts["unscorable"],
            "flags_written": self.flags_written,
            "sink": self.sink,
            "sink_lines": self.sink_lines,
        }


@dataclass(frozen=True)
class StepResult(ScoreResult):
    """One step of the station scorer (:func:`score_step`)."""

    standby: bool = False
    batches_taken: int = 0
    pending: int = 0
    lag_s: float = 0.0
    latencies_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    more: bool = False  # more work is due right now (the step hit a bound)
    alarms: tuple[tuple[str, str], ...] = ()  # (kind, message) raised and stored by the step
    guard: GuardState | None = None  # the active model's lock-out guard after the step


# ----------------------------------------------------------------------------- locking
@contextmanager
def station_lock(store: Store, station: str) -> Iterator[Connection | None]:
    """One transaction holding the station's scorer lock; yields ``None`` when another
    scorer holds it (PostgreSQL; SQLite waits for its writer lock instead)."""
    if store.dialect == "sqlite":
        with store.write() as conn:
            yield conn
        return
    with store.engine.connect() as conn, conn.begin():
        key = scorer_lock_key(station)
        got = conn.execute(select(func.pg_try_advisory_xact_lock(key))).scalar()
        yield conn if got else None


def record_alarm(store: Store, source: str, station: str | None, kind: str, message: str) -> None:
    """Store an alarm for operators (``qcllp status`` lists them), in its own transaction."""
    with store.engine.begin() as conn:
        insert_alarm(conn, source, station, kind, message)


def insert_alarm(
    conn: Connection, source: str, station: str | None, kind: str, message: str
) -> None:
    """An alarm inside the caller's transaction (it exists exactly when that commits)."""
    conn.execute(
        Alarm.__table__.insert().values(
            source=source,
            station=station,
            kind=kind,
            message=message,
            created_at=datetime.now(UTC),
        )
    )


# ----------------------------------------------------------------------------- one step
@dataclass(frozen=True)
class _Decided:
    """What a step decided and wrote (the part of :func:`score_step` that needs a model)."""

    scores: pd.DataFrame
    written: int
    alarms: list[tuple[str, str]]
    due: int


def score_step(
    store: Store,
    config: PlantConfig,
    station: str,
    model: LoadedModel | None,
    *,
    now: datetime | None = None,
    assume_complete: bool = False,
    sink: FlagSink | str | Path | None = None,
    max_sticks: int | None = None,
) -> StepResult:
    """Take in new batches and decide the sticks that completed ``station`` (module docstring).

    ``model`` ``None``: sticks are taken in but none is decided (no model is active yet).
    ``assume_complete``: every pending stick counts as complete (``qcllp score``: what has
    been ingested is all there will be); the service leaves it ``False``. ``sink``: the
    station's sink, claimed first (:func:`claim_sink`: :class:`SinkError` if the station has
    another or another station has it); without it the step writes to the sink the
    checkpoint names, if any -- the flags of every step reach the station's sink.
    """
    if sink is not None:
        claim_sink(store, station, sink.path if isinstance(sink, FlagSink) else sink)
    now = now or datetime.now(UTC)
    limit = max_sticks or config.scorer.max_batch_sticks
    with ExitStack() as files, station_lock(store, station) as conn:
        if conn is None:
            return _empty_step(station, model, standby=True)
        checkpoint = _checkpoint(conn, station)
        out = None if checkpoint["sink_path"] is None else FlagSink(checkpoint["sink_path"])
        offset, sink_problem = checkpoint["sink_offset"], None
        if out is not None:
            files.enter_context(out.lock())  # held until after the commit
            offset, sink_problem = out.prepare(checkpoint["sink_offset"])
        st = config.station(station)
        intake = take_in(conn, config, st, checkpoint["commit_seq"], 4 * limit)
        done = _decide_and_write(conn, config, st, model, intake, now, assume_complete, limit)
        guard = None if model is None else guard_state(conn, station, model.id)
        # twice the step's bound: a sink that fell behind catches up while the line runs
        delivery = _deliver(conn, station, out, checkpoint["sink_flag_id"], offset, 2 * limit)
        _save_checkpoint(conn, station, intake.seq, delivery, model)
        pending, lag = backlog(conn, station, intake.seq, now)
    if sink_problem:
        record_alarm(store, "scorer", station, "sink_truncated", sink_problem)
    result = _step_result(station, model, done, intake, now, limit, delivery, guard)
    return replace(result, pending=pending, lag_s=lag)


def _decide_and_write(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    model: LoadedModel | None,
    intake: Intake,
    now: datetime,
    assume_complete: bool,
    limit: int,
) -> _Decided:
    """Check final QC's counts, decide the due sticks, guard the lock-outs, insert the flags,
    forget the decided sticks and store the step's alarms (all in the step's transaction)."""
    station = st.name
    alarms = [
        ("lockout_suspended", message)
        for message in check_counts(
            conn,
            station,
            list(config.station_names),
            intake.count_batches,
            config.scorer.count_guard_interval,
            now,
        )
    ]
    due = due_sticks(conn, station, now, limit, assume_complete)
    scores = pd.DataFrame(columns=SCORE_COLUMNS)
    written = 0
    if model is not None and len(due):
        scores = _decide(conn, config, st, model, due, now, assume_complete)
        scores, tripped = apply_guard(
            conn,
            station,
            model.id,
            model.model.lockout_rate_bound,
            config.scorer.guard_min_sticks,
            scores,
            now,
            model.model.lockout_excess_bound,
        )
        if tripped:
            alarms.append(("lockout_suspended", tripped))
        written = len(_write_flags(conn, station, model, scores, now))
        forget_pending(conn, station, scores)
    for kind, message in alarms:
        insert_alarm(conn, "scorer", station, kind, message)
    return _Decided(scores, written, alarms, 0 if model is None else len(due))


@dataclass(frozen=True)
class _Delivery:
    """The sink after a step: its file (``None``: the station has none), committed offset,
    cursor (highest flag id in it), lines appended, and whether flags are still waiting."""

    path: str | None
    offset: int
    flag_id: int
    lines: int = 0
    more: bool = False


_SINK_COLUMNS = (
    "id",
    "station",
    "charge_id",
    "stick_id",
    "decision",
    "probability",
    "threshold",
    "model_id",
    "reason",
    "arrived_at",
    "scored_at",
)


def _deliver(
    conn: Connection,
    station: str,
    sink: FlagSink | None,
    cursor: int,
    offset: int,
    bound: int,
) -> _Delivery:
    """Append the station's flags above the cursor (at most ``bound``, oldest first) -- the
    step's own and any a run without the sink open wrote -- and fsync them; the new offset
    and cursor are committed with the step. Without a sink the cursor stays where it is."""
    if sink is None:
        return _Delivery(None, offset, cursor)
    f = Flag.__table__
    rows = conn.execute(
        select(*(f.c[c] for c in _SINK_COLUMNS))
        .where(f.c.station == station, f.c.id > cursor)
        .order_by(f.c.id)
        .limit(bound + 1)
    ).all()
    more = len(rows) > bound
    rows = rows[:bound]
    if not rows:
        return _Delivery(str(sink.path), offset, cursor)
    offset = sink.append([flag_line(row._mapping) for row in rows])
    return _Delivery(str(sink.path), offset, int(rows[-1].id), len(rows), more)


def _step_result(
    station: str,
    model: LoadedModel | None,
    done: _Decided,
    intake: Intake,
    now: datetime,
    limit: int,
    delivery: _Delivery,
    guard: GuardState | None,
) -> StepResult:
    scores = done.scores
    arrived = pd.to_datetime(scores["arrived_at"], utc=True) if len(scores) else None
    latencies = (
        (pd.Timestamp(now) - arrived).dt.total_seconds().to_numpy()
        if arrived is not None
        else np.empty(0)
    )
    return StepResult(
        station=station,
        model_id=None if model is None else model.id,
        threshold=None if model is None else model.model.threshold,
        scores=scores.reset_index(drop=True),
        flags_written=done.written,
        sink=delivery.path,
        sink_lines=delivery.lines,
        batches_taken=intake.taken,
        latencies_s=latencies,
        more=intake.waiting or done.due >= limit or delivery.more,
        alarms=tuple(done.alarms),
        guard=guard,
    )


def _empty_step(station: str, model: LoadedModel | None, *, standby: bool) -> StepResult:
    return StepResult(
        station=station,
        model_id=None if model is None else model.id,
        threshold=None if model is None else model.model.threshold,
        scores=pd.DataFrame(columns=SCORE_COLUMNS),
        flags_written=0,
        standby=standby,
    )


def _checkpoint(conn: Connection, station: str) -> dict:
    t = ScorerCheckpoint.__table__
    row = conn.execute(
        select(t.c.commit_seq, t.c.sink_path, t.c.sink_offset, t.c.sink_flag_id).where(
            t.c.station == station
        )
    ).first()
    if row is None:
        return {"commit_seq": 0, "sink_path": None, "sink_offset": 0, "sink_flag_id": 0}
    return {
        "commit_seq": int(row.commit_seq),
        "sink_path": row.sink_path,
        "sink_offset": int(row.sink_offset),
        "sink_flag_id": int(row.sink_flag_id),
    }


def _save_checkpoint(
    conn: Connection,
    station: str,
    seq: int,
    delivery: _Delivery,
    model: LoadedModel | None,
) -> None:
    """Move the checkpoint with the step. The sink's path is never written here: only a
    claim (:func:`claim_sink`) names it, so a run without a sink cannot drop the station's."""
    values = {
        "station": station,
        "commit_seq": seq,
        "sink_offset": delivery.offset,
        "sink_flag_id": delivery.flag_id,
        "model_id": None if model is None else model.id,
        "updated_at": datetime.now(UTC),
    }
    stmt = dialect_insert(conn, ScorerCheckpoint.__table__).values(**values)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["station"], set_={k: v for k, v in values.items() if k != "station"}
        )
    )


def _read_stick_readings(
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


def _decide(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    loaded: LoadedModel,
    due: pd.DataFrame,
    now: datetime,
    assume_complete: bool,
) -> pd.DataFrame:
    """Decisions for the due sticks that have completed; sticks still waiting for a missing
    sensor (before the timeout) get a later ``due_at`` and no decision."""
    stations = [s.name for s in config.stations_up_to(st.name)]
    readings = _read_stick_readings(conn, due, stations)
    missing = _missing_sensors(readings, st, due)
    first = pd.to_datetime(due["first_arrived_at"], utc=True)
    timed_out = (pd.Timestamp(now) - first).dt.total_seconds().to_numpy() >= st.timeout_s
    complete = due["later_seen"].to_numpy(bool) | timed_out | assume_complete
    has_all = np.array([not m for m in missing], dtype=bool)
    waiting = ~has_all & ~complete
    if waiting.any():
        postpone(conn, st, due.loc[waiting], first[waiting])
    decided = due.loc[~waiting].reset_index(drop=True)
    out = pd.DataFrame(
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
    scorable = has_all[~waiting]
    if scorable.any():
        model = loaded.model
        features = build_station_features(readings, config, st.name, imputation=model.imputation)
        keys_ok = pd.MultiIndex.from_frame(out.loc[scorable, ["charge_id", "stick_id"]])
        decisions = model.decide(features.X.reindex(keys_ok))
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


def _write_flags(
    conn: Connection, station: str, loaded: LoadedModel, scores: pd.DataFrame, now: datetime
) -> list[dict]:
    """Insert the flags; returns those actually inserted (not already flagged)."""
    if scores.empty:
        return []
    probability = scores["probability"].to_numpy(dtype=float)
    rows = [
        {
            "station": station,
            "charge_id": c,
            "stick_id": s,
            "model_id": loaded.id,
            "probability": None if np.isnan(p) else float(p),
            "flagged": d == "lock_out",
            "decision": d,
            "reason": r if isinstance(r, str) else None,
            "threshold": float(loaded.model.threshold),
            "arrived_at": a.to_pydatetime(),
            "scored_at": now,
        }
        for c, s, p, d, r, a in zip(
            scores["charge_id"],
            scores["stick_id"],
            probability,
            scores["decision"],
            scores["reason"],
            scores["arrived_at"],
            strict=True,
        )
    ]
    statement = dialect_insert(conn, Flag.__table__).on_conflict_do_nothing(
        index_elements=["station", "charge_id", "stick_id"]
    )
    f = Flag.__table__
    inserted = set()
    for start in range(0, len(rows), IN_CHUNK):
        part = rows[start : start + IN_CHUNK]
        result = conn.execute(statement.returning(f.c.charge_id, f.c.stick_id), part)
        inserted |= {(r.charge_id, r.stick_id) for r in result}
    return [row for row in rows if (row["charge_id"], row["stick_id"]) in inserted]


# ----------------------------------------------------------------------------- batch runs
def score_station(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    now: datetime | None = None,
    sink: FlagSink | str | Path | None = None,
) -> ScoreResult:
    """``qcllp score``: decide every stick ingested at ``station`` and not flagged yet, as the
    service would once the station has completed (steps until nothing is due). The flags go
    to the station's sink in the same steps: ``sink`` (claimed first, as the service claims
    it) or the one its checkpoint names."""
    loaded = load_model(store, station=station)
    if sink is not None:
        claim_sink(store, station, sink.path if isinstance(sink, FlagSink) else sink)
    parts, written, lines, path = [], 0, 0, None
    while True:
        step = score_step(store, config, station, loaded, now=now, assume_complete=True)
        parts.append(step.scores)
        written, lines, path = written + step.flags_written, lines + step.sink_lines, step.sink
        if step.standby or not (step.more or step.batches_taken):
            break
    scores = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SCORE_COLUMNS)
    return ScoreResult(
        station, loaded.id, loaded.model.threshold, scores, written, sink=path, sink_lines=lines
    )


def score_readings(
    store: Store, config: PlantConfig, station: str, readings: pd.DataFrame
) -> ScoreResult:
    """Score the sticks of a readings frame (long format) with the active model; no flags."""
    loaded = load_model(store, station=station)
    model = loaded.model
    features = build_station_features(readings, config, station, imputation=model.imputation)
    decided = model.decide(features.X)
    decided["decision"] = np.where(decided.pop("flagged"), "lock_out", "pass")
    return ScoreResult(station, loaded.id, model.threshold, decided, 0)


def score_file(store: Store, config: PlantConfig, station: str, path: str | Path) -> ScoreResult:
    """Score the sticks of a measurement file (checked as ingest checks it); no flags."""
    return score_readings(store, config, station, read_readings(config, path))


def flags_frame(store: Store, station: str | None = None) -> pd.DataFrame:
    """Stored flags (for reports): station, charge, stick, model, probability, flagged,
    decision, reason, threshold, arrived_at, scored_at."""
    f = Flag.__table__
    columns = [
        "station",
        "charge_id",
        "stick_id",
        "model_id",
        "probability",
        "flagged",
        "decision",
        "reason",
        "threshold",
        "arrived_at",
        "scored_at",
    ]
    query = select(*(f.c[c] for c in columns))
    if station is not None:
        query = query.where(f.c.station == station)
    with store.engine.connect() as conn:
        frame = rows_frame(conn.execute(query).all(), columns)
    frame["flagged"] = frame["flagged"].astype(bool)
    return frame.astype({"probability": np.float64})
