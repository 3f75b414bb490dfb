"""Whether a scorer's poll has anything to do, read without taking the writer lock.

On SQLite a step (:func:`qcllp.scoring.step.score_step`) runs in ``BEGIN IMMEDIATE``: the
database's one writer lock, shared with the intake, the other stations' scorers, the bay page
and the daemon. A step that finds nothing still takes that lock and commits its checkpoint.
Four scorers polling every 0.1 s are forty writer turns a second; measured with the MQTT
intake at 500 sticks/s (``benchmarks/bench_line_latency.py``) they were what bounded the
line's publish-to-flag latency. :func:`idle_step` looks first, in a plain read transaction
(WAL readers never wait for the writer): when the station has nothing to do it returns the
step's result without a write, otherwise ``None`` and the caller runs the full step.

A station has something to do when any of these holds, each a condition under which the full
step would change the database or the sink:

* no checkpoint yet (its first step), or the checkpoint names another model than the one
  loaded (the step records the model it decided with);
* an ingestion batch committed after the checkpoint (readings, final QC's counts, inspections
  all arrive as batches);
* a pending stick is due (a later station saw it, or its ``due_at`` has passed) and a model
  (active or shadow) is there to decide it -- without one a step decides nothing;
* the station's sink is behind: a flag above the sink's cursor, or the file's size differs
  from the committed offset (a killed step's uncommitted lines, which the full step cuts
  back, or a sink moved aside by hand);
* an inspection of the station newer than the one the active model's guard has taken in.

Why reading first is safe: whatever commits after the look is seen by the next poll, as it
would be by the next step; a killed step leaves its batch, its pending stick or its flags
above the cursor, so the look sends the next poll to the full step that repairs the sink.
On PostgreSQL a step takes only the station's advisory lock, so an idle step costs no other
writer anything, and the step is also how a second scorer learns it is the standby: the
service looks first on SQLite only (:class:`qcllp.service.scorer.ScorerService`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection

from qcllp.scoring.pending import backlog, due_condition
from qcllp.scoring.share_guard import guard_state
from qcllp.scoring.step import Checkpoint, StepResult, empty_step, read_checkpoint
from qcllp.station.registry import LoadedModel
from qcllp.store import Store, fetch_tuples, placeholders

__all__ = ["idle_step"]


def idle_step(
    store: Store,
    station: str,
    model: LoadedModel | None,
    now: datetime,
    *,
    shadow: LoadedModel | None = None,
) -> StepResult | None:
    """The result of a step at ``station`` with the active ``model`` and the ``shadow`` model
    that would find nothing to do (its pending sticks, lag and the active model's guard, as
    the full step reports them), read without the writer lock; ``None`` when the station has
    work and the full step must run. Its statements go as plain SQL through the driver's own
    cursor (:mod:`qcllp.store.driver_sql`): four scorers look ten times a second each."""
    with store.engine.connect() as conn:
        cp = read_checkpoint(conn, station)
        if cp is None or cp.model_id != (None if model is None else model.id):
            return None
        deciding = model is not None or shadow is not None
        if _has_work(conn, station, cp, now, deciding) or _sink_behind(conn, station, cp):
            return None
        guard = None if model is None else guard_state(conn, station, model.id)
        if guard is not None and _new_inspections(conn, station, guard.inspect_id):
            return None
        pending, lag = backlog(conn, station, int(cp.commit_seq), now)
    idle = empty_step(station, model, standby=False)
    return replace(idle, sink=cp.sink_path, guard=guard, pending=pending, lag_s=lag)


def _has_work(
    conn: Connection, station: str, cp: Checkpoint, now: datetime, deciding: bool
) -> bool:
    """A batch committed after the checkpoint, or (``deciding``) a pending stick due now."""
    mark = placeholders(conn, 1)
    sql = f"SELECT EXISTS (SELECT 1 FROM ingestion_batches WHERE commit_seq > {mark})"
    parameters: list = [cp.commit_seq]
    if deciding:
        due, at = due_condition(conn, now)
        sql += f" OR EXISTS (SELECT 1 FROM scorer_pending WHERE station = {mark} AND {due})"
        parameters += [station, *at]
    return bool(fetch_tuples(conn, sql, parameters)[0][0])


def _sink_behind(conn: Connection, station: str, cp: Checkpoint) -> bool:
    """The station's sink lacks committed flags, or holds bytes past its committed offset."""
    if cp.sink_path is None:
        return False
    ((newest,),) = fetch_tuples(
        conn, f"SELECT max(id) FROM flags WHERE station = {placeholders(conn, 1)}", [station]
    )
    if newest is not None and newest > cp.sink_flag_id:
        return True
    try:
        return os.stat(cp.sink_path).st_size != cp.sink_offset
    except FileNotFoundError:
        return cp.sink_offset != 0


def _new_inspections(conn: Connection, station: str, seen_id: int) -> bool:
    """An inspection at the station the active model's guard has not taken in."""
    mark = placeholders(conn, 1)
    sql = f"SELECT EXISTS (SELECT 1 FROM inspections WHERE station = {mark} AND id > {mark})"
    return bool(fetch_tuples(conn, sql, [station, seen_id])[0][0])
