"""Monthly time partitions of ``readings`` on PostgreSQL: created as data needs them, dropped
by retention.

Years of readings are billions of rows. PostgreSQL's declarative partitioning (``PARTITION BY
RANGE (ts_us)``, migration 0006) keeps each month in its own table with its own primary-key
index, so

* a query bounded in time touches only the months in its bounds (partition pruning):
  ``Store.read_readings`` bounds ``ts_us`` by the charges' ``first_seen_us`` and
  ``last_seen_us`` (:func:`qcllp.store.charge_time_bounds`), so what it reads costs the same
  with one month of history or ten years of it (``benchmarks/bench_partitions.py``); the
  scorer and training read the series' kept statistics instead (:mod:`qcllp.store.kept_stats`),
  one row per stick and station by its primary key;
* retention drops a whole month with ``DROP TABLE`` -- no ``DELETE`` of millions of rows, no
  bloat, no vacuum (:func:`detach_partition`, :mod:`qcllp.store.retention`).

Choices, and why:

* **One partition per calendar month (UTC)**, named ``readings_pYYYYMM``: a month of a line is
  10-100M readings, a size PostgreSQL handles comfortably per table, and a retention measured
  in months or years needs no finer grain. Bounds are read from the name, which only this
  module writes.
* **Created by the ingestion writer, under the ingestion lock, for the months a chunk holds,
  before it inserts** (:func:`ensure_partitions`), rather than ahead of time by a job: a
  reading always has its partition, also one from a clock that was off or a late backfill,
  and a daemon that was down for a month leaves no gap. One catalog query per chunk.
* **No DEFAULT partition**: it would catch a row that has none, but it defeats pruning (the
  default may hold any time, so every query scans it), and creating a month that overlaps
  rows in it means moving them. Since every insert goes through :func:`ensure_partitions`,
  a row without a partition is a bug that fails its batch loudly (and the batch is retried),
  never a silent loss.
* **Created standalone, then attached** (``ATTACH PARTITION``): attaching takes only a
  ``SHARE UPDATE EXCLUSIVE`` lock on ``readings``, which does not block the scorers' reads or
  another writer's inserts; an empty table is validated at once.

On SQLite (the demo) ``readings`` is one table and every function here is a no-op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection

if TYPE_CHECKING:  # the month arithmetic imports numpy: opening a store needs none
    import numpy as np

__all__ = [
    "Partition",
    "ARCHIVING_PREFIX",
    "month_bounds",
    "partition_name",
    "is_partition_table",
    "is_partitioned",
    "list_partitions",
    "ensure_partitions",
    "detach_partition",
]

PARENT = "readings"
ARCHIVING_PREFIX = "readings_archiving_p"  # detached by retention, being archived and dropped
_NAME = re.compile(r"^readings_(?:archiving_)?p(\d{4})(\d{2})$")
_EPOCH_MONTH = 1970 * 12


@dataclass(frozen=True)
class Partition:
    """One month of readings: ``[lo_us, hi_us)`` in epoch microseconds (UTC)."""

    name: str
    lo_us: int
    hi_us: int

    @property
    def month(self) -> str:
        return f"{self.name[-6:-2]}-{self.name[-2:]}"


def _month_index(ts_us: np.ndarray) -> np.ndarray:
    """Months since 1970-01 (UTC) of epoch microseconds, vectorized."""
    import numpy as np

    months = np.asarray(ts_us, dtype=np.int64).astype("datetime64[us]").astype("datetime64[M]")
    return months.astype(np.int64)


def _start_us(month: int) -> int:
    year, m = divmod(month + _EPOCH_MONTH, 12)
    return int(datetime(year, m + 1, 1, tzinfo=UTC).timestamp()) * 1_000_000


def partition_name(month: int) -> str:
    """``readings_pYYYYMM`` of a month index (months since 1970-01)."""
    year, m = divmod(month + _EPOCH_MONTH, 12)
    return f"{PARENT}_p{year:04d}{m + 1:02d}"


def month_bounds(name: str) -> tuple[int, int]:
    """``(lo_us, hi_us)`` of a partition (or archiving table) from its name."""
    match = _NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a readings partition name")
    month = int(match[1]) * 12 + int(match[2]) - 1 - _EPOCH_MONTH
    return _start_us(month), _start_us(month + 1)


def is_partition_table(name: str | None) -> bool:
    """Whether a table name is one of the monthly partitions (or a retention leftover); the
    migrations' schema comparison leaves them out: the models describe ``readings`` only."""
    return name is not None and _NAME.match(name) is not None


def is_partitioned(conn: Connection) -> bool:
    """Whether ``readings`` is a partitioned table (PostgreSQL after migration 0006)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.exec_driver_sql(
        "SELECT relkind FROM pg_class WHERE oid = to_regclass(%(t)s)", {"t": PARENT}
    ).scalar()
    return kind == "p"


def list_partitions(conn: Connection, *, archiving: bool = False) -> list[Partition]:
    """The monthly partitions attached to ``readings``, oldest first; with ``archiving`` the
    detached tables retention has not finished instead."""
    if not is_partitioned(conn):
        return []
    if archiving:
        names = conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE %(p)s",
            {"p": ARCHIVING_PREFIX + "%"},
        ).scalars()
    else:
        names = _attached(conn)
    found = [Partition(n, *month_bounds(n)) for n in names if is_partition_table(n)]
    return sorted(found, key=lambda p: p.lo_us)


def _attached(conn: Connection) -> list[str]:
    """Names of the tables attached to the partitioned ``readings``."""
    return (
        conn.exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%(t)s)",
            {"t": PARENT},
        )
        .scalars()
        .all()
    )


def ensure_partitions(conn: Connection, ts_us: np.ndarray) -> list[str]:
    """Create the monthly partitions that readings at times ``ts_us`` need; return the names
    created. Call it inside the writer's transaction (it holds the ingestion lock, so two
    writers never create the same month), before inserting. Two catalog queries per call on
    PostgreSQL, none on SQLite."""
    import numpy as np

    if not len(ts_us) or not is_partitioned(conn):
        return []
    present = set(_attached(conn))
    created = []
    for month in np.unique(_month_index(ts_us)).tolist():
        name = partition_name(month)
        if name in present:
            continue
        lo, hi = month_bounds(name)
        conn.exec_driver_sql(f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS)")
        conn.exec_driver_sql(
            f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM ({lo}) TO ({hi})"
        )
        created.append(name)
    return created


def detach_partition(conn: Connection, partition: Partition) -> str:
    """Detach a month from ``readings`` and rename it ``readings_archiving_pYYYYMM``: from this
    commit on no query sees it and a late reading of that month gets a new, empty partition.
    The caller archives and drops the returned table (:mod:`qcllp.store.retention`)."""
    archiving = ARCHIVING_PREFIX + partition.name[-6:]
    conn.exec_driver_sql(f"ALTER TABLE {PARENT} DETACH PARTITION {partition.name}")
    conn.exec_driver_sql(f"ALTER TABLE {partition.name} RENAME TO {archiving}")
    return archiving
