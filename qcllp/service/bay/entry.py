"""One result tapped at the bay, stored the way an inspection file stores its rows.

The entry becomes a one-row frame (``charge_id, stick_id, station, result, inspected_at``)
and goes through :func:`qcllp.ingest.inspections.ingest_inspection_frames` -- the function
the file and SQL paths use -- inside one batch of :func:`qcllp.ingest.batches.run_batch`:
one exclusive transaction (the database's writer lock), a ``done`` batch row with its counts,
a quarantine row with the reason when refused, the flag's id and the audit mark. So an
entry from a tablet is checked exactly like a line of a file (a result the plant config does
not name, a stick without readings at the station), and two tablets tapping the same stick
are ordered by the writer lock: the second finds the first stored and is a duplicate (same
result) or refused as ``conflicting_inspection`` (another result; the first is kept).

``inspected_at`` is the time of the tap, with its UTC offset (a local time without one would
be refused in the hour a DST change repeats). The batch's ``source`` says where it came from
(``bay page, <client address>``): the page shows it with a refused entry's first result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
from sqlalchemy import Connection, select

from qcllp.ingest.batches import run_batch
from qcllp.ingest.inspections import ingest_inspection_frames
from qcllp.ingest.report import IngestReport
from qcllp.ingest.sources import Chunk
from qcllp.plant.config import PlantConfig
from qcllp.service.bay.awaiting import Stored, stored_inspection
from qcllp.store import QuarantineRow, Store

__all__ = ["Entry", "Outcome", "record_entry"]


@dataclass(frozen=True)
class Entry:
    """What a tap sends: the stick, its station and the result (``ok`` or a defect type)."""

    station: str
    charge_id: str
    stick_id: str
    result: str


@dataclass(frozen=True)
class Outcome:
    """What became of an entry.

    ``status``: ``stored``; ``same`` (this result was stored before, by another tablet or a
    double tap: nothing new); ``refused`` (another result was stored first: ``inspection``
    is that one); ``invalid`` (quarantined for ``reason``, ``detail`` says why)."""

    status: str
    inspection: Stored | None = None
    reason: str | None = None
    detail: str | None = None


def record_entry(
    store: Store, config: PlantConfig, entry: Entry, source: str, *, now: datetime | None = None
) -> Outcome:
    """Store ``entry`` as one inspection batch from ``source`` (module docstring)."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds")
    frame = pd.DataFrame(
        {
            "charge_id": [entry.charge_id],
            "stick_id": [entry.stick_id],
            "station": [entry.station],
            "result": [entry.result],
            "inspected_at": [stamp],
        },
        dtype=object,
    )

    def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
        chunk = Chunk(frame=frame, first_row=1)
        ingest_inspection_frames(conn, batch_id, report, config, source, [chunk])

    report = run_batch(store, "inspections", source, None, body)
    assert report is not None  # only batches with a checksum are skipped
    with store.engine.connect() as conn:
        first = stored_inspection(conn, entry.station, entry.charge_id, entry.stick_id)
        if report.stored:
            return Outcome("stored", first)
        if report.duplicates:
            return Outcome("same", first)
        reason = next(iter(report.quarantined))
        if reason == "conflicting_inspection":
            return Outcome("refused", first, reason)
        detail = conn.execute(
            select(QuarantineRow.detail).where(QuarantineRow.batch_id == report.batches[0])
        ).scalar()
        return Outcome("invalid", first, reason, detail)
