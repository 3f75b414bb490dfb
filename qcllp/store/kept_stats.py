"""The ``series_stats`` table: the series' statistics kept as readings arrive, rebuilt from
the readings on demand, and read back per station and charge.

* :func:`keep_series_stats` merges the statistics of a batch's new readings into the stored
  rows (:meth:`qcllp.store.series_stats.SeriesStats.merge`), inside the ingester's
  transaction: the rows and the readings commit together, and the writer lock the batch
  holds means no other batch merges into the same rows meanwhile. A stored row of another
  :data:`~qcllp.store.series_stats.STATS_VERSION` is not merged into: its series is rebuilt
  from its readings instead.
* :func:`rebuild_series_stats` recomputes rows from the readings (some series, or all of
  them a chunk of series at a time): ``qcllp features rebuild``, the migration that created
  the table, and retention after it drops a month.
* :func:`read_series_stats` is what training and the scorers read instead of the readings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from sqlalchemy import Connection, delete, func, select

from qcllp.store.core import IN_CHUNK, Store, rows_frame
from qcllp.store.driver_sql import (
    copy_binary,
    driver_cursor,
    fetch_tuples,
    insert_columns,
    placeholders,
)
from qcllp.store.schema import Reading, Series, SeriesStatistics
from qcllp.store.series_stats import (
    COUNT_COLUMNS,
    MOMENT_COLUMNS,
    STATS_VERSION,
    SeriesStats,
    series_stats,
)

__all__ = [
    "SERIES_COLUMNS",
    "fetch_series_stats",
    "fetch_stick_stats",
    "keep_series_stats",
    "read_series_stats",
    "rebuild_all_series_stats",
    "rebuild_series_stats",
    "series_stats_frame",
    "stats_count",
    "stick_query",
]

REBUILD_CHUNK = 20_000  # series recomputed at a time (~110k readings at 5.5 a series)
SERIES_COLUMNS = ("charge_id", "stick_id", "station", "sensor")
STORED = ("version", *COUNT_COLUMNS, "moments")  # a row's columns after its series_id
MOMENTS_DTYPE = np.dtype("<f8")  # the moments' byte order, whatever the machine's
# PostgreSQL types of series_id and the integers of STORED (version, n, t0_us, t1_us)
STORED_TYPES = ("integer", "integer", "integer", "bigint", "bigint")


def keep_series_stats(
    conn: Connection, new: SeriesStats, existed: np.ndarray | None = None
) -> None:
    """Merge ``new`` (the statistics of readings just stored, none of them counted before)
    into the rows of their series; a series without a row gets one. ``existed``: the ids of
    the series that may have a row (the writer knows which series it created; ``None``: any
    may), the only ones looked up."""
    if not len(new):
        return
    maybe = new.ids if existed is None else np.intersect1d(new.ids, existed)
    stored, stale = _stored(conn, maybe)
    if len(stale):
        rebuild_series_stats(conn, stale)  # the readings include the new ones already
        new = new.take(np.flatnonzero(~np.isin(new.ids, stale)))
    merged = stored.merge(new) if len(stored) else new
    had_row = np.isin(merged.ids, stored.ids)
    _upsert(conn, merged.take(np.flatnonzero(had_row)))
    _insert(conn, merged.take(np.flatnonzero(~had_row)))


def rebuild_series_stats(conn: Connection, series_ids: Iterable[int] | None = None) -> int:
    """Recompute the rows of ``series_ids`` (all series: ``None``) from their stored
    readings, in ``conn``'s transaction; a series without readings loses its row. All
    series go by ranges of :data:`REBUILD_CHUNK` ids (a primary-key range scan of
    ``readings``), given ones by lists of :data:`~qcllp.store.core.IN_CHUNK`. Returns the
    rows written."""
    if series_ids is None:
        return sum(_rebuild(conn, *where) for where in _id_ranges(conn))
    listed = np.unique(np.fromiter(series_ids, dtype=np.int64)).tolist()
    r, t = Reading.__table__, SeriesStatistics.__table__
    return sum(
        _rebuild(conn, r.c.series_id.in_(chunk), t.c.series_id.in_(chunk))
        for chunk in (listed[i : i + IN_CHUNK] for i in range(0, len(listed), IN_CHUNK))
    )


def rebuild_all_series_stats(store: Store) -> int:
    """:func:`rebuild_series_stats` of every series, one writing transaction (the ingestion
    lock) per range of ids: batches go on between the ranges, and a range is consistent with
    the readings when it commits. Returns the rows written."""
    with store.engine.connect() as conn:
        ranges = list(_id_ranges(conn))
    written = 0
    for where in ranges:
        with store.write() as conn:
            written += _rebuild(conn, *where)
    return written


def _id_ranges(conn: Connection):
    """Per range of :data:`REBUILD_CHUNK` series ids, the conditions on ``readings`` and on
    ``series_stats``."""
    r, t = Reading.__table__, SeriesStatistics.__table__
    top = int(conn.execute(select(func.max(Series.__table__.c.id))).scalar() or 0)
    for lo in range(1, top + 1, REBUILD_CHUNK):
        hi = lo + REBUILD_CHUNK - 1
        yield r.c.series_id.between(lo, hi), t.c.series_id.between(lo, hi)


def _rebuild(conn: Connection, of_readings, of_rows) -> int:  # noqa: ANN001 - conditions
    """Replace the rows ``of_rows`` by the statistics of the readings ``of_readings``."""
    r = Reading.__table__
    rows = conn.execute(
        select(r.c.series_id, r.c.ts_us, r.c.value)
        .where(of_readings)
        .order_by(r.c.series_id, r.c.ts_us)
    ).all()
    frame = rows_frame(rows, ["series_id", "ts_us", "value"])
    stats = series_stats(frame["series_id"], frame["ts_us"], frame["value"])
    conn.execute(delete(SeriesStatistics.__table__).where(of_rows))
    _insert(conn, stats)
    return len(stats)


def read_series_stats(
    conn: Connection, stations: Sequence[str], charge_ids: Sequence[str] | None = None
) -> pd.DataFrame:
    """The rows of these stations' series (of these charges), with the series' names:
    columns :data:`SERIES_COLUMNS` and :data:`~qcllp.store.series_stats.STAT_COLUMNS`, one
    row per series that has readings. Rows of another version raise: rebuild them first.
    :func:`fetch_series_stats` and :func:`series_stats_frame`; a scorer narrows the rows to
    its sticks in between."""
    return series_stats_frame(fetch_series_stats(conn, stations, charge_ids))


def fetch_series_stats(
    conn: Connection, stations: Sequence[str], charge_ids: Sequence[str] | None = None
) -> list[tuple]:
    """The rows of :func:`read_series_stats` as the driver returns them: plain tuples of the
    four names (:data:`SERIES_COLUMNS`) and the stored columns (version, counts, packed
    moments). Through the driver's own cursor: SQLAlchemy's rows cost as much again."""
    listed = list(stations)
    sql = (
        f"SELECT {', '.join(f's.{c}' for c in SERIES_COLUMNS)}, "
        f"{', '.join(f't.{c}' for c in STORED)} "
        "FROM series s JOIN series_stats t ON t.series_id = s.id "
        f"WHERE s.station IN ({placeholders(conn, len(listed))})"
    )

    def query(part: list[str] | None) -> tuple[str, list]:
        if part is None:
            return sql, listed
        return f"{sql} AND s.charge_id IN ({placeholders(conn, len(part))})", [*listed, *part]

    return _fetch(conn, map(query, _id_chunks(charge_ids)))


def fetch_stick_stats(
    conn: Connection, sticks: Sequence[tuple[str, str]], pairs: Sequence[tuple[str, str]]
) -> SeriesStats:
    """The kept statistics of these sticks' series of these ``(station, sensor)`` pairs, coded
    for the feature table: ``ids`` = the stick's position in ``sticks`` x ``len(pairs)`` + the
    pair's position in ``pairs`` (sorted; a series without readings has no row). Rows of
    another version raise, as in :func:`series_stats_frame`.

    What a scorer reads for the sticks it decides. The database matches each stick's series
    by the unique key's prefix (station, charge_id, stick_id) and returns numbers only: the
    stick's position and the pair's come from the query, so no name is turned into a Python
    string, narrowed to the sticks wanted or factorized again -- by-charge rows with their four
    names, filtered in Python, cost a backlog's drain a quarter of its time
    (``benchmarks/bench_scorer.py`` backlog, issue 34). Costs in proportion to the sticks
    asked for."""
    rows: list[tuple] = []
    if sticks:
        for station in dict.fromkeys(name for name, _ in pairs):
            sensors = {se: k for k, (st, se) in enumerate(pairs) if st == station}
            sql, parameters = stick_query(conn.dialect.name, station, sensors, len(pairs), sticks)
            rows += fetch_tuples(conn, sql, parameters)
    columns = _transposed(rows, len(STORED))
    ids = columns[0].astype(np.int64)
    _refuse_stale(int((ids < 0).sum()))
    data = _decoded(columns[1:], COUNT_COLUMNS)  # the version went into the ids
    order = np.argsort(ids, kind="stable")
    return SeriesStats(ids=ids[order], **{c: v[order] for c, v in data.items()})


def stick_query(
    dialect: str,
    station: str,
    sensors: dict[str, int],
    width: int,
    sticks: Sequence[tuple[str, str]],
) -> tuple[str, list]:
    """:func:`fetch_stick_stats`' statement for one station on ``dialect`` (``sqlite`` or
    ``postgresql``; ``sensors``: the station's configured sensors and their pair codes;
    ``width``: the number of pairs) and its parameters, for the driver's own cursor (the
    backlog benchmark's floor sends it too). A row
    is the series' coded id (-1 for a row of another version) and its counts and moments:
    five values, where the stick's position, the pair's code and the version as three took
    the driver's fetch a tenth longer. The sticks go as one parameter: a JSON array of pairs
    on SQLite (``json_each``, its position the ``key``; ``CROSS JOIN`` keeps the planner on
    the index seek per stick rather than a scan of the station's series), two text arrays
    on PostgreSQL (``unnest ... WITH ORDINALITY``), each stick's series in a ``LATERAL``
    subquery that ``OFFSET 0`` keeps from being merged into a join: planned as a join, a
    database without fresh statistics (a new plant, before autovacuum's first ``ANALYZE``)
    hashed the whole ``series_stats`` table for a step of 50 sticks, 3 ms a station against
    0.4 ms (``benchmarks/bench_step.py``: 12.8 ms a step became 48)."""
    when = " ".join(["WHEN {m} THEN {m}"] * len(sensors))
    stored = ", ".join(f"t.{c}" for c in STORED[1:])  # the counts and the moments
    if dialect == "postgresql":
        coded = (
            f"CASE WHEN t.version = %s THEN (w.pos - 1) * %s + "
            f"CASE s.sensor {when.format(m='%s')} END ELSE -1 END"
        )
        sql = (
            "SELECT x.* FROM unnest(%s::text[], %s::text[]) "
            "WITH ORDINALITY AS w(charge_id, stick_id, pos) CROSS JOIN LATERAL "
            f"(SELECT {coded}, {stored} FROM series s JOIN series_stats t ON t.series_id = s.id "
            "WHERE s.station = %s AND s.charge_id = w.charge_id AND s.stick_id = w.stick_id "
            "AND s.sensor = ANY(%s) OFFSET 0) x"
        )
        charges, ids = [c for c, _ in sticks], [s for _, s in sticks]
        head = [STATS_VERSION, width, *_flat(sensors)]
        return sql, [charges, ids, *head, station, list(sensors)]
    coded = (
        f"CASE WHEN t.version = ? THEN w.key * ? + "
        f"CASE s.sensor {when.format(m='?')} END ELSE -1 END"
    )
    sql = (
        f"SELECT {coded}, {stored} FROM json_each(?) AS w "
        "CROSS JOIN series AS s ON s.station = ? "
        "AND s.charge_id = json_extract(w.value, '$[0]') "
        "AND s.stick_id = json_extract(w.value, '$[1]') "
        f"AND s.sensor IN ({', '.join('?' * len(sensors))}) "
        "CROSS JOIN series_stats AS t ON t.series_id = s.id"
    )
    document = json.dumps(sticks if isinstance(sticks, list) else list(sticks))  # tuples: arrays
    return sql, [STATS_VERSION, width, *_flat(sensors), document, station, *sensors]


def _flat(sensors: dict[str, int]) -> list:
    """The ``CASE``'s parameters: each sensor's name, then its code."""
    return [value for name, code in sensors.items() for value in (name, code)]


def series_stats_frame(rows: list[tuple]) -> pd.DataFrame:
    """:func:`read_series_stats`' frame of rows from :func:`fetch_series_stats`; rows of
    another version raise.

    The tuples are made columns by NumPy: pandas' per-column checks on the rows would cost as
    much again as the database's fetch. The four names stay Python strings (``object``
    columns) rather than pandas 3's Arrow-backed text: the conversion there and back (the
    scorer's keys, the features' codes) was a fifth of a line's step with the scaling of
    :class:`qcllp.training.methods.Standardized` (``benchmarks/bench_step.py``, issue 35)."""
    columns = _transposed(rows, len(SERIES_COLUMNS) + len(STORED))
    data: dict[str, object] = {
        name: pd.Series(values, dtype=object, copy=False)
        for name, values in zip(SERIES_COLUMNS, columns, strict=False)
    }
    data.update(_decoded(columns[len(SERIES_COLUMNS) :]))
    _refuse_stale(int((data.pop("version") != STATS_VERSION).sum()))
    return pd.DataFrame(data, copy=False)


def _refuse_stale(rows: int) -> None:
    """A read of statistics that met ``rows`` rows of another version stops here: their
    features would be another definition's."""
    if rows:
        raise ValueError(
            f"{rows} rows of series_stats are of another version than {STATS_VERSION}: "
            "run qcllp features rebuild"
        )


