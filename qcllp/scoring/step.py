"""Scoring sticks as they complete a station: one flag per stick, exactly once.

This is the one scoring path: ``qcllp score`` runs :func:`score_station` (steps until nothing
is left), the station service (:mod:`qcllp.service.scorer`) runs :func:`score_step` on its
schedule. A step is one transaction under the station's lock:

1. **take in** the ingestion batches committed since the checkpoint (``commit_seq``, at most
   :data:`MAX_BATCHES_PER_STEP`): the sticks they brought to this station enter
   ``scorer_pending`` (arrival time = the batch's commit), sticks they brought to a later
   station are marked ``later_seen``; sticks they brought to both are complete already and
   go straight to step 2 (parked in ``scorer_pending``, seen later, only beyond the step's
   bound). Only ``batch_sticks`` rows of those batches are read,
   so a step costs in proportion to new work, never to the history. Sticks of charges that
   final QC has already reported have left the line and are not taken in.
2. **decide** the pending sticks that have completed the station (the plant config's rule,
   :class:`qcllp.plant.config.Station`), oldest first, then those complete at intake, at most
   ``max_sticks``: their readings
   of the stations up to this one are read, the features built exactly as at training time
   (same columns, same imputation values, from the model), and the model decides ``lock_out``
   or ``pass``. A stick that lacks a sensor of this station is ``unscorable`` with the sensor
   named -- never imputed into a decision -- once the rule says it has completed.
   The lock-out guard (:mod:`qcllp.scoring.share_guard`) then turns lock-outs into passes, with the
   reason, once the model locks out far more sticks than it did in training, or once final
   QC's counts, taken in with the batches, show that it over-predicts failures on this plant
   (:mod:`.count_guard`, checked before deciding, so a trip holds this step's lock-outs), or
   once the lock-outs inspected at the bay fall short of break-even precision
   (:mod:`.inspection_guard`, also checked before deciding). A station's **shadow** model
   (on trial) decides the same sticks from the same readings; its decisions go to
   ``shadow_flags`` and the line acts on none of them. Of the sticks where the evidence is
   thin, a share is marked ``inspect`` instead of ``pass``: **audit samples** the station
   looks at (:mod:`.audits`).
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

Here are the step, its lock and its checkpoint; step 2's reading and deciding is in
:mod:`.decide` and :mod:`.decisions`, step 3's writing of flags, alarms and the sink's lines in
:mod:`.flag_writes`.

Two scorers for one station (started by mistake): on SQLite
a step runs in ``BEGIN IMMEDIATE``, the database's single writer lock, so steps serialize; on
PostgreSQL a step first takes ``pg_try_advisory_xact_lock`` on the station's key and, if
another scorer holds it, does nothing (the caller reports "standby"). An advisory lock rather
than ``SELECT ... FOR UPDATE SKIP LOCKED``: it also covers the very first step, when no
checkpoint row exists yet to be locked, and it never blocks the standby's thread or the
ingesters.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from sqlalchemy import Connection, func, select

from qcllp.features import build_station_features
from qcllp.ingest.measurements import read_readings
from qcllp.plant.config import PlantConfig
from qcllp.scoring.audits import AUDIT
from qcllp.scoring.decisions import SCORE_COLUMNS, Decided, decide_and_write, shadow_fields
from qcllp.scoring.flag_sink import FlagSink, SinkError, claim_sink
from qcllp.scoring.flag_writes import (
    Delivery,
    deliver,
    insert_alarm,
    record_alarm,
)
from qcllp.scoring.inspection_guard import InspectionIntake
from qcllp.scoring.pending import (
    MAX_BATCHES_PER_STEP,
    Intake,
    backlog,
    take_in,
)
from qcllp.scoring.share_guard import GuardState
from qcllp.station.registry import LoadedModel, RegistryError, load_model, load_shadow
from qcllp.store import (
    Flag,
    ScorerCheckpoint,
    Store,
    fetch_tuples,
    placeholders,
    rows_frame,
    seconds_since,
    upsert_row,
)
from qcllp.store.leases import scorer_lock_key

__all__ = [
    "DECISIONS",
    "MAX_BATCHES_PER_STEP",
    "NO_CHECKPOINT",
    "Checkpoint",
    "FlagSink",
    "ScoreResult",
    "SinkError",
    "StepResult",
    "empty_step",
    "flags_frame",
    "insert_alarm",
    "read_checkpoint",
    "record_alarm",
    "score_file",
    "score_readings",
    "score_station",
    "score_step",
    "station_lock",
]

DECISIONS = ("lock_out", "pass", AUDIT, "unscorable")


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class ScoreResult:
    """What a scoring run decided (``scores``: one row per stick) and what it wrote.
    ``model_id`` and ``threshold`` are the active model's (``None`` when a shadow model
    decided alone); ``shadow_id`` the shadow model's that decided beside it or alone."""

    station: str
    model_id: int | None
    threshold: float | None
    scores: pd.DataFrame
    flags_written: int
    sink: str | None = None  # the station's sink file (None: it has none)
    sink_lines: int = 0  # flags appended to it
    shadow_id: int | None = None

    @cached_property
    def counts(self) -> dict[str, int]:
        """Sticks per decision in ``scores``, counted once (the service reads this three
        times a step, ten steps a second when polling fast)."""
        found = Counter(self.scores["decision"].tolist())
        return {d: found[d] for d in DECISIONS}

    def as_dict(self) -> dict:
        counts = self.counts
        return {
            "station": self.station,
            "model_id": self.model_id,
            "threshold": self.threshold,
            "shadow_id": self.shadow_id,
            "sticks_decided": int(len(self.scores)),
            "locked_out": counts["lock_out"],
            "passed": counts["pass"],
            "audited": counts[AUDIT],
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
    inspected: InspectionIntake = InspectionIntake()  # the model's inspections taken in
    shadow_id: int | None = None  # the shadow model that decided beside (or without) it
    shadow_counts: dict[str, int] = field(default_factory=dict)  # its decisions, per decision
    shadow_written: int = 0  # rows inserted into shadow_flags
    shadow_audits: int = 0  # audit flags of the shadow's decisions (in ``scores``)


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


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a step runs, as it was after.

    A step of a backlog holds the driver's rows of its sticks' statistics (about 180,000
    tuples for 20,000 sticks at cooling) until its features are built; every 700 allocations start a
    collection that walks the young objects, and the rows that survive it are walked again
    by the older generations' -- a tenth of a drain's time, for objects freed by their
    reference counts at the step's end anyway (``benchmarks/bench_scorer.py`` backlog,
    issue 34). What a step leaves in cycles, if anything, is collected by the first
    collection after it. The pause is the process's (``gc`` has no other); the service
    runs one step at a time, its HTTP threads allocate little meanwhile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ----------------------------------------------------------------------------- one step
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
    shadow: LoadedModel | None = None,
) -> StepResult:
    """Take in new batches and decide the sticks that completed ``station`` (module docstring).

    ``model`` ``None``: sticks are taken in but none is decided (no model is active yet) --
    unless a ``shadow`` model is given: it decides the due sticks alone, its decisions go to
    ``shadow_flags``, the line gets flags for its audit samples only (:mod:`.audits`) and the
    other decided sticks are forgotten. ``shadow`` beside an active model decides the same
    sticks (recorded, never acted on). ``assume_complete``: every pending stick counts as
    complete (``qcllp score``: what has been ingested is all there will be); the service
    leaves it ``False``. ``sink``: the station's sink, claimed first (:func:`claim_sink`:
    :class:`SinkError` if the station has another or another station has it); without it the
    step writes to the sink the checkpoint names, if any -- the flags of every step reach the
    station's sink.
    """
    if sink is not None:
        claim_sink(store, station, sink.path if isinstance(sink, FlagSink) else sink)
    now = now or datetime.now(UTC)
    limit = max_sticks or config.scorer.max_batch_sticks
    with collector_paused(), ExitStack() as files, station_lock(store, station) as conn:
        if conn is None:
            return empty_step(station, model, standby=True)
        checkpoint = read_checkpoint(conn, station) or NO_CHECKPOINT
        out = None if checkpoint.sink_path is None else FlagSink(checkpoint.sink_path)
        offset, sink_problem = checkpoint.sink_offset, None
        if out is not None:
            files.enter_context(out.lock())  # held until after the commit
            offset, sink_problem = out.prepare(
                checkpoint.sink_offset,
                checkpoint.sink_flag_id,
                max_bytes=config.scorer.sink_max_bytes,
                keep=config.scorer.sink_keep_rotated,
            )
        st = config.station(station)
        intake = take_in(conn, config, st, checkpoint.commit_seq, 4 * limit)
        done = decide_and_write(
            conn, config, st, (model, shadow), intake, now, assume_complete, limit
        )
        # twice the step's bound: a sink that fell behind catches up while the line runs
        delivery = deliver(conn, station, out, checkpoint.sink_flag_id, offset, 2 * limit)
        _save_checkpoint(conn, station, intake.seq, delivery, model)
        pending, lag = backlog(conn, station, intake.seq, now)
    if sink_problem:
        record_alarm(store, "scorer", station, "sink_truncated", sink_problem)
    result = _step_result(station, model, done, intake, now, limit, delivery)
    return replace(result, pending=pending, lag_s=lag, **shadow_fields(shadow, done))


