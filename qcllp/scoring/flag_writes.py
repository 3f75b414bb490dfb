"""Writing what a step decided: the flags, the alarms and the flags' delivery to the sink.

The part of a scoring step (:mod:`.step`, step 3) that writes: the flags (``INSERT ... ON
CONFLICT DO NOTHING`` on the unique (station, charge, stick), so a stick is flagged once),
a shadow model's would-be decisions (``shadow_flags``, once per model and stick),
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
from qcllp.store import IN_CHUNK, Alarm, Flag, ShadowFlag, Store, dialect_insert

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
) -> list[dict]:
    """Insert the flags; returns those actually inserted (not already flagged). Columns
    ``model_id`` and ``threshold`` in ``scores``, when there, name each flag's model (an
    audit of a shadow model's decision, :mod:`.audits`); else they are ``loaded``'s."""
    if scores.empty:
        return []
    rows = _rows(station, loaded, scores, now)
    for row, d, r, a in zip(
        rows, scores["decision"], scores["reason"], scores["arrived_at"], strict=True
    ):
        row |= {
            "flagged": d == "lock_out",
            "decision": d,
            "reason": r if isinstance(r, str) else None,
            "arrived_at": a.to_pydatetime(),
        }
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


def write_shadow_flags(
    conn: Connection, station: str, shadow: LoadedModel, scores: pd.DataFrame, now: datetime
) -> int:
    """Insert what the shadow model would have decided (``INSERT ... ON CONFLICT DO
    NOTHING`` on the unique (model, charge, stick)); returns the rows inserted."""
    if scores.empty:
        return 0
    rows = _rows(station, shadow, scores, now)
    for row, d in zip(rows, scores["decision"], strict=True):
        row["decision"] = d
    s = ShadowFlag.__table__
    statement = dialect_insert(conn, s).on_conflict_do_nothing(
        index_elements=["model_id", "charge_id", "stick_id"]
    )
    inserted = 0
    for start in range(0, len(rows), IN_CHUNK):
        part = rows[start : start + IN_CHUNK]
        inserted += len(conn.execute(statement.returning(s.c.id), part).all())
    return inserted


def _rows(station: str, loaded: LoadedModel, scores: pd.DataFrame, now: datetime) -> list[dict]:
    """The columns flags and shadow flags share, one dict per decided stick."""
    n = len(scores)
    probability = scores["probability"].to_numpy(dtype=float)
    model_ids = scores["model_id"] if "model_id" in scores else [loaded.id] * n
    thresholds = scores["threshold"] if "threshold" in scores else [loaded.model.threshold] * n
    return [
        {
            "station": station,
            "charge_id": c,
            "stick_id": s,
            "model_id": int(m),
            "probability": None if np.isnan(p) else float(p),
            "threshold": float(t),
            "scored_at": now,
        }
        for c, s, p, m, t in zip(
            scores["charge_id"], scores["stick_id"], probability, model_ids, thresholds, strict=True
        )
    ]


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