def stats_count(conn: Connection) -> int:
    """The rows of ``series_stats`` (the check after a rebuild)."""
    return int(conn.execute(select(func.count()).select_from(SeriesStatistics.__table__)).scalar())


def _stored(conn: Connection, ids: np.ndarray) -> tuple[SeriesStats, np.ndarray]:
    """The stored rows of these series of the current version, and the ids of those stored
    under another version."""
    listed = ids.tolist()
    select_stored = f"SELECT series_id, {', '.join(STORED)} FROM series_stats WHERE series_id IN"
    rows = _fetch(
        conn,
        (
            (f"{select_stored} ({placeholders(conn, len(part))})", part)
            for part in (listed[i : i + IN_CHUNK] for i in range(0, len(listed), IN_CHUNK))
        ),
    )
    rows.sort()
    columns = _transposed(rows, 1 + len(STORED))
    ids = columns[0].astype(np.int64)
    data = _decoded(columns[1:])
    current = data.pop("version") == STATS_VERSION
    kept = SeriesStats(ids=ids, **{c: v for c, v in data.items()})
    return kept.take(np.flatnonzero(current)), ids[~current]


def _fetch(conn: Connection, queries: Iterable[tuple[str, list]]) -> list[tuple]:
    """The rows of each ``(sql, parameters)`` as plain tuples (:func:`.driver_sql.fetch_tuples`)."""
    return [row for sql, parameters in queries for row in fetch_tuples(conn, sql, parameters)]


