"""Many rows in one call on both engines (:func:`qcllp.store.insert_columns`): the count it
returns is the rows written (an ``ON CONFLICT DO NOTHING`` skips the rest), and times go in
as the ORM writes them, so they read back through SQLAlchemy as the same instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from qcllp.store import ScorerPending, insert_columns, sqlite_timestamps, stored_utc

HEAD = (
    "INSERT INTO scorer_pending (station, charge_id, stick_id, first_arrived_at, arrived_at, "
    "due_at, later_seen)"
)
TYPES = ("text", "text", "text", "timestamptz", "timestamptz", "timestamptz", "boolean")
SKIP_KNOWN = "ON CONFLICT (station, charge_id, stick_id) DO NOTHING"
T0 = datetime(2026, 3, 1, 6, 0, 0, 0, tzinfo=UTC)  # microsecond 0: no fraction in isoformat
CET = timezone(timedelta(hours=1))


def _columns(sticks: list[str], times: list[datetime]) -> list[list]:
    n = len(sticks)
    return [["cooling"] * n, ["C1"] * n, sticks, times, times, times, [True] * n]


def test_the_count_is_the_rows_written_and_times_read_back_as_the_same_instants(store):
    times = [T0, T0 + timedelta(microseconds=7), datetime(2026, 3, 1, 8, 30, 1, 5, tzinfo=CET)]
    with store.write() as conn:
        written = insert_columns(conn, HEAD, TYPES, _columns(["S1", "S2", "S3"], times))
        again = insert_columns(conn, HEAD, TYPES, _columns(["S3", "S4"], [T0, T0]), SKIP_KNOWN)
        nothing = insert_columns(conn, HEAD, TYPES, _columns([], []), SKIP_KNOWN)
    assert (written, again, nothing) == (3, 1, 0)
    p = ScorerPending.__table__
    with store.engine.connect() as conn:
        rows = conn.execute(select(p.c.stick_id, p.c.arrived_at).order_by(p.c.stick_id)).all()
    assert {r.stick_id: stored_utc(r.arrived_at) for r in rows} == {
        "S1": T0,
        "S2": T0 + timedelta(microseconds=7),
        "S3": datetime(2026, 3, 1, 7, 30, 1, 5, tzinfo=UTC),  # the first write kept
        "S4": T0,
    }


def test_sqlite_text_is_sqlalchemys_and_a_time_without_its_zone_is_refused():
    assert sqlite_timestamps([T0, None, datetime(2026, 3, 1, 7, 0, 0, 42, tzinfo=CET)]) == [
        "2026-03-01 06:00:00.000000",
        None,
        "2026-03-01 06:00:00.000042",
    ]
    with pytest.raises(ValueError, match="without its zone"):
        sqlite_timestamps([datetime(2026, 3, 1, 6, 0)])
