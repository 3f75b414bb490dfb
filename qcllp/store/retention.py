"""Retention of readings: archive and drop the months older than the configured history.

``retention.readings_days`` in the plant config (PostgreSQL; :class:`qcllp.plant.config.
Retention`). A month's partition (:mod:`qcllp.store.partitions`) goes once *all* of it is
older than the cutoff, in three steps, each safe to interrupt:

1. **detach** it from ``readings`` and rename it ``readings_archiving_pYYYYMM``, in one short
   transaction that holds the ingestion lock (no batch is writing that month meanwhile) with a
   ``lock_timeout``: should a long read hold ``readings`` (a training), the step gives up after
   ``LOCK_TIMEOUT_S`` and is retried at the next run, rather than queue every scorer behind
   it;
2. **archive** it (when ``archive_dir`` is set): one ``COPY ... TO STDOUT`` into
   ``archive_dir/readings_YYYY-MM.csv.gz`` (``.2.csv.gz`` ... should the month have been
   archived before: a file is never overwritten), written to a temporary name, flushed to
   disk and renamed: a file of that name is always whole. Its columns are the measurements' long
   layout with UTC timestamps, so ``qcllp ingest measurements`` takes it back (after
   ``gunzip``), in the table's order (sorting 100M readings would take gigabytes of
   temporary disk for nothing the ingester needs);
3. **drop** the detached table.

A run that was killed after step 1 leaves a ``readings_archiving_*`` table; the next run
archives (again, from scratch) and drops it. The statistics kept per stick and station
(``stick_stats``) follow the readings: the drop rebuilds those of the month's sticks from the
readings left, so an archive ingested again is counted once. Series, sticks and charges rows
stay: they are a few per stick, and the flags and models that refer to them stay
meaningful. Training skips the charges older than the cutoff (:func:`retained_since`): their
readings may be gone.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from qcllp.store import StickStatistics, Store, driver_cursor
from qcllp.store.kept_stats import rebuild_series_stats
from qcllp.store.partitions import (
    ARCHIVING_PREFIX,
    Partition,
    detach_partition,
    list_partitions,
    month_bounds,
)

__all__ = ["LOCK_TIMEOUT_S", "RetentionReport", "apply_retention", "retained_since"]

LOCK_TIMEOUT_S = 10
_ARCHIVE_QUERY = (
    "COPY (SELECT s.charge_id, s.stick_id, s.station, "
    "to_char(timestamp '1970-01-01' + r.ts_us * interval '1 microsecond', "
    '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\') AS timestamp, s.sensor, r.value '
    "FROM {table} r JOIN series s ON s.id = r.series_id) "
    "TO STDOUT WITH (FORMAT csv, HEADER true)"
)


@dataclass
class RetentionReport:
    """What a retention run did (or, with ``dry_run``, would do)."""

    cutoff: datetime | None
    dry_run: bool = False
    dropped: list[str] = field(default_factory=list)  # months, YYYY-MM
    archived: dict[str, str] = field(default_factory=dict)  # month -> file
    kept: list[str] = field(default_factory=list)  # months still stored
    waiting: list[str] = field(default_factory=list)  # could not be detached (lock timeout)

    def as_dict(self) -> dict:
        return {
            "cutoff": None if self.cutoff is None else self.cutoff.isoformat(),
            "dry_run": self.dry_run,
            "dropped": self.dropped,
            "archived": self.archived,
            "kept": self.kept,
            "waiting": self.waiting,
        }

    def summary(self) -> str:
        if self.cutoff is None:
            return "retention: readings are kept for ever (retention.readings_days not set)"
        verb = "would drop" if self.dry_run else "dropped"
        line = (
            f"retention: readings older than {self.cutoff:%Y-%m-%d} go; {verb} "
            f"{len(self.dropped)} month(s){': ' + ', '.join(self.dropped) if self.dropped else ''}"
            f"; {len(self.kept)} month(s) kept"
        )
        if self.kept:
            line += f" ({self.kept[0]} .. {self.kept[-1]})"
        if self.archived:
            line += f"; archived to {Path(next(iter(self.archived.values()))).parent}"
        if self.waiting:
            line += f"; {', '.join(self.waiting)} busy (a long read), retried next run"
        return line


class RetentionSettings(Protocol):
    """The ``retention`` section of a plant config (:class:`qcllp.plant.config.Retention`)."""

    readings_days: int | None
    archive_dir: str | None


class HasRetention(Protocol):
    """A plant config: the store takes its retention section without importing the plant
    package, which sits above it (the plant config checks database URLs with the store's
    credential rules)."""

    retention: RetentionSettings


def retained_since(config: HasRetention, now: datetime | None = None) -> datetime | None:
    """The oldest time whose readings retention guarantees are still stored (``None``: all
    are); training uses no charge that started before it."""
    days = config.retention.readings_days
    if days is None:
        return None
    return (now or datetime.now(UTC)) - timedelta(days=days)


def apply_retention(
    store: Store, config: HasRetention, *, now: datetime | None = None, dry_run: bool = False
) -> RetentionReport:
    """Archive and drop the months of readings older than ``retention.readings_days``."""
    cutoff = retained_since(config, now)
    report = RetentionReport(cutoff=cutoff, dry_run=dry_run)
    if cutoff is None:
        return report
    cutoff_us = int(cutoff.timestamp() * 1_000_000)
    with store.engine.connect() as conn:
        attached = list_partitions(conn)
        leftovers = [p.name for p in list_partitions(conn, archiving=True)]
    due = [p for p in attached if p.hi_us <= cutoff_us]
    report.kept = [p.month for p in attached if p.hi_us > cutoff_us]
    if dry_run:
        report.dropped = [p.month for p in due] + [_month(t) for t in leftovers]
        return report
    archive_dir = config.retention.archive_dir
    for table in leftovers:  # a run killed after step 1: finish its months first
        _archive_and_drop(store, table, archive_dir, report)
    for partition in due:
        table = _detach(store, partition)
        if table is None:
            report.waiting.append(partition.month)
        else:
            _archive_and_drop(store, table, archive_dir, report)
    return report


def _archive_and_drop(
    store: Store, table: str, archive_dir: str | None, report: RetentionReport
) -> None:
    """Steps 2 and 3 for one detached month; with the drop, under the ingestion lock, the
    sticks with readings in that month get their statistics rebuilt from the readings left
    (none, mostly: the row goes)."""
    if archive_dir is not None:
        report.archived[_month(table)] = str(_archive(store, table, Path(archive_dir)))
    lo, hi = month_bounds(table)
    t = StickStatistics.__table__
    with store.write() as conn:
        conn.exec_driver_sql(f"DROP TABLE {table}")
        touched = conn.execute(
            select(t.c.station, t.c.charge_id, t.c.stick_id).where(t.c.t0_us < hi, t.c.t1_us >= lo)
        )
        rebuild_series_stats(conn, [tuple(row) for row in touched])
    report.dropped.append(_month(table))


def _month(table: str) -> str:
    lo, _ = month_bounds(table)
    return f"{datetime.fromtimestamp(lo / 1e6, UTC):%Y-%m}"


def _detach(store: Store, partition: Partition) -> str | None:
    """Detach one month (step 1); ``None`` when ``readings`` stayed locked too long."""
    try:
        with store.write() as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_S}s'")
            return detach_partition(conn, partition)
    except OperationalError as exc:
        if "lock timeout" in str(exc):
            return None
        raise


def _archive(store: Store, table: str, archive_dir: Path) -> Path:
    """Write a detached month to ``archive_dir/readings_YYYY-MM.csv.gz`` (step 2)."""
    assert table.startswith(ARCHIVING_PREFIX)
    archive_dir.mkdir(parents=True, exist_ok=True)
    target = archive_dir / f"readings_{_month(table)}.csv.gz"
    n = 1
    while target.exists():  # never overwrite: the month was archived before (late readings)
        n += 1
        target = archive_dir / f"readings_{_month(table)}.{n}.csv.gz"
    partial = target.with_name(target.name + ".partial")
    with store.engine.connect() as conn:
        with driver_cursor(conn) as cursor:
            with (
                open(partial, "wb") as raw,
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out,
                cursor.copy(_ARCHIVE_QUERY.format(table=table)) as copy,
            ):
                for data in copy:
                    out.write(data)
            with open(partial, "rb") as done:
                os.fsync(done.fileno())
        conn.rollback()
    os.replace(partial, target)
    return target