def _transposed(rows: list[tuple], width: int) -> list[np.ndarray]:
    """The fetched rows' columns, each an array of Python objects: one two-dimensional
    array sliced, a third of the time ``zip(*rows)`` took (``benchmarks/bench_scorer.py``
    backlog, issue 34)."""
    table = np.array(rows, dtype=object) if rows else np.empty((0, width), dtype=object)
    return [table[:, k] for k in range(width)]


def _decoded(
    columns: Sequence[np.ndarray], ints: Sequence[str] = STORED[:-1]
) -> dict[str, np.ndarray]:
    """The fetched columns of :data:`STORED` (or of the integers ``ints`` and the moments) as
    arrays: version and counts int64, the ``moments`` unpacked into one float64 array per
    figure."""
    *integers, moments = columns
    out = {name: values.astype(np.int64) for name, values in zip(ints, integers, strict=True)}
    packed = np.frombuffer(b"".join(moments.tolist()), dtype=MOMENTS_DTYPE)
    packed = packed.reshape(-1, len(MOMENT_COLUMNS))
    out.update({c: packed[:, k].astype(np.float64) for k, c in enumerate(MOMENT_COLUMNS)})
    return out


def _moments(stats: SeriesStats) -> np.ndarray:
    """Per series a row of its eight moment figures as little-endian float64."""
    return np.column_stack([getattr(stats, c) for c in MOMENT_COLUMNS]).astype(MOMENTS_DTYPE)