def _step_result(
    station: str,
    model: LoadedModel | None,
    done: Decided,
    intake: Intake,
    now: datetime,
    limit: int,
    delivery: Delivery,
) -> StepResult:
    """The step's result: its decisions, the flags written and delivered, and each decided
    stick's latency from its arrival to ``now``."""
    scores = done.scores
    arrived = pd.to_datetime(scores["arrived_at"], utc=True) if len(scores) else None
    latencies = seconds_since(arrived, now) if arrived is not None else np.empty(0)
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
        more=intake.waiting or done.due >= limit or delivery.more or done.inspected.more,
        alarms=tuple(done.alarms),
        guard=done.guard,
        inspected=done.inspected,
    )


def empty_step(station: str, model: LoadedModel | None, *, standby: bool) -> StepResult:
    """A step that did nothing (``standby``: another scorer holds the station's lock)."""
    return StepResult(
        station=station,
        model_id=None if model is None else model.id,
        threshold=None if model is None else model.model.threshold,
        scores=pd.DataFrame(columns=SCORE_COLUMNS),
        flags_written=0,
        standby=standby,
    )


class Checkpoint(NamedTuple):
    """A station's checkpoint: the last batch taken in (``commit_seq``), the model it scored
    with, and its sink's path, committed offset and cursor (highest flag id in it)."""

    commit_seq: int
    model_id: int | None
    sink_path: str | None
    sink_offset: int
    sink_flag_id: int


