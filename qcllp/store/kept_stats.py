"""The ``stick_stats`` table: the series' statistics kept as readings arrive, one row per
stick and station (:class:`qcllp.store.schema.StickStatistics`), rebuilt from the readings on
demand, and read back per station and charge or per stick.

* :func:`keep_series_stats` merges the statistics of a batch's new readings into the stored
  rows of their sticks (:meth:`qcllp.store.series_stats.SeriesStats.merge`), inside the
  ingester's transaction: the rows and the readings commit together, and the writer lock the
  batch holds means no other batch merges into the same rows meanwhile. A stored row of
  another :data:`~qcllp.store.series_stats.STATS_VERSION` is not merged into: its stick is
  rebuilt from its readings instead.
* :func:`rebuild_series_stats` recomputes rows from the readings (some sticks at their
  stations, or all of them a range of series at a time): ``qcllp features rebuild``, the
  migration that created the table, and retention after it drops a month.
* :func:`read_series_stats` is what training reads instead of the readings, and
  :func:`fetch_stick_stats` what a scorer reads for the sticks it decides.

A row's ``stats`` holds one :data:`~qcllp.store.series_stats.RECORD` per series, its sensor
named by a code of ``sensor_codes`` (:func:`sensor_codes`): no text but the row's key is
stored or fetched per series.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Connection, func, select

from qcllp.store.core import IN_CHUNK, Store
from qcllp.store.driver_sql import (
    copy_rows,
    driver_cursor,
    fetch_tuples,
    insert_columns,
    placeholders,
)
from qcllp.store.schema import Series
from qcllp.store.series_stats import (
    RECORD,
    STAT_COLUMNS,
    STATS_VERSION,
    SeriesStats,
    from_records,
    series_stats,
    to_records,
)

__all__ = [
    "SERIES_COLUMNS",
    "STICK_KEY",
    "fetch_stick_stats",
    "keep_series_stats",
    "read_series_stats",
    "rebuild_all_series_stats",
    "rebuild_series_stats",
    "sensor_codes",
    "stats_count",
    "stick_query",
]

REBUILD_CHUNK = 20_000  # series ids a range of the full rebuild covers
SERIES_COLUMNS = ("charge_id", "stick_id", "station", "sensor")
STICK_KEY = ("station", "charge_id", "stick_id")  # a row of stick_stats
ROW_COLUMNS = (*STICK_KEY, "version", "t0_us", "t1_us", "stats")
ROW_TYPES = ("text", "text", "text", "integer", "bigint", "bigint", "bytea")  # PostgreSQL's


@dataclass(frozen=True)
class _Owned:
    """Series statistics with, per entry, its sensor's code and its row: the position of its
    (station, charge, stick) in a list of keys."""

    stats: SeriesStats
    sensor: np.ndarray
    row: np.ndarray


def keep_series_stats(
    conn: Connection,
    new: SeriesStats,
    ids: np.ndarray,
    keys: pd.DataFrame,
    maybe: Container[tuple] | None = None,
) -> None:
    """Merge ``new`` (the statistics of readings just stored, none of them counted before,
    by series id) into the rows of their sticks at their stations; a stick without a row gets
    one. ``keys``: the series' names (station, charge_id, stick_id, sensor) of the series
    ``ids``, among which are all of ``new``'s. ``maybe``: the (station, charge_id, stick_id)
    that may have a row (the writer knows the series stored before the batch; ``None``: any
    may), the only ones looked up: a first ingest of a file looks up none."""
    if not len(new):
        return
    at = pd.Index(ids).get_indexer(new.ids)
    names = [keys[c].to_numpy(dtype=object)[at] for c in SERIES_COLUMNS]
    charge, stick, station, sensor_name = names
    positions: dict[tuple, int] = {}
    row = np.fromiter(
        (positions.setdefault(k, len(positions)) for k in zip(station, charge, stick, strict=True)),
        dtype=np.int64,
        count=len(at),
    )
    rows = list(positions)
    sensor = sensor_codes(conn, list(zip(station, sensor_name, strict=True)))
    incoming = _Owned(new, sensor, row)
    looked = np.arange(len(rows)) if maybe is None else _looked(rows, maybe)
    stored, stale = _stored(conn, [rows[k] for k in looked.tolist()])
    stored, stale = _Owned(stored.stats, stored.sensor, looked[stored.row]), looked[stale]
    if len(stale):  # their readings include the new ones already
        rebuild_series_stats(conn, [rows[k] for k in stale])
        incoming = _without_rows(incoming, stale)
    _write(conn, rows, _merged(stored, incoming), np.unique(stored.row))


def _looked(rows: list[tuple], maybe: Container[tuple]) -> np.ndarray:
    """The positions of the ``rows`` that ``maybe`` holds."""
    return np.array([k for k, key in enumerate(rows) if key in maybe], dtype=np.int64)


def _merged(stored: _Owned, incoming: _Owned) -> _Owned:
    """The entries of both, a series in both merged (its sensor and row are the same)."""
    stats = stored.stats.merge(incoming.stats) if len(stored.stats) else incoming.stats
    ids = np.concatenate([incoming.stats.ids, stored.stats.ids])
    first = np.unique(ids, return_index=True)[1]  # np.unique sorts, as merge's union does
    sensor = np.concatenate([incoming.sensor, stored.sensor])[first]
    row = np.concatenate([incoming.row, stored.row])[first]
    return _Owned(stats, sensor, row)


def _without_rows(owned: _Owned, rows: np.ndarray) -> _Owned:
    keep = np.flatnonzero(~np.isin(owned.row, rows))
    return _Owned(owned.stats.take(keep), owned.sensor[keep], owned.row[keep])


def sensor_codes(conn: Connection, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """The code in ``sensor_codes`` of each of these (station, sensor), in order, after
    giving one to those that have none (the ingester's, in its transaction)."""
    known = dict(_codes(conn))
    missing = list(dict.fromkeys(p for p in pairs if p not in known))
    if missing:
        insert_columns(
            conn,
            "INSERT INTO sensor_codes (station, sensor)",
            ("text", "text"),
            [[s for s, _ in missing], [s for _, s in missing]],
            "ON CONFLICT DO NOTHING",
        )
        known = dict(_codes(conn))
    return np.fromiter((known[p] for p in pairs), dtype=np.int64, count=len(pairs))


def _codes(conn: Connection) -> Iterable[tuple[tuple[str, str], int]]:
    for code, station, sensor in fetch_tuples(
        conn, "SELECT code, station, sensor FROM sensor_codes", []
    ):
        yield (station, sensor), int(code)


def rebuild_series_stats(
    conn: Connection, sticks: Iterable[tuple[str, str, str]] | None = None
) -> int:
    """Recompute the rows of these (station, charge_id, stick_id) (all: ``None``) from their
    stored readings, in ``conn``'s transaction; a stick without readings at the station
    loses its row. All go by ranges of :data:`REBUILD_CHUNK` series ids, the sticks whose
    series fall in the range (a stick whose series straddle two ranges is recomputed twice,
    the same both times). Returns the series whose statistics were written."""
    if sticks is None:
        return sum(_rebuild(conn, _sticks_between(conn, *b)) for b in _id_bounds(conn))
    listed = sorted(set(map(tuple, sticks)))
    return sum(_rebuild(conn, listed[i : i + IN_CHUNK]) for i in range(0, len(listed), IN_CHUNK))


def rebuild_all_series_stats(store: Store) -> int:
    """:func:`rebuild_series_stats` of every stick, one writing transaction (the ingestion
    lock) per range of series ids: batches go on between the ranges, and a range is
    consistent with the readings when it commits. Returns the series written."""
    with store.engine.connect() as conn:
        bounds = _id_bounds(conn)
    written = 0
    for lo, hi in bounds:
        with store.write() as conn:
            written += _rebuild(conn, _sticks_between(conn, lo, hi))
    return written


def _id_bounds(conn: Connection) -> list[tuple[int, int]]:
    """The first and last series id of each range of :data:`REBUILD_CHUNK` ids."""
    top = int(conn.execute(select(func.max(Series.__table__.c.id))).scalar() or 0)
    return [(lo, lo + REBUILD_CHUNK - 1) for lo in range(1, top + 1, REBUILD_CHUNK)]


def _sticks_between(conn: Connection, lo: int, hi: int) -> list[tuple]:
    """The (station, charge_id, stick_id) of the series with ids ``lo`` to ``hi``."""
    mark = placeholders(conn, 1)
    sql = f"SELECT DISTINCT {', '.join(STICK_KEY)} FROM series WHERE id BETWEEN {mark} AND {mark}"
    return [tuple(r) for r in fetch_tuples(conn, sql, [lo, hi])]


def _rebuild(conn: Connection, keys: list[tuple]) -> int:
    """Replace the rows of ``keys`` by the statistics of their series' readings."""
    if not keys:
        return 0
    series = fetch_tuples(conn, *_keyed(conn.dialect.name, "s.id, s.sensor", "series s", keys))
    at = {int(sid): (int(k), sensor) for k, sid, sensor in series}
    listed = sorted(at)
    readings = [
        row
        for i in range(0, len(listed), IN_CHUNK)
        for row in fetch_tuples(
            conn,
            "SELECT series_id, ts_us, value FROM readings "
            f"WHERE series_id IN ({placeholders(conn, len(listed[i : i + IN_CHUNK]))})",
            listed[i : i + IN_CHUNK],
        )
    ]
    sid, ts, value = (
        np.array(column, dtype=dtype)
        for column, dtype in zip(
            zip(*readings, strict=True) if readings else ([], [], []),
            (np.int64, np.int64, np.float64),
            strict=True,
        )
    )
    stats = series_stats(sid, ts, value)
    row = np.array([at[i][0] for i in stats.ids.tolist()], dtype=np.int64)
    pairs = [(keys[k][0], at[i][1]) for k, i in zip(row.tolist(), stats.ids.tolist(), strict=True)]
    sensor = sensor_codes(conn, pairs)
    _delete(conn, keys)
    _write(conn, keys, _Owned(stats, sensor, row))
    return len(stats)


def _keyed(dialect: str, columns: str, table: str, keys: Sequence[tuple]) -> tuple[str, list]:
    """``SELECT <position of the key>, {columns} FROM {table}`` for the rows of ``table``
    (aliased, with columns station, charge_id, stick_id) of these (station, charge_id,
    stick_id): the keys as one parameter, as in :func:`stick_query`."""
    alias = table.split()[-1]
    if dialect == "postgresql":
        match = " AND ".join(f"{alias}.{c} = w.{c}" for c in STICK_KEY)
        sql = (
            "SELECT x.* FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS "
            f"w({', '.join(STICK_KEY)}, pos) CROSS JOIN LATERAL (SELECT w.pos - 1, {columns} "
            f"FROM {table} WHERE {match} OFFSET 0) x"
        )
        return sql, [[k[j] for k in keys] for j in range(len(STICK_KEY))]
    match = " AND ".join(
        f"{alias}.{c} = json_extract(w.value, '$[{j}]')" for j, c in enumerate(STICK_KEY)
    )
    sql = f"SELECT w.key, {columns} FROM json_each(?) AS w CROSS JOIN {table} ON {match}"
    return sql, [json.dumps([list(k) for k in keys])]


def _stored(conn: Connection, keys: list[tuple]) -> tuple[_Owned, np.ndarray]:
    """The stored statistics of these rows of the current version, and the positions of
    those stored under another version (no keys: no query)."""
    fetched = []
    if keys:
        fetched = fetch_tuples(conn, *_keyed(conn.dialect.name, "t.version, t.stats",
                                             "stick_stats t", keys))  # fmt: skip
    positions = np.array([r[0] for r in fetched], dtype=np.int64)
    current = np.array([r[1] == STATS_VERSION for r in fetched], dtype=bool)
    counts, records = _records([r[2] for r in fetched], current)
    row = np.repeat(positions[current], counts)
    order = np.argsort(records["series_id"], kind="stable")
    records, row = records[order], row[order]
    return _Owned(from_records(records), records["sensor"].copy(), row), positions[~current]


def _records(blobs: Sequence[bytes], keep: np.ndarray | None = None):
    """How many series each of these ``stats`` values holds (those ``keep`` marks) and all
    their records (:data:`RECORD`), in order."""
    if keep is not None:
        blobs = [b for b, k in zip(blobs, keep.tolist(), strict=True) if k]
    counts = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // RECORD.itemsize
    return counts, np.frombuffer(b"".join(blobs), dtype=RECORD)


def _write(
    conn: Connection, keys: Sequence[tuple], owned: _Owned, stored: np.ndarray | None = None
) -> None:
    """Write a row per key that ``owned`` has entries of (:func:`_rows`). The keys at the
    positions ``stored`` may have a row: the driver's ``executemany`` of one ``INSERT ... ON
    CONFLICT DO UPDATE`` replaces them. On PostgreSQL that beat one statement over arrays
    (:func:`~qcllp.store.insert_columns`) 1.4-1.5x for these rows of text keys and
    ``bytea``, from 100 rows (an intake batch of single-reading MQTT messages, rows that span
    batches) to 10,000 (``benchmarks/bench_stats_upsert.py``). The other keys are new: on
    PostgreSQL they go by ``COPY`` (:func:`~qcllp.store.driver_sql.copy_rows`, a quarter of
    the upsert's time for the 50,000 rows of a million readings, ``benchmarks/
    bench_ingest.py``), on SQLite by the same ``executemany`` (as fast as a plain insert
    there)."""
    if not len(owned.stats):
        return
    positions, columns = _rows(keys, owned)
    with driver_cursor(conn) as cursor:
        if conn.dialect.name == "postgresql":
            new = ~np.isin(positions, np.empty(0) if stored is None else stored)
            if new.any():
                copy_rows(cursor, f"COPY stick_stats ({', '.join(ROW_COLUMNS)})",
                          [_compress(c, new) for c in columns], ROW_TYPES)  # fmt: skip
                columns = [_compress(c, ~new) for c in columns]
        if not columns[0]:
            return
        update = ", ".join(f"{c} = excluded.{c}" for c in ROW_COLUMNS[len(STICK_KEY) :])
        cursor.executemany(
            f"INSERT INTO stick_stats ({', '.join(ROW_COLUMNS)}) "
            f"VALUES ({placeholders(conn, len(ROW_COLUMNS))}) "
            f"ON CONFLICT ({', '.join(STICK_KEY)}) DO UPDATE SET {update}",
            list(zip(*columns, strict=True)),
        )


def _compress(values: list, keep: np.ndarray) -> list:
    return [v for v, k in zip(values, keep.tolist(), strict=True) if k]


def _rows(keys: Sequence[tuple], owned: _Owned) -> tuple[np.ndarray, list[list]]:
    """The positions in ``keys`` of the rows of ``owned``'s entries and their columns
    (:data:`ROW_COLUMNS`): per key its records in series order, their first and last time."""
    order = np.lexsort((owned.stats.ids, owned.row))
    row = owned.row[order]
    data = to_records(owned.stats.take(order), owned.sensor[order])
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    ends = np.r_[starts[1:], len(row)]
    raw, size = data.tobytes(), RECORD.itemsize
    key = [keys[k] for k in row[starts].tolist()]
    return row[starts], [
        *([k[j] for k in key] for j in range(len(STICK_KEY))),
        [STATS_VERSION] * len(key),
        np.minimum.reduceat(data["t0_us"], starts).tolist(),
        np.maximum.reduceat(data["t1_us"], starts).tolist(),
        [raw[a * size : b * size] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)],
    ]


