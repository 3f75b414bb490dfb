"""Rewriting kept series statistics on PostgreSQL: the driver's ``executemany`` against one
statement over arrays.

When a batch brings readings of sticks that already have a row in ``stick_stats`` at their
station (a series spanning files or batches; every batch of single-reading MQTT messages),
the ingester merges them and writes the merged rows back with ``INSERT ... ON CONFLICT
(station, charge_id, stick_id) DO UPDATE`` (:func:`qcllp.store.kept_stats.keep_series_stats`),
three series a row here. This times that write alone, both ways,
on a throwaway PostgreSQL server (Debian's binaries, ``tests/pgserver.py``):

* ``arrays``: one ``INSERT ... SELECT * FROM unnest(...)`` (:func:`qcllp.store.insert_columns`),
  which was the product's when a row held one series' integer columns;
* ``executemany``: the product's now, the driver's ``executemany`` of one row per statement
  (:func:`qcllp.store.kept_stats._write` with every row stored).

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

from qcllp.store import Store, insert_columns  # noqa: E402
from qcllp.store.kept_stats import (  # noqa: E402
    ROW_COLUMNS,
    ROW_TYPES,
    STICK_KEY,
    _Owned,
    _rows,
    _write,
    sensor_codes,
)
from qcllp.store.series_stats import MOMENT_COLUMNS, SeriesStats  # noqa: E402
from tests.pgserver import TempPostgres, find_pg_bin  # noqa: E402

SERIES_A_ROW = 3


def some_stats(n: int, seed: int) -> tuple[list[tuple], _Owned]:
    """``n`` rows' keys and the statistics of their series ``1..3n`` (random figures: their
    values do not matter here), three sensors a stick at furnace."""
    rng = np.random.default_rng(seed)
    m = n * SERIES_A_ROW
    t0 = 1_767_600_000_000_000 + rng.integers(0, 10**9, m)
    floats = {c: rng.normal(size=m) for c in MOMENT_COLUMNS}
    stats = SeriesStats(
        ids=np.arange(1, m + 1, dtype=np.int64),
        n=rng.integers(2, 20, m),
        t0_us=t0,
        t1_us=t0 + rng.integers(1, 10**8, m),
        **floats,
    )
    keys = [("furnace", f"C{i // 50}", f"S{i}") for i in range(n)]
    row = np.arange(m, dtype=np.int64) // SERIES_A_ROW
    return keys, _Owned(stats, 1 + np.arange(m, dtype=np.int64) % SERIES_A_ROW, row)


def arrays_upsert(conn, keys: list[tuple], owned: _Owned) -> None:  # noqa: ANN001
    """The write by one statement over arrays (:func:`qcllp.store.insert_columns`)."""
    update = ", ".join(f"{c} = excluded.{c}" for c in ROW_COLUMNS[len(STICK_KEY) :])
    insert_columns(
        conn,
        f"INSERT INTO stick_stats ({', '.join(ROW_COLUMNS)})",
        ROW_TYPES,
        _rows(keys, owned)[1],
        f"ON CONFLICT ({', '.join(STICK_KEY)}) DO UPDATE SET {update}",
    )


def rewrite(conn, keys: list[tuple], owned: _Owned) -> None:  # noqa: ANN001
    """The product's write of rows that are all stored (:func:`kept_stats._write`)."""
    _write(conn, keys, owned, np.arange(len(keys)))


def seed_rows(store: Store, n: int) -> None:
    """``n`` rows of statistics (three series each), committed."""
    with store.engine.begin() as conn:
        sensor_codes(conn, [("furnace", s) for s in ("a", "b", "c")])
        m = n * SERIES_A_ROW
        insert_columns(
            conn,
            "INSERT INTO series (id, station, charge_id, stick_id, sensor)",
            ("integer", "text", "text", "text", "text"),
            [list(range(1, m + 1)), ["furnace"] * m,
             [f"C{i // SERIES_A_ROW // 50}" for i in range(m)],
             [f"S{i // SERIES_A_ROW}" for i in range(m)], ["abc"[i % 3] for i in range(m)]],
        )  # fmt: skip
        _write(conn, *some_stats(n, seed=0))


def timed(store: Store, write, stats: tuple) -> float:  # noqa: ANN001
    """Seconds of one write of ``stats`` (keys, statistics), rolled back."""
    with store.engine.connect() as conn:
        transaction = conn.begin()
        started = time.perf_counter()
        write(conn, *stats)
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
    print(f"Each row {SERIES_A_ROW} series.\n")
    print("| rows | one statement over arrays ms | executemany ms | ratio | µs per row |")
    print("|---:|---:|---:|---:|---:|")
    for n, old, new in rows:
        per_row = 1e6 * new / n
        print(f"| {n:,} | {1e3 * old:.1f} | {1e3 * new:.1f} | {old / new:.1f}x | {per_row:.1f} |")


def measure(store: Store, n: int, repeats: int) -> tuple[int, float, float]:
    """(rows, median seconds the old way, median seconds the product's way)."""
    old, new = [], []
    for repeat in range(repeats):
        stats = some_stats(n, seed=repeat + 1)
        old.append(timed(store, arrays_upsert, stats))
        new.append(timed(store, rewrite, stats))
    return n, statistics.median(old), statistics.median(new)


if __name__ == "__main__":
    main()
