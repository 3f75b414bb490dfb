"""Ingestion throughput: 1M long-format readings (CSV) into SQLite and PostgreSQL.

Prints readings per second (wall clock, and per CPU-second of the ingesting process, which is
less sensitive to other load on the machine), the peak resident memory of the ingesting
process and the bytes the database grew by per reading stored (the sizing figure of
``deploy/README.md``), per engine.
Each run is a separate process (so the peak RSS is that run's own) on a fresh database; the
PostgreSQL server is a throwaway cluster like the test fixture's (skipped without binaries).

    .venv/bin/python benchmarks/bench_ingest.py [--readings 1000000] [--chunk-rows 200000]
    .venv/bin/python benchmarks/bench_ingest.py --readings 10000000 --sqlite-only  # memory bound

Target of issue 4: >= 100k readings/s into SQLite on the 2-core reference machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import TINY_PLANT  # noqa: E402
from tests.pgserver import TempPostgres, find_pg_bin  # noqa: E402

SENSORS = [("furnace", "temperature", 900, 1300), ("furnace", "oxygen", 0, 10),
           ("rolling", "force", 1000, 30000), ("rolling", "temperature", 700, 1250)]  # fmt: skip


def write_readings(path: Path, n: int, seed: int = 0, piece: int = 1_000_000) -> None:
    """``n`` valid long-format readings: sticks of 40 per charge, 4 sensors, 10 samples each.

    Written in pieces of ``piece`` rows so the generator's memory stays small.
    """
    rng = np.random.default_rng(seed)
    per_stick = len(SENSORS) * 10
    writer = None
    for start in range(0, n, piece):
        i = np.arange(start, min(n, start + piece))
        stick = i // per_stick
        sensor = (i % per_stick) // 10
        sample = i % 10
        low = np.array([s[2] for s in SENSORS], float)[sensor]
        high = np.array([s[3] for s in SENSORS], float)[sensor]
        value = np.round(low + (high - low) * rng.uniform(0.1, 0.9, len(i)), 3)
        ts = np.datetime64("2025-01-06T06:00:00", "s") + (stick * 60 + sample * 2).astype("m8[s]")
        table = pa.table(
            {
                "charge_id": pa.array(np.char.add("C", (stick // 40).astype(str))),
                "stick_id": pa.array(np.char.add("S", (stick % 40).astype(str))),
                "station": pa.array(np.array([s[0] for s in SENSORS])[sensor]),
                "timestamp": pa.array(np.char.add(np.datetime_as_string(ts), "Z")),
                "sensor": pa.array(np.array([s[1] for s in SENSORS])[sensor]),
                "value": pa.array(value),
            }
        )
        if writer is None:
            writer = pacsv.CSVWriter(path, table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that over from the parent
    across fork + exec, so it would report the data generator's memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(url: str, csv_path: str, chunk_rows: int) -> dict:
    """Ingest in this process; return timing, counts and peak RSS."""
    from qcllp.ingest import ingest_measurements
    from qcllp.plant.config import parse_plant_config
    from qcllp.store import Store

    config = parse_plant_config(dict(TINY_PLANT), source="<bench>")
    store = Store.open(url)
    empty = database_bytes(store)
    start, cpu_start = time.perf_counter(), _cpu()
    report = ingest_measurements(store, config, csv_path, chunk_rows=chunk_rows)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu_start
    start = time.perf_counter()
    again = ingest_measurements(store, config, csv_path, chunk_rows=chunk_rows)
    skip_seconds = time.perf_counter() - start
    stored_bytes = database_bytes(store) - empty
    store.close()
    return {
        "seconds": seconds,
        "cpu": cpu,
        "stored": report.stored,
        "records": report.records,
        "skipped_again": len(again.files_skipped),
        "skip_seconds": skip_seconds,
        "peak_rss_mb": peak_rss_mb(),
        "stored_bytes": stored_bytes,
    }


def database_bytes(store) -> int:  # noqa: ANN001 - a qcllp Store
    """The database's size on disk: SQLite's file and its WAL (checkpointed first), or
    PostgreSQL's ``pg_database_size`` (tables, indexes, TOAST)."""
    from sqlalchemy import text

    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            path = Path(store.engine.url.database)
            return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal"))
                       if p.exists())  # fmt: skip
        return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readings", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=200_000)
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--child", nargs=2, metavar=("URL", "CSV"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(*args.child, args.chunk_rows)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="qcllp-bench-"))
    csv_path = tmp / "readings.csv"
    write_readings(csv_path, args.readings)
    size_mb = csv_path.stat().st_size / 2**20
    print(f"{args.readings:,} readings, {size_mb:.0f} MiB CSV, chunk_rows={args.chunk_rows:,}")
    engines = [("sqlite", f"sqlite:///{tmp / 'bench.sqlite'}")]
    server = None
    bin_dir = None if args.sqlite_only else find_pg_bin()
    if bin_dir is not None:
        server = TempPostgres(bin_dir, port=54391)
        engines.append(("postgresql", server.create_database("bench")))
    elif not args.sqlite_only:
        print("postgresql: skipped (no initdb/pg_ctl found)")
    rows = []
    load = os.getloadavg()[0]
    try:
        for engine, url in engines:
            out = subprocess.run(
                [sys.executable, __file__, "--chunk-rows", str(args.chunk_rows),
                 "--child", url, str(csv_path)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["stored"] == args.readings, result
            rows.append((engine, result))
    finally:
        if server is not None:
            server.stop()
    print()
    print(f"load average before the runs: {load:.1f} on {os.cpu_count()} cores")
    print(
        "| engine | readings | wall s | readings/s (wall) | ingester CPU s "
        "| readings per CPU-s | peak RSS MiB | stored bytes per reading | re-run |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for engine, r in rows:
        print(
            f"| {engine} | {r['stored']:,} | {r['seconds']:.1f} | {r['stored'] / r['seconds']:,.0f}"
            f" | {r['cpu']:.1f} | {r['stored'] / r['cpu']:,.0f} | {r['peak_rss_mb']:.0f}"
            f" | {r['stored_bytes'] / r['stored']:.0f}"
            f" | skipped by checksum in {r['skip_seconds']:.2f} s |"
        )
    print("(ingester CPU excludes the PostgreSQL server's own CPU)")


if __name__ == "__main__":
    main()
