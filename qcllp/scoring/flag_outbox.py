"""The flags table as an outbox: what a channel other than the sink (MQTT, the PLC over OPC
UA) still has to get.

A scoring step commits its flags in its own transaction (:mod:`.step`); a flag exists exactly
when its decision does. A channel's publisher reads the station's flags above its delivery
cursor (``flag_deliveries``), sends them, and moves the cursor -- in a transaction of its own --
only over flags the channel acknowledged, each with every flag before it. Killed between the
acknowledgement and the cursor's commit, the publisher sends those flags again after its
restart: delivery is at least once, and every message carries the flag's stable id
(``flag_id``, and the unique (station, charge_id, stick_id)) for the consumer to drop a repeat.
Nothing is ever skipped: the cursor never passes a flag that was not acknowledged.

A channel's first start puts its cursor at the station's newest flag: the flags decided before
the channel was configured are history, not news for the line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import func, select, update

from qcllp.scoring.flag_sink import flag_record
from qcllp.store import Flag, FlagDelivery, Store, dialect_insert

__all__ = [
    "FLAG_PAYLOAD_VERSION",
    "advance",
    "flag_message",
    "start_cursor",
    "undelivered",
    "waiting",
]

FLAG_PAYLOAD_VERSION = 1
_F = Flag.__table__
_D = FlagDelivery.__table__
_COLUMNS = (
    "id", "station", "charge_id", "stick_id", "decision", "probability", "threshold",
    "model_id", "reason", "arrived_at", "scored_at",
)  # fmt: skip


def start_cursor(store: Store, station: str, channel: str) -> int:
    """The channel's cursor, created at the station's newest flag if it has none."""
    with store.writing() as conn:
        newest = conn.execute(select(func.max(_F.c.id)).where(_F.c.station == station)).scalar()
        conn.execute(
            dialect_insert(conn, _D)
            .values(
                station=station, channel=channel, flag_id=newest or 0, updated_at=datetime.now(UTC)
            )  # fmt: skip
            .on_conflict_do_nothing(index_elements=["station", "channel"])
        )
        return int(
            conn.execute(
                select(_D.c.flag_id).where(_D.c.station == station, _D.c.channel == channel)
            ).scalar_one()
        )


def undelivered(store: Store, station: str, after: int, limit: int) -> list[dict]:
    """The station's flags with an id above ``after``, oldest first, at most ``limit``."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(*(_F.c[c] for c in _COLUMNS))
            .where(_F.c.station == station, _F.c.id > after)
            .order_by(_F.c.id)
            .limit(limit)
        )
        return [dict(r._mapping) for r in rows]


def waiting(store: Store, station: str, after: int) -> int:
    """How many of the station's flags lie above ``after`` (what ``/healthz`` says waits)."""
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).where(_F.c.station == station, _F.c.id > after)
            ).scalar_one()
        )


def advance(store: Store, station: str, channel: str, flag_id: int) -> None:
    """Move the channel's cursor forward to ``flag_id`` (never back: a slower instance that
    finishes late cannot undo a newer one's progress)."""
    with store.writing() as conn:
        conn.execute(
            update(_D)
            .where(_D.c.station == station, _D.c.channel == channel, _D.c.flag_id < flag_id)
            .values(flag_id=flag_id, updated_at=datetime.now(UTC))
        )


def flag_message(row: dict) -> bytes:
    """A flag as the channel's payload: the sink's record (:func:`.flag_sink.flag_record`)
    with the payload version ``v`` and the stable ``flag_id``."""
    doc = {"v": FLAG_PAYLOAD_VERSION, "flag_id": int(row["id"]), **flag_record(row)}
    return json.dumps(doc, separators=(",", ":")).encode()
