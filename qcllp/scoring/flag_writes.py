"""Writing what a step decided: the flags, the alarms and the flags' delivery to the sink.

The part of a scoring step (:mod:`.step`, step 3) that writes: the flags (``INSERT ... ON
CONFLICT DO NOTHING`` on the unique (station, charge, stick), so a stick is flagged once),
a shadow model's would-be decisions (``shadow_flags``, once per model and stick),
alarms for operators (in the step's transaction, or in one of their own), and the append of
the station's flags above the sink's cursor to its file (:mod:`.flag_sink`), whose new offset
and cursor the step commits with its checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
from sqlalchemy import Connection

from qcllp.scoring.flag_sink import FlagSink, flag_lines
from qcllp.station.registry import LoadedModel
from qcllp.store import Alarm, Store, fetch_tuples, insert_columns, placeholders

__all__ = [
    "Delivery",
    "deliver",
    "insert_alarm",
    "record_alarm",
    "write_flags",
    "write_shadow_flags",
]


def record_alarm(store: Store, source: str, station: str | None, kind: str, message: str) -> None:
    """Store an alarm for operators (``qcllp status`` lists them), in its own transaction."""
    with store.writing() as conn:
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


def write_flags(
    conn: Connection, station: str, loaded: LoadedModel, scores: pd.DataFrame, now: datetime
) -> int:
    """Insert the flags; returns how many were inserted (a stick flagged before is not).
    Every flag is ``loaded``'s decision: the active model's, or the shadow's when it decides
    alone (:mod:`.audits`).

    One statement for all of them (:func:`~qcllp.store.insert_columns`): SQLAlchemy's
    ``executemany`` with ``RETURNING`` cost a drain 1 s in 7 (``benchmarks/bench_scorer.py``
    backlog, issue 34), and the count is all a step needs."""
    if scores.empty:
        return 0
    decisions = scores["decision"].tolist()
    columns = {
        **_shared_columns(station, loaded, scores, now),
        "flagged": [d == "lock_out" for d in decisions],
        "decision": decisions,
        "reason": [r if isinstance(r, str) else None for r in scores["reason"].tolist()],
        "arrived_at": _datetimes(scores["arrived_at"]),
    }
    return insert_columns(
        conn,
        f"INSERT INTO flags ({', '.join(columns)})",
        [*_SHARED_TYPES, "boolean", "text", "text", "timestamptz"],
        list(columns.values()),
        "ON CONFLICT (station, charge_id, stick_id) DO NOTHING",
    )


def write_shadow_flags(
    conn: Connection, station: str, shadow: LoadedModel, scores: pd.DataFrame, now: datetime
) -> int:
    """Insert what the shadow model would have decided (``INSERT ... ON CONFLICT DO
    NOTHING`` on the unique (model, charge, stick)); returns the rows inserted."""
    if scores.empty:
        return 0
    columns = {
        **_shared_columns(station, shadow, scores, now),
        "decision": scores["decision"].tolist(),
    }
    return insert_columns(
        conn,
        f"INSERT INTO shadow_flags ({', '.join(columns)})",
        [*_SHARED_TYPES, "text"],
        list(columns.values()),
        "ON CONFLICT (model_id, charge_id, stick_id) DO NOTHING",
    )


# the PostgreSQL types of _shared_columns, in its order
_SHARED_TYPES = ("text", "text", "text", "integer", "double precision", "double precision",
                 "timestamptz")  # fmt: skip


def _shared_columns(
    station: str, loaded: LoadedModel, scores: pd.DataFrame, now: datetime
) -> dict[str, list]:
    """The columns flags and shadow flags share, one list per column."""
    n = len(scores)
    probability = scores["probability"].to_numpy(dtype=float)
    return {
        "station": [station] * n,
        "charge_id": _texts(scores["charge_id"]),
        "stick_id": _texts(scores["stick_id"]),
        "model_id": [int(loaded.id)] * n,
        "probability": [None if math.isnan(p) else p for p in probability.tolist()],
        "threshold": [float(loaded.model.threshold)] * n,
        "scored_at": [now] * n,
    }


def _texts(values: pd.Series) -> list[str]:
    """A column's values as Python strings. Taken as they are when they are strings already
    (the step's ``object`` columns): ``astype(str)`` makes pandas 3's Arrow-backed text of
    them first, a round trip that cost a line's step some 0.2 ms a column
    (``benchmarks/bench_step.py``, issue 35)."""
    listed = values.tolist()
    return [v if type(v) is str else str(v) for v in listed]


def _datetimes(values: pd.Series) -> list[datetime | None]:
    """A column of times as zone-aware Python datetimes, ``None`` for a missing one."""
    stamps = pd.to_datetime(values, utc=True)
    return [None if t is pd.NaT else t for t in stamps.dt.to_pydatetime()]


@dataclass(frozen=True)
class Delivery:
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
# the station's flags above the delivery cursor, oldest first ({mark}: the driver's parameter mark)
_SELECT_TO_DELIVER = (
    f"SELECT {', '.join(_SINK_COLUMNS)} FROM flags WHERE station = {{mark}} AND id > {{mark}} "
    "ORDER BY id LIMIT {mark}"
)


def deliver(
    conn: Connection,
    station: str,
    sink: FlagSink | None,
    cursor_id: int,
    offset: int,
    bound: int,
) -> Delivery:
    """Append the station's flags above the cursor (at most ``bound``, oldest first) -- the
    step's own and any a run without the sink open wrote -- and fsync them; the new offset
    and cursor are committed with the step. Without a sink the cursor stays where it is.

    Read through the driver's own cursor (SQLite's times come as text, :func:`.flag_sink.
    flag_lines` reads both): SQLAlchemy's rows cost a third of the delivery."""
    if sink is None:
        return Delivery(None, offset, cursor_id)
    sql = _SELECT_TO_DELIVER.format(mark=placeholders(conn, 1))
    fetched = fetch_tuples(conn, sql, [station, cursor_id, bound + 1])
    rows = [dict(zip(_SINK_COLUMNS, row, strict=True)) for row in fetched]
    more = len(rows) > bound
    rows = rows[:bound]
    if not rows:
        return Delivery(str(sink.path), offset, cursor_id)
    offset = sink.append(flag_lines(rows))
    return Delivery(str(sink.path), offset, int(rows[-1]["id"]), len(rows), more)