def _delete(conn: Connection, keys: Sequence[tuple]) -> None:
    """Delete the rows of these keys (the driver's ``executemany``: a rebuild's, not a hot
    path)."""
    match = " AND ".join(f"{c} = {placeholders(conn, 1)}" for c in STICK_KEY)
    with driver_cursor(conn) as cursor:
        cursor.executemany(f"DELETE FROM stick_stats WHERE {match}", [tuple(k) for k in keys])


def read_series_stats(
    conn: Connection, stations: Sequence[str], charge_ids: Sequence[str] | None = None
) -> pd.DataFrame:
    """The statistics of these stations' series (of these charges), with the series' names:
    columns :data:`SERIES_COLUMNS` and :data:`~qcllp.store.series_stats.STAT_COLUMNS`, one
    row per series that has readings. Rows of another version raise: rebuild them first.

    The records are made columns by NumPy and the names repeated per series from their
    row's: pandas' per-column checks on the rows would cost as much again as the database's
    fetch. The four names stay Python strings (``object`` columns) rather than pandas 3's
    Arrow-backed text: the conversion there and back (the scorer's keys, the features'
    codes) was a fifth of a line's step with the scaling of
    :class:`qcllp.training.methods.Standardized` (``benchmarks/bench_step.py``, issue 35)."""
    listed = list(stations)
    sql = (
        f"SELECT {', '.join(ROW_COLUMNS[:4])}, stats FROM stick_stats "
        f"WHERE station IN ({placeholders(conn, len(listed))})"
    )
    rows: list[tuple] = []
    for part in _id_chunks(charge_ids):
        if part is None:
            rows += fetch_tuples(conn, sql, listed)
        else:
            where = f" AND charge_id IN ({placeholders(conn, len(part))})"
            rows += fetch_tuples(conn, sql + where, [*listed, *part])
    _refuse_stale(sum(r[3] != STATS_VERSION for r in rows))
    counts, records = _records([r[4] for r in rows])
    names = {
        c: np.repeat(np.array([r[k] for r in rows], dtype=object), counts)
        for k, c in enumerate(STICK_KEY)
    }
    known = dict(_codes(conn))  # after the rows: it knows all their codes
    by_code = np.empty(max(known.values(), default=0) + 1, dtype=object)
    for (_, sensor), code in known.items():
        by_code[code] = sensor
    names["sensor"] = by_code[records["sensor"]]
    stats = from_records(records)
    data: dict[str, object] = {
        c: pd.Series(names[c], dtype=object, copy=False) for c in SERIES_COLUMNS
    }
    data.update({c: getattr(stats, c) for c in STAT_COLUMNS})
    return pd.DataFrame(data, copy=False)