def _packed(stats: SeriesStats) -> list[bytes]:
    """Per series its ``moments`` value: :func:`_moments`' row as bytes."""
    raw = _moments(stats)
    data, width = raw.tobytes(), raw.shape[1] * MOMENTS_DTYPE.itemsize
    return [data[i : i + width] for i in range(0, len(data), width)]


def _insert(conn: Connection, stats: SeriesStats) -> None:
    """Write the rows of series that have none: on PostgreSQL by a binary ``COPY`` (its
    ``executemany`` of the upsert made a 1M-reading ingest 36 % slower), on SQLite by
    :func:`_upsert` (as fast as a plain insert there)."""
    if not len(stats) or conn.dialect.name != "postgresql":
        _upsert(conn, stats)
        return
    names = ("series_id", *STORED)
    columns = [*_integer_columns(stats), _moments(stats)]
    width = MOMENTS_DTYPE.itemsize * len(MOMENT_COLUMNS)
    with driver_cursor(conn) as cursor:
        copy_binary(cursor, f"COPY series_stats ({', '.join(names)})", columns,
                    (*STORED_TYPES, f"bytea({width})"))  # fmt: skip


def _integer_columns(stats: SeriesStats) -> list[np.ndarray]:
    """The columns ``series_id``, ``version`` and :data:`COUNT_COLUMNS` of ``stats``' rows."""
    return [
        stats.ids,
        np.full(len(stats), STATS_VERSION),
        *(getattr(stats, c) for c in COUNT_COLUMNS),
    ]


