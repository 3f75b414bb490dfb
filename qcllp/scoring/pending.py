"""Which sticks wait at a station, and which have completed it: the scorer's intake.

A step takes in the ingestion batches committed since its checkpoint (``commit_seq``, read
through ``batch_sticks`` only, so the cost follows the new work, not the history); the sticks
they brought to the station wait in ``scorer_pending`` until the plant config's completion rule
(:class:`qcllp.plant.config.Station`) says they are done: a reading at a later station, or
``settle_s`` without news, or -- still missing a sensor -- ``timeout_s`` after their first
reading there. Everything here runs inside the step's transaction (:mod:`qcllp.scoring.step`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import pandas as pd
from sqlalchemy import Connection

from qcllp.plant.config import PlantConfig, Station
from qcllp.store import (
    IN_CHUNK,
    driver_cursor,
    fetch_tuples,
    insert_columns,
    placeholders,
    sqlite_timestamps,
    stored_utc,
    stored_utc_times,
)

__all__ = [
    "MAX_BATCHES_PER_STEP",
    "Intake",
    "backlog",
    "due_condition",
    "due_sticks",
    "due_with_complete",
    "forget_pending",
    "park",
    "postpone",
    "take_in",
]

MAX_BATCHES_PER_STEP = 50


class Intake(NamedTuple):
    """What a step took in: the new checkpoint ``seq``, the number of batches ``taken``,
    whether more are ``waiting``, the ids of the ``count_batches`` among them (final QC's
    counts, in commit order, for :mod:`.count_guard`), and the sticks these batches brought
    ``complete``: to this station and to a later one, their (first, last) arrival here in
    these batches. Those are not written to ``scorer_pending`` by :func:`take_in`: the step
    decides them at once (:func:`due_with_complete`) or parks them (:func:`park`)."""

    seq: int
    taken: int
    waiting: bool
    count_batches: list[int]
    complete: Mapping[tuple[str, str], tuple[datetime, datetime]] = MappingProxyType({})


def take_in(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    since_seq: int,
    max_rows: int,
) -> Intake:
    """Batches committed after ``since_seq`` into ``scorer_pending``, at most
    :data:`MAX_BATCHES_PER_STEP` and about ``max_rows`` (station, stick) rows.

    Plain Python over the rows rather than pandas: a step at the line's pace takes in a few
    sticks, and the fixed cost of a handful of small frames and indexes was most of it
    (``benchmarks/bench_line_latency.py``, issue 35). Sticks these batches brought to this
    station and a later one are returned as ``complete`` instead of going through
    ``scorer_pending``: writing, selecting and deleting their rows was a sixth of a backlog's
    drain (``benchmarks/bench_scorer.py`` backlog, issue 34)."""
    batches, remaining = _batches_to_take(conn, since_seq, max_rows)
    if not batches:
        return Intake(since_seq, 0, False, [])
    intake = Intake(
        int(batches[-1].commit_seq),
        len(batches),
        remaining,
        [r.id for r in batches if r.kind == "defect_counts"],
    )
    arrival = {r.id: stored_utc(r.finished_at) for r in batches if r.kind == "measurements"}
    if not arrival:
        return intake
    visits = _visits(conn, config, st, arrival)
    gone = _reported(conn, {charge for _, _, charge, _ in visits})
    arrived: dict[tuple[str, str], tuple[datetime, datetime]] = {}
    later: set[tuple[str, str]] = set()
    for batch_id, station, charge_id, stick_id in visits:
        if charge_id in gone:
            continue
        key = (charge_id, stick_id)
        if station != st.name:
            later.add(key)
            continue
        t = arrival[batch_id]
        first, last = arrived.get(key, (t, t))
        arrived[key] = (min(first, t), max(last, t))
    complete = {key: times for key, times in arrived.items() if key in later}
    waiting = {key: times for key, times in arrived.items() if key not in complete}
    _upsert_pending(conn, st, waiting, later.difference(complete))
    return intake._replace(complete=complete)


def _batches_to_take(conn: Connection, since_seq: int, max_rows: int) -> tuple[list, bool]:
    """The batches committed after ``since_seq`` that this step takes (commit order, at most
    :data:`MAX_BATCHES_PER_STEP`, about ``max_rows`` (station, stick) rows, a batch never
    split), and whether more are waiting."""
    mark = placeholders(conn, 1)
    batches = [
        _Batch(*row)
        for row in fetch_tuples(
            conn,
            "SELECT id, commit_seq, finished_at, kind FROM ingestion_batches "
            f"WHERE commit_seq > {mark} ORDER BY commit_seq LIMIT {mark}",
            [since_seq, MAX_BATCHES_PER_STEP],
        )
    ]
    if not batches:
        return [], False
    remaining = len(batches) == MAX_BATCHES_PER_STEP
    ids = [r.id for r in batches]
    sizes = dict(
        fetch_tuples(
            conn,
            "SELECT batch_id, count(*) FROM batch_sticks "
            f"WHERE batch_id IN ({placeholders(conn, len(ids))}) GROUP BY batch_id",
            ids,
        )
    )
    taken, rows = [], 0
    for batch in batches:  # bound a step's intake; a batch is never split
        if taken and rows + sizes.get(batch.id, 0) > max_rows:
            remaining = True
            break
        taken.append(batch)
        rows += sizes.get(batch.id, 0)
    return taken, remaining


class _Batch(NamedTuple):
    """An ingestion batch as a step takes it in (``finished_at`` as the driver returns it)."""

    id: int
    commit_seq: int
    finished_at: datetime | str
    kind: str


def _visits(conn: Connection, config: PlantConfig, st: Station, arrival: dict) -> list[tuple]:
    """The (batch_id, station, charge_id, stick_id) rows the measurement batches ``arrival``
    brought to this station or a later one (only ``batch_sticks`` of these batches are read).
    Plain tuples through the driver's own cursor: SQLAlchemy's rows took 5 µs each, a tenth
    of a backlog's drain (``benchmarks/bench_scorer.py`` backlog, issue 34)."""
    stations = list(config.station_names[config.station_index(st.name) :])
    batches = list(arrival)
    sql = (
        "SELECT batch_id, station, charge_id, stick_id FROM batch_sticks "
        f"WHERE batch_id IN ({placeholders(conn, len(batches))}) "
        f"AND station IN ({placeholders(conn, len(stations))})"
    )
    return fetch_tuples(conn, sql, [*batches, *stations])


