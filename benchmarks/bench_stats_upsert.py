"""Rewriting kept series statistics on PostgreSQL: one statement over arrays against
``executemany``.

When a batch brings readings of series that already have a row in ``series_stats`` (a series
spanning files or batches; every batch of single-reading MQTT messages), the ingester merges
them and writes the merged rows back with ``INSERT ... ON CONFLICT (series_id) DO UPDATE``
(:func:`qcllp.store.kept_stats.keep_series_stats`). This times that write alone, both ways,
on a throwaway PostgreSQL server (Debian's binaries, ``tests/pgserver.py``):

* ``executemany``: the driver's ``executemany`` of one row per statement, as before;
* ``arrays``: the product's one ``INSERT ... SELECT * FROM unnest(...)``
  (:func:`qcllp.store.insert_columns`).

For each size, ``--repeats`` times, the two alternated: the same rows (every series already
has one) rewritten with new figures in a transaction that is rolled back. Medians.

    .venv/bin/python benchmarks/bench_stats_upsert.py [--rows 100,1000,10000,50000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qcllp.store import Store, driver_cursor, insert_columns  # noqa: E402
from qcllp.store.kept_stats import STORED, _insert, _integer_columns, _packed, _upsert  # noqa: E402
from qcllp.store.series_stats import MOMENT_COLUMNS, SeriesStats  # noqa: E402
from tests.pgserver import TempPostgres, find_pg_bin  # noqa: E402


def some_stats(n: int, seed: int) -> SeriesStats:
    """Statistics of series ``1..n`` with random figures (their values do not matter here)."""
    rng = np.random.default_rng(seed)
    t0 = 1_767_600_000_000_000 + rng.integers(0, 10**9, n)
    floats = {c: rng.normal(size=n) for c in MOMENT_COLUMNS}
    return SeriesStats(
        ids=np.arange(1, n + 1, dtype=np.int64),
        n=rng.integers(2, 20, n),
        t0_us=t0,
        t1_us=t0 + rng.integers(1, 10**8, n),
        **floats,
    )


def executemany_upsert(conn, stats: SeriesStats) -> None:  # noqa: ANN001
    """The write as it was: the driver's ``executemany``, one row per statement."""
    names = ("series_id", *STORED)
    update = ", ".join(f"{c} = excluded.{c}" for c in names[1:])
    columns = [column.tolist() for column in _integer_columns(stats)]
    with driver_cursor(conn) as cursor:
        cursor.executemany(
            f"INSERT INTO series_stats ({', '.join(names)}) VALUES "
            f"({', '.join(['%s'] * len(names))}) ON CONFLICT (series_id) DO UPDATE SET {update}",
            list(zip(*columns, _packed(stats), strict=True)),
        )


def seed_rows(store: Store, n: int) -> None:
    """``n`` series (one stick each, at furnace) and their statistics rows, committed."""
    with store.engine.begin() as conn:
        insert_columns(
            conn,
            "INSERT INTO series (id, station, charge_id, stick_id, sensor)",
            ("integer", "text", "text", "text", "text"),
            [list(range(1, n + 1)), ["furnace"] * n, [f"C{i // 50}" for i in range(n)],
             [f"S{i}" for i in range(n)], ["temperature"] * n],
        )  # fmt: skip
        _insert(conn, some_stats(n, seed=0))


def timed(store: Store, write, stats: SeriesStats) -> float:  # noqa: ANN001
    """Seconds of one write of ``stats``, rolled back."""
    with store.engine.connect() as conn:
        transaction = conn.begin()
        started = time.perf_counter()
        write(conn, stats)
        took = time.perf_counter() - started
        transaction.rollback()
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100,1000,10000,50000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.rows.split(",")]
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl) found")
    server = TempPostgres(bin_dir, port=54393)
    try:
        with Store.open(server.create_database("upsert"), create=True) as store:
            seed_rows(store, max(sizes))
            rows = [measure(store, n, args.repeats) for n in sizes]
    finally:
        server.stop()
    print(f"## Rewriting kept statistics rows on PostgreSQL, median of {args.repeats}\n")
    print(f"Machine: nproc 2, Python {platform.python_version()}, {platform.machine()}.\n")
    print("| rows | executemany ms | one statement ms | ratio | µs per row |")
    print("|---:|---:|---:|---:|---:|")
    for n, old, new in rows:
        per_row = 1e6 * new / n
        print(f"| {n:,} | {1e3 * old:.1f} | {1e3 * new:.1f} | {old / new:.1f}x | {per_row:.1f} |")


def measure(store: Store, n: int, repeats: int) -> tuple[int, float, float]:
    """(rows, median seconds the old way, median seconds the product's way)."""
    old, new = [], []
    for repeat in range(repeats):
        stats = some_stats(n, seed=repeat + 1)
        old.append(timed(store, executemany_upsert, stats))
        new.append(timed(store, _upsert, stats))
    return n, statistics.median(old), statistics.median(new)


if __name__ == "__main__":
    main()
