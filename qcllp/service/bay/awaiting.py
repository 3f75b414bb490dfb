"""The sticks awaiting inspection at a station: what the bay page lists.

A stick awaits inspection when the station's flag locked it out (``lock_out``) or marked it
as an audit sample (``inspect``) and no inspection of it at that station is stored yet.
Newest first (by flag id: the order the scorer decided them), at most :data:`LIST_LIMIT`.

The query's cost follows the page, not the history: it walks the flags' ``(station, id)``
index backwards from the newest flag, asks the inspections' unique ``(station, charge_id,
stick_id)`` index for each lock-out and audit sample it meets, and stops at the page's
``limit`` -- or at the station's :data:`SCAN_FLAGS`-th newest flag (found on the same index,
without reading the rows). A stick
locked out longer ago than that (at a lock-out share of 2 %, about 400 lock-outs back) is no
longer listed: by then it was scrapped or looked at elsewhere, and ``qcllp ingest
inspections`` still takes its result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from qcllp.store import Flag, IngestionBatch, Inspection, stored_utc

__all__ = [
    "AWAITED",
    "LIST_LIMIT",
    "SCAN_FLAGS",
    "Stored",
    "Waiting",
    "awaiting",
    "inspection_by_id",
    "stored_inspection",
]

AWAITED = ("lock_out", "inspect")  # the decisions that send a stick to the bay
LIST_LIMIT = 200  # rows on the page: more than a bay holds
SCAN_FLAGS = 20_000  # the station's newest flags looked at


@dataclass(frozen=True)
class Waiting:
    """One stick awaiting inspection: its flag and what the page shows of it."""

    flag_id: int
    charge_id: str
    stick_id: str
    decision: str
    probability: float | None
    threshold: float
    reason: str | None
    at: datetime  # when the stick completed the station (else when it was scored), UTC

    @property
    def why(self) -> str:
        """The flag's reason, or for a plain lock-out the rule that made it."""
        if self.reason:
            return self.reason
        if self.probability is not None and self.decision == "lock_out":
            return (
                f"locked out: p {self.probability:.2f} at or above the threshold "
                f"{self.threshold:.2f}"
            )
        return "audit sample" if self.decision == "inspect" else self.decision


def awaiting(
    conn: Connection, station: str, *, limit: int = LIST_LIMIT, scan: int = SCAN_FLAGS
) -> tuple[list[Waiting], bool]:
    """The sticks awaiting inspection at ``station``, newest first, and whether more than
    ``limit`` of them wait (module docstring)."""
    recent = (
        select(Flag.id)
        .where(Flag.station == station)
        .order_by(Flag.id.desc())
        .limit(scan)
        .subquery()
    )
    floor = select(func.min(recent.c.id)).scalar_subquery()  # the oldest flag looked at
    inspected = (
        select(Inspection.id)
        .where(
            Inspection.station == Flag.station,
            Inspection.charge_id == Flag.charge_id,
            Inspection.stick_id == Flag.stick_id,
        )
        .exists()
    )
    columns = [Flag.id, Flag.charge_id, Flag.stick_id, Flag.decision, Flag.probability]
    columns += [Flag.threshold, Flag.reason, Flag.arrived_at, Flag.scored_at]
    stmt = (
        select(*columns)
        .where(
            Flag.station == station,
            Flag.id >= floor,
            Flag.decision.in_(AWAITED),
            ~inspected,
        )
        .order_by(Flag.id.desc())
        .limit(limit + 1)
    )
    rows = conn.execute(stmt).all()
    found = [
        Waiting(
            flag_id=int(r.id),
            charge_id=r.charge_id,
            stick_id=r.stick_id,
            decision=r.decision,
            probability=None if r.probability is None else float(r.probability),
            threshold=float(r.threshold),
            reason=r.reason,
            at=stored_utc(r.arrived_at or r.scored_at),
        )  # fmt: skip
        for r in rows[:limit]
    ]
    return found, len(rows) > limit


@dataclass(frozen=True)
class Stored:
    """A stored inspection as the page tells it: which stick, the result, when and from
    where (the batch's source: a file, a SQL source or a bay tablet)."""

    id: int
    station: str
    charge_id: str
    stick_id: str
    result: str
    at: datetime  # inspected_at, else when it was stored (UTC)
    source: str


def stored_inspection(
    conn: Connection, station: str, charge_id: str, stick_id: str
) -> Stored | None:
    """The inspection of a stick at ``station`` (at most one is stored), or ``None``."""
    return _one_stored(
        conn,
        Inspection.station == station,
        Inspection.charge_id == charge_id,
        Inspection.stick_id == stick_id,
    )


def inspection_by_id(conn: Connection, inspection_id: int) -> Stored | None:
    """The inspection with this id, or ``None``: what a confirmation on the page names."""
    return _one_stored(conn, Inspection.id == inspection_id)


def _one_stored(conn: Connection, *where) -> Stored | None:  # noqa: ANN002
    stmt = (
        select(
            Inspection.id,
            Inspection.station,
            Inspection.charge_id,
            Inspection.stick_id,
            Inspection.result,
            Inspection.inspected_at,
            Inspection.stored_at,
            IngestionBatch.source,
        )  # fmt: skip
        .join(IngestionBatch, IngestionBatch.id == Inspection.batch_id)
        .where(*where)
    )
    row = conn.execute(stmt).first()
    if row is None:
        return None
    return Stored(
        id=int(row.id), station=row.station, charge_id=row.charge_id, stick_id=row.stick_id,
        result=row.result, at=stored_utc(row.inspected_at or row.stored_at), source=row.source,
    )  # fmt: skip