def _reported(conn: Connection, charges: set[str]) -> set[str]:
    """Those of ``charges`` final QC has reported: their sticks have left the line."""
    listed, gone = sorted(charges), set()
    for start in range(0, len(listed), IN_CHUNK):
        part = listed[start : start + IN_CHUNK]
        gone |= {
            charge
            for (charge,) in fetch_tuples(
                conn,
                "SELECT charge_id FROM charges WHERE n_sticks IS NOT NULL "
                f"AND charge_id IN ({placeholders(conn, len(part))})",
                part,
            )
        }
    return gone


def _upsert_pending(
    conn: Connection,
    st: Station,
    arrived: Mapping[tuple[str, str], tuple[datetime, datetime]],
    later: set[tuple[str, str]],
) -> None:
    """New arrivals at the station (first and last arrival per stick) into
    ``scorer_pending``; later-station sightings mark the pending sticks they belong to (a
    stick not pending here needs nothing)."""
    settle = timedelta(seconds=st.settle_s)
    keys = sorted(arrived)  # as the ids sort
    times = [arrived[key] for key in keys]
    if keys:
        _upsert_arrivals(conn, st.name, keys, times, settle, later)
    elsewhere = sorted(later.difference(arrived))
    if elsewhere:
        _by_stick(conn, "UPDATE scorer_pending SET later_seen = true", st.name, elsewhere)


def _upsert_arrivals(
    conn: Connection,
    station: str,
    keys: list[tuple[str, str]],
    times: list[tuple[datetime, datetime]],
    settle: timedelta,
    later: set[tuple[str, str]],
) -> None:
    """:func:`_upsert_pending`'s upsert through :func:`~qcllp.store.insert_columns`: one
    statement over arrays on PostgreSQL (SQLAlchemy's ``executemany`` sent one per stick,
    120,000 in a minute of the line at 500 sticks/s), the driver's ``executemany`` of plain
    tuples on SQLite (SQLAlchemy's per-row parameters were a tenth of a backlog's drain)."""
    insert_columns(
        conn,
        "INSERT INTO scorer_pending (station, charge_id, stick_id, first_arrived_at, "
        "arrived_at, due_at, later_seen)",
        ("text", "text", "text", "timestamptz", "timestamptz", "timestamptz", "boolean"),
        [
            [station] * len(keys),
            [charge for charge, _ in keys],
            [stick for _, stick in keys],
            [first for first, _ in times],
            [last for _, last in times],
            [last + settle for _, last in times],
            [key in later for key in keys],
        ],
        "ON CONFLICT (station, charge_id, stick_id) DO UPDATE SET "
        "arrived_at = excluded.arrived_at, due_at = excluded.due_at, "
        "later_seen = scorer_pending.later_seen OR excluded.later_seen",
    )