NO_CHECKPOINT = Checkpoint(0, None, None, 0, 0)  # before a station's first step


def read_checkpoint(conn: Connection, station: str) -> Checkpoint | None:
    """The station's checkpoint; ``None`` before its first step. The step reads it in its
    transaction, the idle poll (:mod:`.idle_poll`) in its look."""
    rows = fetch_tuples(
        conn,
        "SELECT commit_seq, model_id, sink_path, sink_offset, sink_flag_id "
        f"FROM scorer_checkpoints WHERE station = {placeholders(conn, 1)}",
        [station],
    )
    return Checkpoint(*rows[0]) if rows else None


def _save_checkpoint(
    conn: Connection,
    station: str,
    seq: int,
    delivery: Delivery,
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
    upsert_row(conn, ScorerCheckpoint.__table__, values, [k for k in values if k != "station"])


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
    service would once the station has completed (steps until nothing is due), with the
    station's shadow model beside the active one if it has one. The flags go to the station's
    sink in the same steps: ``sink`` (claimed first, as the service claims it) or the one its
    checkpoint names. A station with a shadow model and no active one is scored by the
    shadow alone (the line gets its audit samples only); with neither, the registry's error
    says what to do."""
    shadow = load_shadow(store, station)
    try:
        loaded = load_model(store, station=station)
    except RegistryError:
        if shadow is None:
            raise
        loaded = None
    if sink is not None:
        claim_sink(store, station, sink.path if isinstance(sink, FlagSink) else sink)
    parts, written, lines, path = [], 0, 0, None
    while True:
        step = score_step(
            store, config, station, loaded, now=now, assume_complete=True, shadow=shadow
        )
        parts.append(step.scores)
        written, lines, path = written + step.flags_written, lines + step.sink_lines, step.sink
        if step.standby or not (step.more or step.batches_taken):
            break
    scores = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SCORE_COLUMNS)
    return ScoreResult(
        station,
        None if loaded is None else loaded.id,
        None if loaded is None else loaded.model.threshold,
        scores,
        written,
        sink=path,
        sink_lines=lines,
        shadow_id=None if shadow is None else shadow.id,
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
