"""Plain SQL through the driver's own cursor, for the paths that run every step or batch.

SQLAlchemy's statements and result rows cost more than the database's own work where a line's
scorer steps ten times a second and a backlog's drain reads hundreds of thousands of rows
(``benchmarks/bench_step.py``, ``benchmarks/bench_scorer.py``, issues 34 and 35). Reads come
as plain tuples (:func:`fetch_tuples`); times as each driver returns them -- SQLite the text
SQLAlchemy stored, PostgreSQL zone-aware datetimes -- are read back zone-aware
(:func:`stored_utc`, :func:`stored_utc_times`) and written to SQLite as SQLAlchemy stores them
(:func:`sqlite_timestamps`), so rows written here read back through the ORM like any other.
The helpers that build frames import pandas and NumPy when called: ``qcllp models list`` opens
a store and needs neither.

Rows go into a table the fastest way each database offers. :func:`insert_columns` runs an
``INSERT`` of many rows (with its ``ON CONFLICT``) in one statement; :func:`upsert_row` one
row's ``INSERT ... ON CONFLICT DO UPDATE``. :func:`copy_binary` is PostgreSQL's ``COPY ...
FROM STDIN (FORMAT BINARY)`` of NumPy columns of fixed width, built in one pass. The binary
format (PostgreSQL's documentation, "COPY", "Binary Format"): an 11-byte signature, a 32-bit
flags field and a 32-bit header-extension length, then per row a 16-bit field count and per
field a 32-bit byte length and the value in network byte order, and a 16-bit -1 at the end.
For columns of fixed width (integers, floats, fixed-length ``bytea``) every row has the same
layout, so the rows are one NumPy structured array written with ``tobytes()``: no Python per
row or per value. psycopg's ``Copy.write_row`` formats each value in Python, which made the
ingester's CPU on PostgreSQL 2.8-3.0 s per million readings, against 1.9-2.2 s this way
(``benchmarks/bench_ingest.py``). For rows with text or values of varying length
:func:`copy_rows` sends them by ``write_row`` all the same: a quarter of the time of the
``INSERT`` over arrays for the kept statistics' 50,000 rows of a million readings.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, DateTime, Table

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = [
    "binary_rows",
    "copy_binary",
    "copy_rows",
    "driver_cursor",
    "fetch_tuples",
    "insert_columns",
    "placeholders",
    "seconds_since",
    "sqlite_timestamps",
    "stored_utc",
    "stored_utc_times",
    "upsert_row",
    "us_to_utc",
]

SQLITE_TIMESTAMP = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's DateTime on SQLite (its storage_format)


def placeholders(conn: Connection, n: int) -> str:
    """``n`` positional parameter marks for the driver's own cursor (``?`` or ``%s``)."""
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    return ", ".join([mark] * n)


def driver_cursor(conn: Connection) -> closing:
    """The driver's own cursor in ``conn``'s transaction, closed when the ``with`` ends (for hot
    paths; ``contextlib.closing``: sqlite3's cursors are no context managers)."""
    return closing(conn.connection.dbapi_connection.cursor())


def fetch_tuples(conn: Connection, sql: str, parameters: Sequence) -> list[tuple]:
    """The rows of ``sql`` (marks from :func:`placeholders`) as plain tuples through the
    driver's own cursor, in ``conn``'s transaction: SQLAlchemy's result rows cost as much
    again as the fetch where a step or a read takes thousands (``benchmarks/bench_scorer.py``
    backlog, issue 34). Times come as the driver gives them: text on SQLite."""
    with driver_cursor(conn) as cursor:
        cursor.execute(sql, parameters)
        return cursor.fetchall()


def stored_utc(value: datetime | str) -> datetime:
    """A timestamp read back from the store, zone-aware: SQLite returns the UTC times it
    stored without their zone, as text through the driver's own cursor
    (:func:`fetch_tuples`); PostgreSQL's come back aware and are left as they are."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def stored_utc_times(values: Sequence) -> pd.DatetimeIndex:
    """Timestamps read back through the driver's own cursor (:func:`fetch_tuples`) as one
    zone-aware index: SQLite's UTC text (SQLAlchemy's storage format) parsed by NumPy in
    one pass, PostgreSQL's aware datetimes by pandas. ``pd.to_datetime(..., format=
    "ISO8601")`` per column cost a line's scoring step a twentieth of its time
    (``benchmarks/bench_step.py``, issue 35); NumPy's parse of the same text, a third less."""
    import numpy as np
    import pandas as pd

    if len(values) and isinstance(values[0], str):
        return pd.DatetimeIndex(np.array(values, dtype="datetime64[us]")).tz_localize(UTC)
    return pd.DatetimeIndex(pd.to_datetime(list(values), utc=True))