def due_sticks(
    conn: Connection, station: str, now: datetime, limit: int, assume_complete: bool
) -> pd.DataFrame:
    """Pending sticks that may have completed (later-station reading or due), oldest first:
    ``charge_id, stick_id, first_arrived_at, arrived_at`` (UTC) and ``later_seen``.

    Through the driver's own cursor (:func:`_due_frame`): SQLAlchemy's rows and their
    per-value datetime parsing cost 8 % of a backlog's drain (``benchmarks/bench_scorer.py``
    backlog, issue 34)."""
    mark = placeholders(conn, 1)
    sql = (
        "SELECT charge_id, stick_id, first_arrived_at, arrived_at, later_seen "
        f"FROM scorer_pending WHERE station = {mark}"
    )
    parameters: list = [station]
    if not assume_complete:
        condition, at = due_condition(conn, now)
        sql += f" AND {condition}"
        parameters += at
    rows = fetch_tuples(conn, f"{sql} ORDER BY due_at LIMIT {mark}", [*parameters, limit])
    return _due_frame(rows)


def due_with_complete(
    conn: Connection,
    st: Station,
    now: datetime,
    limit: int,
    assume_complete: bool,
    complete: Mapping[tuple[str, str], tuple[datetime, datetime]],
) -> pd.DataFrame:
    """:func:`due_sticks`, then the sticks the step's intake found ``complete`` (never
    written to ``scorer_pending``), in their ids' order, up to ``limit`` sticks in all; the
    complete ones beyond it are parked in ``scorer_pending`` (:func:`park`) for the next
    step. A complete stick that was pending already (its readings here came in earlier
    batches too) is decided once, with its last arrival; its row goes with the decided
    sticks' (:func:`forget_pending`). The same frame as :func:`due_sticks`'."""
    due = due_sticks(conn, st.name, now, limit, assume_complete)
    if not complete:
        return due
    keys = list(zip(due["charge_id"].tolist(), due["stick_id"].tolist(), strict=True))
    both = {key for key in keys if key in complete}
    if both:  # pending already: one row, its last arrival the intake's
        arrived = due["arrived_at"].tolist()
        for i, key in enumerate(keys):
            if key in both:
                arrived[i] = max(arrived[i], complete[key][1])
        dtype = due["arrived_at"].dtype
        due = due.assign(arrived_at=pd.to_datetime(arrived, utc=True).astype(dtype))
        due["later_seen"] = due["later_seen"].to_numpy() | [key in both for key in keys]
    fresh = [key for key in sorted(complete) if key not in both]
    room = max(limit - len(due), 0)
    park(conn, st, {key: complete[key] for key in fresh[room:]})
    rows = [(c, s, *complete[(c, s)], True) for c, s in fresh[:room]]
    if not rows:
        return due
    taken = _due_frame(rows)
    return pd.concat([due, taken], ignore_index=True) if len(due) else taken


def park(
    conn: Connection, st: Station, complete: Mapping[tuple[str, str], tuple[datetime, datetime]]
) -> None:
    """Complete sticks the step does not decide (beyond its bound, or no model to decide
    them) into ``scorer_pending``, seen at a later station: the next step finds them due."""
    if complete:
        _upsert_pending(conn, st, complete, set(complete))


def due_condition(conn: Connection, now: datetime) -> tuple[str, list]:
    """The SQL condition on ``scorer_pending`` rows due at ``now`` (a later station saw the
    stick, or its ``due_at`` has passed) and its parameters: what :func:`due_sticks` selects
    and the idle poll (:mod:`.idle_poll`) looks for, one rule for both."""
    at = sqlite_timestamps([now])[0] if conn.dialect.name == "sqlite" else now
    return f"(later_seen OR due_at <= {placeholders(conn, 1)})", [at]