def _upsert(conn: Connection, stats: SeriesStats) -> None:
    """Write the rows of ``stats``, replacing the stored ones of the same series: one
    ``INSERT ... ON CONFLICT (series_id) DO UPDATE`` through
    :func:`~qcllp.store.insert_columns`: on PostgreSQL one statement over arrays, a fifth
    less than the driver's ``executemany`` of a statement per row at an intake batch's size
    (series that span batches, as every batch of single-reading MQTT messages brings:
    ``benchmarks/bench_stats_upsert.py``); on SQLite the driver's ``executemany`` of plain
    tuples."""
    if not len(stats):
        return
    names = ("series_id", *STORED)
    update = ", ".join(f"{c} = excluded.{c}" for c in names[1:])
    insert_columns(
        conn,
        f"INSERT INTO series_stats ({', '.join(names)})",
        (*STORED_TYPES, "bytea"),
        [*(column.tolist() for column in _integer_columns(stats)), _packed(stats)],
        f"ON CONFLICT (series_id) DO UPDATE SET {update}",
    )


def _id_chunks(ids: Sequence[str] | None):
    if ids is None:
        yield None
        return
    listed = list(dict.fromkeys(str(i) for i in ids))
    for start in range(0, len(listed), IN_CHUNK):
        yield listed[start : start + IN_CHUNK]
