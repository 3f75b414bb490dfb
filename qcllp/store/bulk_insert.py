"""Many rows into a table in one call, the fastest way each database offers."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from qcllp.store.core import placeholders

__all__ = ["insert_columns"]


def insert_columns(
    conn: Connection, head: str, types: Sequence[str], columns: Sequence[list], tail: str = ""
) -> None:
    """``{head} <rows> {tail}`` for the rows whose values ``columns`` hold, one list per
    column (``types``: their PostgreSQL types), through the driver's own cursor.

    On PostgreSQL one statement, ``SELECT * FROM unnest(%s::type[], ...)`` over one array per
    column: psycopg's ``executemany`` runs the statement once per row (pipelined), which
    bound the MQTT intake's batches (a batch's series, sticks and visits, tens per stick). On
    SQLite ``executemany`` of one prepared statement, as fast as it gets there. ``tail``
    (``ON CONFLICT ...``) must not meet one key twice in a call on PostgreSQL."""
    if len(types) != len(columns) or len({len(c) for c in columns}) > 1:
        raise ValueError(f"{len(types)} types for {len(columns)} columns of unequal lengths")
    if not columns or not len(columns[0]):
        return
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        if conn.dialect.name == "postgresql":
            arrays = ", ".join(f"%s::{t}[]" for t in types)
            cursor.execute(f"{head} SELECT * FROM unnest({arrays}) {tail}", list(columns))
        else:
            marks = placeholders(conn, len(columns))
            cursor.executemany(f"{head} VALUES ({marks}) {tail}", list(zip(*columns, strict=True)))
    finally:
        cursor.close()
