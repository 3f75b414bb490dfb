"""Writing what a step decided: the flags, the alarms and the flags' delivery to the sink.

The part of a scoring step (:mod:`.step`, step 3) that writes: the flags (``INSERT ... ON
CONFLICT DO NOTHING`` on the unique (station, charge, stick), so a stick is flagged once),
alarms for operators (in the step's transaction, or in one of their own), and the append of
the station's flags above the sink's cursor to its file (:mod:`.flag_sink`), whose new offset
and cursor the step commits with its checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.scoring.flag_sink import FlagSink, flag_line
from qcllp.station.registry import LoadedModel
from qcllp.store import IN_CHUNK, Alarm, Flag, Store, dialect_insert

__all__ = ["Delivery", "deliver", "insert_alarm", "record_alarm", "write_flags"]


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


def write_flags(
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


def deliver(
    conn: Connection,
    station: str,
    sink: FlagSink | None,
    cursor: int,
    offset: int,
    bound: int,
) -> Delivery:
    """Append the station's flags above the cursor (at most ``bound``, oldest first) -- the
    step's own and any a run without the sink open wrote -- and fsync them; the new offset
    and cursor are committed with the step. Without a sink the cursor stays where it is."""
    if sink is None:
        return Delivery(None, offset, cursor)
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
        return Delivery(str(sink.path), offset, cursor)
    offset = sink.append([flag_line(row._mapping) for row in rows])
    return Delivery(str(sink.path), offset, int(rows[-1].id), len(rows), more)