def seconds_since(times: pd.Series, now: datetime) -> np.ndarray:
    """Seconds from each of ``times`` (zone-aware) to ``now``, as a float array: in NumPy
    microseconds, a twentieth of pandas' ``(Timestamp(now) - times).dt.total_seconds()``
    for a step's few dozen sticks."""
    import numpy as np

    at = np.datetime64(now.astimezone(UTC).replace(tzinfo=None), "us")
    return (at - times.to_numpy(dtype="datetime64[us]")) / np.timedelta64(1, "s")


def us_to_utc(values) -> pd.Series | pd.DatetimeIndex:
    """Epoch microseconds (int) -> ``datetime64[ns, UTC]``."""
    import pandas as pd

    return pd.to_datetime(values, unit="us", utc=True).astype("datetime64[ns, UTC]")


def insert_columns(
    conn: Connection, head: str, types: Sequence[str], columns: Sequence[list], tail: str = ""
) -> int:
    """``{head} <rows> {tail}`` for the rows whose values ``columns`` hold, one list per
    column (``types``: their PostgreSQL types), through the driver's own cursor; returns the
    rows the statement wrote (an ``ON CONFLICT DO NOTHING`` skips some).

    On PostgreSQL one statement, ``SELECT * FROM unnest(%s::type[], ...)`` over one array per
    column: psycopg's ``executemany`` runs the statement once per row (pipelined), which
    bound the MQTT intake's batches (a batch's series, sticks and visits, tens per stick). On
    SQLite ``executemany`` of one prepared statement, as fast as it gets there; a
    ``timestamptz`` column (zone-aware datetimes or ``None``) goes as the text SQLAlchemy
    stores (:func:`sqlite_timestamps`). ``tail`` (``ON CONFLICT ...``) must not meet one key
    twice in a call on PostgreSQL."""
    if len(types) != len(columns) or len({len(c) for c in columns}) > 1:
        raise ValueError(f"{len(types)} types for {len(columns)} columns of unequal lengths")
    if not columns or not len(columns[0]):
        return 0
    with driver_cursor(conn) as cursor:
        if conn.dialect.name == "postgresql":
            arrays = ", ".join(f"%s::{t}[]" for t in types)
            cursor.execute(f"{head} SELECT * FROM unnest({arrays}) {tail}", list(columns))
        else:
            values = [
                sqlite_timestamps(c) if t == "timestamptz" else c
                for c, t in zip(columns, types, strict=True)
            ]
            marks = placeholders(conn, len(columns))
            cursor.executemany(f"{head} VALUES ({marks}) {tail}", zip(*values, strict=True))
        return cursor.rowcount


def upsert_row(conn: Connection, table: Table, row: dict[str, Any], update: Sequence[str]) -> None:
    """Insert ``row`` (column: value) into ``table``; where its primary key is taken, set the
    ``update`` columns to its values instead. As plain SQL through the driver's own cursor:
    SQLAlchemy's ``insert().on_conflict_do_update()`` cost some 0.4 ms of building and
    caching a statement, and a line's scoring step runs two each poll, its checkpoint and
    its guard row (``benchmarks/bench_step.py``, issue 35). Zone-aware times go to SQLite
    as the text SQLAlchemy stores (:func:`sqlite_timestamps`)."""
    names = list(row)
    values = list(row.values())
    if conn.dialect.name == "sqlite":
        values = [
            sqlite_timestamps([v])[0] if isinstance(table.c[n].type, DateTime) else v
            for n, v in zip(names, values, strict=True)
        ]
    key = ", ".join(c.name for c in table.primary_key.columns)
    changes = ", ".join(f"{c} = excluded.{c}" for c in update)
    sql = (
        f"INSERT INTO {table.name} ({', '.join(names)}) "
        f"VALUES ({placeholders(conn, len(names))}) ON CONFLICT ({key}) DO UPDATE SET {changes}"
    )
    with driver_cursor(conn) as cursor:
        cursor.execute(sql, values)