def _due_frame(rows: list[tuple]) -> pd.DataFrame:
    """:func:`due_sticks`' frame from its rows: the names as Python strings (``object``
    columns, which the step's keys and flags take as they are), both times parsed in one
    pass (:func:`~qcllp.store.stored_utc_times`). A frame of the rows as pandas infers
    them, and a parse per column, cost a line's step a tenth of its time
    (``benchmarks/bench_step.py``, issue 35)."""
    charges, sticks, first, last, later = zip(*rows, strict=True) if rows else ((),) * 5
    times = stored_utc_times([*first, *last])
    return pd.DataFrame(
        {
            "charge_id": pd.Series(charges, dtype=object),
            "stick_id": pd.Series(sticks, dtype=object),
            "first_arrived_at": times[: len(rows)],
            "arrived_at": times[len(rows) :],
            "later_seen": np.array(later, dtype=bool),
        }
    )


def postpone(conn: Connection, st: Station, waiting: pd.DataFrame, first: pd.Series) -> None:
    """Sticks still missing a sensor wait until ``timeout_s`` after their first reading: on
    PostgreSQL one statement over arrays, on SQLite the driver's ``executemany`` (a sensor
    that fails postpones every stick the line brings, one statement each before)."""
    until = (first + pd.Timedelta(seconds=st.timeout_s)).dt.to_pydatetime().tolist()
    charges, sticks = waiting["charge_id"].tolist(), waiting["stick_id"].tolist()
    with driver_cursor(conn) as cursor:
        if conn.dialect.name == "postgresql":
            cursor.execute(
                "UPDATE scorer_pending p SET due_at = u.due FROM unnest(%s::text[], "
                "%s::text[], %s::timestamptz[]) AS u(charge_id, stick_id, due) "
                "WHERE p.station = %s AND p.charge_id = u.charge_id AND p.stick_id = u.stick_id",
                [charges, sticks, until, st.name],
            )
        else:
            stations = [st.name] * len(charges)
            cursor.executemany(
                "UPDATE scorer_pending SET due_at = ? "
                "WHERE station = ? AND charge_id = ? AND stick_id = ?",
                zip(sqlite_timestamps(until), stations, charges, sticks, strict=True),
            )


def forget_pending(conn: Connection, station: str, scores: pd.DataFrame) -> None:
    """Decided sticks leave ``scorer_pending``: on PostgreSQL in one statement over arrays
    (an ``executemany`` sent one per stick), on SQLite by the driver's ``executemany`` of one
    prepared statement (SQLAlchemy's per-row parameters cost 5 % of a backlog's drain)."""
    if scores.empty:
        return
    keys = zip(scores["charge_id"].tolist(), scores["stick_id"].tolist(), strict=True)
    _by_stick(conn, "DELETE FROM scorer_pending", station, list(keys))


def _by_stick(conn: Connection, head: str, station: str, keys: list[tuple[str, str]]) -> None:
    """``{head}`` (an ``UPDATE ... SET`` or ``DELETE FROM`` of ``scorer_pending``) on these
    sticks of the station: on PostgreSQL one statement over arrays, on SQLite the driver's
    ``executemany`` of one prepared statement with plain tuples."""
    with driver_cursor(conn) as cursor:
        if conn.dialect.name == "postgresql":
            cursor.execute(
                f"{head} WHERE station = %s AND (charge_id, stick_id) IN "
                "(SELECT * FROM unnest(%s::text[], %s::text[]))",
                [station, [c for c, _ in keys], [s for _, s in keys]],
            )
        else:
            cursor.executemany(
                f"{head} WHERE station = ? AND charge_id = ? AND stick_id = ?",
                [(station, c, s) for c, s in keys],
            )


def backlog(conn: Connection, station: str, seq: int, now: datetime) -> tuple[int, float]:
    """(pending sticks, lag in seconds): the lag is the age of the oldest batch not yet taken
    in or of the oldest pending stick that is due, 0 when none is waiting."""
    mark = placeholders(conn, 1)
    ((oldest_batch,),) = fetch_tuples(
        conn, f"SELECT min(finished_at) FROM ingestion_batches WHERE commit_seq > {mark}", [seq]
    )
    ((pending, oldest_due),) = fetch_tuples(
        conn, f"SELECT count(*), min(due_at) FROM scorer_pending WHERE station = {mark}", [station]
    )
    ages = [
        (now - stored_utc(t)).total_seconds() for t in (oldest_batch, oldest_due) if t is not None
    ]
    return int(pending), max([0.0, *ages])