def fetch_stick_stats(
    conn: Connection, sticks: Sequence[tuple[str, str]], pairs: Sequence[tuple[str, str]]
) -> SeriesStats:
    """The kept statistics of these sticks' series of these ``(station, sensor)`` pairs, coded
    for the feature table: ``ids`` = the stick's position in ``sticks`` x ``len(pairs)`` + the
    pair's position in ``pairs`` (sorted; a series without readings has no entry). Rows of
    another version raise, as in :func:`read_series_stats`.

    What a scorer reads for the sticks it decides: one row per stick and station, found by
    its key, its records decoded by one ``frombuffer`` and their sensor codes mapped to the
    pairs' positions by an array. No name comes back from the database. A row per series
    with its counts as columns, the layout before, cost the driver's fetch three times the
    rows, five values each, and a backlog's drain 0.5 s of its 1.8 (``benchmarks/
    bench_scorer.py`` backlog, issue 34). Costs in proportion to the sticks asked for."""
    rows: list[tuple] = []
    if sticks:
        stations = list(dict.fromkeys(name for name, _ in pairs))
        rows = fetch_tuples(conn, *stick_query(conn.dialect.name, stations, sticks))
    codes = dict(_codes(conn)) if rows else {}  # after the rows: it knows all their codes
    positions = np.array([r[0] for r in rows], dtype=np.int64)
    _refuse_stale(int((positions < 0).sum()))
    counts, records = _records([r[1] for r in rows])
    pair_of = np.full(max(codes.values(), default=0) + 1, -1, dtype=np.int64)
    for k, pair in enumerate(pairs):
        if pair in codes:
            pair_of[codes[pair]] = k
    sensor = records["sensor"]
    pair = pair_of[sensor]
    ids = np.repeat(positions, counts) * len(pairs) + pair
    wanted = np.flatnonzero(pair >= 0)
    order = wanted[np.argsort(ids[wanted], kind="stable")]
    return from_records(records[order], ids[order])


