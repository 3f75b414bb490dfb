"""Plain SQL through the driver on both engines (:mod:`qcllp.store.driver_sql`): one row's
upsert changes only the columns it names, and times read back through the driver's cursor --
SQLite's text, PostgreSQL's aware datetimes -- are the instants written, whichever zone they
were written in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pandas as pd
from sqlalchemy import select

from qcllp.store import (
    LockoutGuard,
    fetch_tuples,
    insert_columns,
    placeholders,
    seconds_since,
    stored_utc,
    stored_utc_times,
    upsert_row,
)

T0 = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
CET = timezone(timedelta(hours=1))
TIMES = [T0, T0 + timedelta(microseconds=7), datetime(2026, 3, 1, 8, 30, 1, 5, tzinfo=CET)]


def _guard(store) -> tuple:
    g = LockoutGuard.__table__
    with store.engine.connect() as conn:
        return conn.execute(
            select(g.c.decided, g.c.locked, g.c.excess, g.c.suspended_at, g.c.reason)
        ).one()


def test_an_upserted_row_is_inserted_then_only_its_named_columns_change(store):
    row = {"station": "cooling", "model_id": 3, "decided": 5, "locked": 1, "excess": 0.5}
    suspended = datetime(2026, 3, 1, 7, 0, 0, 42, tzinfo=CET)
    with store.write() as conn:
        upsert_row(conn, LockoutGuard.__table__, {**row, "suspended_at": suspended}, ["decided"])
    decided, locked, excess, at, reason = _guard(store)
    assert (decided, locked, excess, stored_utc(at), reason) == (5, 1, 0.5, suspended, None)
    with store.write() as conn:
        changed = {**row, "decided": 9, "locked": 0, "reason": "tripped"}
        upsert_row(conn, LockoutGuard.__table__, changed, ["decided", "reason"])
    decided, locked, excess, at, reason = _guard(store)
    assert (decided, locked, excess, stored_utc(at), reason) == (9, 1, 0.5, suspended, "tripped")


def test_times_read_through_the_drivers_cursor_are_the_instants_written(store):
    head = (
        "INSERT INTO scorer_pending (station, charge_id, stick_id, first_arrived_at, "
        "arrived_at, due_at, later_seen)"
    )
    types = ("text", "text", "text", "timestamptz", "timestamptz", "timestamptz", "boolean")
    sticks = ["S1", "S2", "S3"]
    columns = [["cooling"] * 3, ["C1"] * 3, sticks, TIMES, TIMES, TIMES, [False] * 3]
    with store.write() as conn:
        insert_columns(conn, head, types, columns)
        rows = fetch_tuples(
            conn,
            "SELECT arrived_at FROM scorer_pending WHERE station = "
            f"{placeholders(conn, 1)} ORDER BY stick_id",
            ["cooling"],
        )
    values = [value for (value,) in rows]
    expected = pd.DatetimeIndex([t.astimezone(UTC) for t in TIMES])
    read = stored_utc_times(values)
    assert str(read.tz) == "UTC"
    assert read.as_unit("us").asi8.tolist() == expected.as_unit("us").asi8.tolist()
    assert [stored_utc(v) for v in values] == [t.astimezone(UTC) for t in TIMES]
    now = T0 + timedelta(seconds=90)
    seconds = seconds_since(pd.Series(read), now)
    assert np.allclose(seconds, [(now - t).total_seconds() for t in TIMES], rtol=0, atol=1e-9)