def sqlite_timestamps(values: Sequence[datetime | None]) -> list[str | None]:
    """Zone-aware datetimes as SQLite holds SQLAlchemy's ``DateTime``: the UTC time as
    ``YYYY-MM-DD HH:MM:SS.ffffff`` (its ``storage_format``), so rows written here read back
    through the ORM like any other. Each distinct value is formatted once (a step's flags
    share their ``scored_at``, a batch's sticks their arrival)."""
    text: dict[datetime, str] = {}
    out: list[str | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        known = text.get(value)
        if known is None:
            if value.tzinfo is None:
                raise ValueError(f"a timestamp without its zone: {value!r}")
            known = value.astimezone(UTC).strftime(SQLITE_TIMESTAMP)
            text[value] = known
        out.append(known)
    return out


SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension
TRAILER = b"\xff\xff"  # the field count -1
# PostgreSQL type -> the big-endian NumPy type of its binary form
WIRE_TYPES = {"integer": ">i4", "bigint": ">i8", "double precision": ">f8"}


def wire_dtype(pg_type: str) -> np.dtype:
    """The NumPy type of one value of ``pg_type`` on the wire: ``integer``, ``bigint``,
    ``double precision`` or ``bytea(N)`` (a ``bytea`` of exactly N bytes per row)."""
    import numpy as np  # here: `qcllp models list` imports the store, and needs no NumPy

    if pg_type.startswith("bytea(") and pg_type.endswith(")"):
        return np.dtype((np.void, int(pg_type[6:-1])))
    return np.dtype(WIRE_TYPES[pg_type])


def binary_rows(columns: Sequence[np.ndarray], pg_types: Sequence[str]) -> bytes:
    """The COPY binary stream (header, rows, trailer) of ``columns``, one array per column of
    the COPY's column list, typed by ``pg_types`` (see :func:`wire_dtype`; a ``bytea(N)``
    column is an array of N-byte voids, or of rows of N bytes in total)."""
    if len(columns) != len(pg_types) or len({len(c) for c in columns}) > 1:
        raise ValueError(f"{len(pg_types)} types for {len(columns)} columns of unequal lengths")
    import numpy as np

    types = [wire_dtype(t) for t in pg_types]
    layout: list[tuple[str, Any]] = [("count", ">i2")]
    for k, dtype in enumerate(types):
        layout += [(f"size{k}", ">i4"), (f"value{k}", dtype)]
    rows = np.empty(len(columns[0]) if columns else 0, dtype=layout)
    rows["count"] = len(columns)
    for k, (column, dtype) in enumerate(zip(columns, types, strict=True)):
        rows[f"size{k}"] = dtype.itemsize
        rows[f"value{k}"] = _as_wire(np.asarray(column), dtype)
    return SIGNATURE + rows.tobytes() + TRAILER


def _as_wire(column: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``column`` as ``dtype``'s values: numbers converted (refused if they do not fit),
    ``bytea(N)`` rows viewed as N-byte voids."""
    import numpy as np

    if dtype.kind == "V":
        raw = np.ascontiguousarray(column)
        return raw.view(np.uint8).reshape(len(raw), -1).view(dtype).ravel()
    if dtype.kind == "i" and len(column):
        info = np.iinfo(dtype)
        if column.min() < info.min or column.max() > info.max:
            raise OverflowError(f"values out of {dtype.name}'s range for a COPY")
    return column.astype(dtype, copy=False)


def copy_binary(
    cursor: Any, head: str, columns: Sequence[np.ndarray], pg_types: Sequence[str]
) -> int:
    """``{head} FROM STDIN (FORMAT BINARY)`` (``head``: ``COPY table (columns)``) of
    ``columns`` through a psycopg cursor; the number of rows sent."""
    with cursor.copy(f"{head} FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(binary_rows(columns, pg_types))
    return len(columns[0]) if columns else 0


def copy_rows(cursor: Any, head: str, columns: Sequence[list], pg_types: Sequence[str]) -> int:
    """``{head} FROM STDIN (FORMAT BINARY)`` (``head``: ``COPY table (columns)``) of the rows
    whose values ``columns`` hold (one list per column, any PostgreSQL types ``pg_types``)
    through psycopg's ``Copy.write_row``; the number of rows sent. Into rows that are new
    only: a key met again fails the whole ``COPY``."""
    with cursor.copy(f"{head} FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(list(pg_types))
        for row in zip(*columns, strict=True):
            copy.write_row(row)
    return len(columns[0]) if columns else 0