def stick_query(
    dialect: str, stations: Sequence[str], sticks: Sequence[tuple[str, str]]
) -> tuple[str, list]:
    """:func:`fetch_stick_stats`' statement on ``dialect`` (``sqlite`` or ``postgresql``) and
    its parameters, for the driver's own cursor (the backlog benchmark's floor sends it
    too). A row is the stick's position in ``sticks`` (-1 for a row of another version) and
    its ``stats``. The sticks go as one parameter: a JSON array of pairs on SQLite
    (``json_each``, its position the ``key``; ``CROSS JOIN`` keeps the planner on a seek
    of the primary key per stick and station rather than a scan), two text arrays on
    PostgreSQL (``unnest ... WITH ORDINALITY``), each stick's rows in a ``LATERAL``
    subquery that ``OFFSET 0`` keeps from being merged into a join: planned as a join, a
    database without fresh statistics (a new plant, before autovacuum's first ``ANALYZE``)
    hashed the whole table of statistics for a step of 50 sticks, 3 ms a station against
    0.4 ms (``benchmarks/bench_step.py``: 12.8 ms a step became 48)."""
    listed = list(stations)
    if dialect == "postgresql":
        sql = (
            "SELECT CASE WHEN x.version = %s THEN w.pos - 1 ELSE -1 END, x.stats "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS w(charge_id, stick_id, pos) "
            "CROSS JOIN LATERAL (SELECT t.version, t.stats FROM stick_stats t "
            "WHERE t.station = ANY(%s) AND t.charge_id = w.charge_id "
            "AND t.stick_id = w.stick_id OFFSET 0) x"
        )
        charges, ids = [c for c, _ in sticks], [s for _, s in sticks]
        return sql, [STATS_VERSION, charges, ids, listed]
    sql = (
        "SELECT CASE WHEN t.version = ? THEN w.key ELSE -1 END, t.stats FROM json_each(?) AS w "
        f"CROSS JOIN stick_stats AS t ON t.station IN ({', '.join('?' * len(listed))}) "
        "AND t.charge_id = json_extract(w.value, '$[0]') "
        "AND t.stick_id = json_extract(w.value, '$[1]')"
    )
    document = json.dumps(sticks if isinstance(sticks, list) else list(sticks))  # tuples: arrays
    return sql, [STATS_VERSION, document, *listed]


def _refuse_stale(rows: int) -> None:
    """A read of statistics that met ``rows`` rows of another version stops here: their
    features would be another definition's."""
    if rows:
        raise ValueError(
            f"{rows} rows of stick_stats are of another version than {STATS_VERSION}: "
            "run qcllp features rebuild"
        )


def stats_count(conn: Connection) -> int:
    """The series whose statistics ``stick_stats`` holds (the check after a rebuild)."""
    total = conn.exec_driver_sql("SELECT sum(length(stats)) FROM stick_stats").scalar()
    return int(total or 0) // RECORD.itemsize


def _id_chunks(ids: Sequence[str] | None):
    if ids is None:
        yield None
        return
    listed = list(dict.fromkeys(str(i) for i in ids))
    for start in range(0, len(listed), IN_CHUNK):
        yield listed[start : start + IN_CHUNK]
