"""Many rows into a table in one call, the fastest way each database offers.

:func:`insert_columns` runs an ``INSERT`` of many rows (with its ``ON CONFLICT``) in one
statement. :func:`copy_binary` is PostgreSQL's ``COPY ... FROM STDIN (FORMAT BINARY)`` of
NumPy columns of fixed width, built in one pass. The binary format (PostgreSQL's
documentation, "COPY", "Binary Format"): an 11-byte signature, a 32-bit flags field and a
32-bit header-extension length, then per row a 16-bit field count and per field a 32-bit byte
length and the value in network byte order, and a 16-bit -1 at the end. For columns of fixed
width (integers, floats, fixed-length ``bytea``) every row has the same layout, so the rows
are one NumPy structured array written with ``tobytes()``: no Python per row or per value.
psycopg's ``Copy.write_row`` formats each value in Python, which made the ingester's CPU on
PostgreSQL 2.8-3.0 s per million readings, against 1.9-2.2 s this way
(``benchmarks/bench_ingest.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from qcllp.store.core import driver_cursor, placeholders

if TYPE_CHECKING:
    import numpy as np

__all__ = ["binary_rows", "copy_binary", "insert_columns", "sqlite_timestamps"]

SQLITE_TIMESTAMP = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's DateTime on SQLite (its storage_format)


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
