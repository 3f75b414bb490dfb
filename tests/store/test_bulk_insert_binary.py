"""PostgreSQL's binary COPY of NumPy columns: every value arrives bit for bit, the edges of
each type included, and a value that does not fit its column is refused before anything is
sent (a real server; skipped without one)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qcllp.store.driver_sql import binary_rows, copy_binary

TYPES = ("integer", "bigint", "double precision", "bytea(16)")
TABLE = "CREATE TEMP TABLE copied (i integer, b bigint, d double precision, x bytea)"


def _columns() -> list[np.ndarray]:
    i32, i64 = np.iinfo(np.int32), np.iinfo(np.int64)
    ints = np.array([i32.min, -1, 0, 1, i32.max], dtype=np.int64)
    bigs = np.array([i64.min, -(2**40), 0, 2**53 + 1, i64.max], dtype=np.int64)
    floats = np.array([-0.0, 5e-324, 1.0 / 3.0, math.inf, -1.7976931348623157e308])
    raw = np.arange(80, dtype=np.uint8).reshape(5, 16)
    raw[2] = 0  # zero bytes inside a bytea
    return [ints, bigs, floats, raw]


def _copied(store, columns, types) -> tuple[int, list[tuple]]:
    with store.write() as conn:
        conn.exec_driver_sql(TABLE)
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            sent = copy_binary(cursor, "COPY copied (i, b, d, x)", columns, types)
            cursor.execute("SELECT i, b, d, x FROM copied")
            return sent, cursor.fetchall()
        finally:
            cursor.close()


def test_every_value_arrives_bit_for_bit(pg_store):
    columns = _columns()
    sent, rows = _copied(pg_store, columns, TYPES)
    assert sent == len(rows) == 5
    for k, (i, b, d, x) in enumerate(rows):
        assert i == columns[0][k] and b == columns[1][k]
        assert np.float64(d).tobytes() == columns[2][k].tobytes()  # -0.0 and the subnormal too
        assert bytes(x) == columns[3][k].tobytes()


def test_not_a_number_arrives_as_not_a_number(pg_store):
    columns = [np.array([1]), np.array([2]), np.array([math.nan]), np.zeros((1, 16), np.uint8)]
    _, [(_, _, d, _)] = _copied(pg_store, columns, TYPES)
    assert math.isnan(d)


def test_a_value_out_of_an_integer_columns_range_is_refused_before_sending():
    columns = _columns()
    columns[0] = columns[0] + np.array([0, 0, 0, 0, 1])  # one past int32's maximum
    with pytest.raises(OverflowError, match="int32"):
        binary_rows(columns, TYPES)


def test_columns_of_unequal_lengths_or_an_unknown_type_are_refused():
    columns = _columns()
    with pytest.raises(ValueError, match="unequal lengths"):
        binary_rows([columns[0], columns[1][:3]], TYPES[:2])
    with pytest.raises(KeyError):
        binary_rows(columns[:1], ("smallint",))
