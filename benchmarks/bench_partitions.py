"""Years of readings on PostgreSQL: the scorer's poll and a training read against the history.

Issue 20 item 3: with ``readings`` partitioned by month (:mod:`qcllp.store.partitions`) and
every read bounded by its charges' time span, what a poll or a training read costs must not
grow with the readings stored. For each history size this builds a PostgreSQL plant database
(a private server started from the Debian binaries, ``tests/pgserver.py``, fsync off) with

* the **history**: ``--readings`` readings of ``50``-stick charges (4 stations x 3 sensors x
  5 readings per stick), spread evenly over ``--months`` months before the fresh charges and
  written with ``COPY`` (series, sticks, charges with their time bounds, readings into the
  monthly partitions, which :func:`ensure_partitions` creates first) -- the fast path the
  issue names: ingesting 50M readings through the validating ingester would take hours, and
  what is measured does not depend on how the history got there;
* the cooling model of ``bench_scorer.py`` (InvCal, trained once on 16 simulated charges),
  promoted;

then measures, in turns over the sizes (so that a load coming and going on a shared machine
hits every size alike), median of ``--polls`` repeats after one warm-up:

* **poll**: ingest one fresh simulated charge of 50 sticks through the real ingester (not
  timed), then ``ScorerService.tick()`` -- takes the batch in, reads the 50 sticks' readings,
  flags them -- and an empty ``tick()``;
* **training read**: ``station_features`` of the cooling station for the newest 100 history
  charges (what a retraining reads per chunk), and for 100 charges from the middle of the
  history (an old window).

Usage (each size builds its own database; the server's data lives under ``--cache``)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_partitions.py --readings 1e6,10e6
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_partitions.py --readings 10e6,50e6

A 50M history takes a few minutes to write and about 7 GB of disk; run the sizes in the
background with output to a file.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scorer_bench_support import (  # noqa: E402
    STATION,
    TimedService,
    fast_config,
    ingest_frame,
    install_model,
    median,
    say,
    simulated_pieces,
    trained_model,
)

from qcllp.features import station_features  # noqa: E402
from qcllp.plant.config import PlantConfig  # noqa: E402
from qcllp.store import Store  # noqa: E402
from qcllp.store.partitions import ensure_partitions, list_partitions  # noqa: E402
from tests.pgserver import TempPostgres, find_pg_bin  # noqa: E402

STICKS = 50
PER_SERIES = 5
BLOCK_CHARGES = 200  # charges written per COPY block (600k readings)
FRESH_START = pd.Timestamp("2026-11-02T06:00:00", tz="UTC")


def write_history(store: Store, config: PlantConfig, n_readings: int, months: int) -> dict:
    """COPY a history of ``n_readings`` readings, evenly over ``months`` months before
    :data:`FRESH_START`; returns its figures."""
    stations = [(s.name, [x.name for x in s.sensors]) for s in config.stations]
    series_per_stick = sum(len(sensors) for _, sensors in stations)
    per_charge = STICKS * series_per_stick * PER_SERIES
    n_charges = max(1, n_readings // per_charge)
    span_us = int(pd.Timedelta(days=30.44 * months).value // 1000)
    end_us = int(FRESH_START.value // 1000) - 86_400_000_000
    starts = end_us - span_us + (np.arange(n_charges) * (span_us // n_charges))
    keys = pd.DataFrame(
        [(st, se) for st, sensors in stations for se in sensors], columns=["station", "sensor"]
    )
    station_pos = keys["station"].map({name: i for i, (name, _) in enumerate(stations)})
    rng = np.random.default_rng(0)
    written = 0
    started = time.perf_counter()
    with store.engine.begin() as conn:
        ensure_partitions(conn, starts)
        ensure_partitions(conn, starts + 4 * 600_000_000)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        next_id = 1
        for lo in range(0, n_charges, BLOCK_CHARGES):
            idx = np.arange(lo, min(lo + BLOCK_CHARGES, n_charges))
            frames = _history_block(idx, next_id, keys, station_pos, starts, rng)
            next_id += len(frames["series"])
            for table, frame in frames.items():
                text = frame.to_csv(header=False, index=False)
                with cursor.copy(
                    f"COPY {table} ({', '.join(frame.columns)}) FROM STDIN WITH (FORMAT csv)"
                ) as copy:
                    copy.write(text)
            raw.commit()
            written += len(frames["readings"])
            rate = written / (time.perf_counter() - started)
            say(f"  history: {written:,} readings ({rate:,.0f}/s)")
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('series', 'id'), (SELECT max(id) FROM series))"
        )
        cursor.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()
    return {"charges": n_charges, "readings": written, "build_s": time.perf_counter() - started}


def _history_block(
    idx: np.ndarray,
    next_id: int,
    keys: pd.DataFrame,
    station_pos: pd.Series,
    starts: np.ndarray,
    rng: np.random.Generator,
) -> dict[str, pd.DataFrame]:
    """The rows of charges ``idx`` for each table, in the order they are copied (series ids
    from ``next_id``): ``series``, ``charges``, ``sticks``, ``readings``."""
    charge = np.repeat(idx, STICKS * len(keys))
    stick = np.tile(np.repeat(np.arange(STICKS), len(keys)), len(idx))
    key = np.tile(np.arange(len(keys)), STICKS * len(idx))
    series = pd.DataFrame(
        {
            "id": np.arange(next_id, next_id + len(charge)),
            "station": keys["station"].to_numpy()[key],
            "charge_id": pd.Series(charge).map("h{:06d}".format),
            "stick_id": pd.Series(stick).map("s{:02d}".format),
            "sensor": keys["sensor"].to_numpy()[key],
        }
    )
    t_series = starts[charge] + station_pos.to_numpy()[key] * 600_000_000 + stick * 5_000_000
    sid = np.repeat(series["id"].to_numpy(), PER_SERIES)
    ts = np.repeat(t_series, PER_SERIES) + np.tile(np.arange(PER_SERIES) * 1_000_000, len(series))
    readings = pd.DataFrame(
        {"series_id": sid, "ts_us": ts, "value": rng.normal(size=len(sid)).round(4)}
    )
    readings["batch_id"] = 0
    first = starts[idx]
    charges = pd.DataFrame(
        {
            "charge_id": [f"h{c:06d}" for c in idx],
            "first_seen_us": first,
            "last_seen_us": first + 3 * 600_000_000 + STICKS * 5_000_000,
        }
    )
    sticks = series.drop_duplicates(["charge_id", "stick_id"])[["charge_id", "stick_id"]]
    sticks = sticks.assign(first_seen_us=starts[charge[:: len(keys)]])
    return {"series": series, "charges": charges, "sticks": sticks, "readings": readings}


class Plant:
    """One history size: its database, fresh charges to feed and the timed scorer."""

    def __init__(self, size: int, args, server: TempPostgres, record: dict):
        self.config = fast_config()
        self.store = Store.open(  # a server's database keeps its artifacts where it is told
            server.create_database(f"hist_{size}"), models_dir=Path(args.cache) / f"models_{size}"
        )
        say(f"history of {size:,} readings over {args.months} months ...")
        self.history = write_history(self.store, self.config, size, args.months)
        install_model(self.store, record)
        new = next(
            simulated_pieces(
                self.config,
                args.polls + 1,
                args.seed + 7,
                first_charge=800_001,
                start=FRESH_START,
                sticks_per_charge=(50, 50),
            )
        )
        self.fresh = [part for _, part in new.groupby("charge_id", observed=True)]
        self.service = TimedService(self.store, self.config, Path(args.cache) / f"s-{size}.jsonl")
        self.service.tick()
        n = self.history["charges"]
        self.windows = {
            "newest": [f"h{c:06d}" for c in range(max(0, n - 100), n)],
            "middle": [f"h{c:06d}" for c in range(n // 2, min(n, n // 2 + 100))],
        }
        self.busy: list[float] = []
        self.idle: list[float] = []
        self.reads: dict[str, list[float]] = {"newest": [], "middle": []}

    def poll(self, i: int) -> None:
        """Ingest fresh charge ``i`` (not timed), then a timed busy and a timed empty tick."""
        ingest_frame(self.store, self.config, self.fresh[i], f"bench:fresh:{i}")
        decided, seconds = self.service.tick()
        if decided != 50:
            raise RuntimeError(f"poll {i} decided {decided} sticks, expected 50")
        _, idle = self.service.tick()
        if i:  # the first is a warm-up
            self.busy.append(seconds)
            self.idle.append(idle)

    def read(self, keep: bool) -> None:
        for name, ids in self.windows.items():
            started = time.perf_counter()
            table = station_features(self.store, self.config, STATION, charge_ids=ids)
            if keep:
                self.reads[name].append(time.perf_counter() - started)
            self.sticks_read = len(table.X)

    def result(self) -> dict:
        with self.store.engine.connect() as conn:
            months = len(list_partitions(conn))
        size = self.store.execute_sql("SELECT pg_database_size(current_database())")[0][0]
        version = self.store.execute_sql("SHOW server_version")[0][0]
        self.store.close()
        return {
            **self.history,
            "months": months,
            "pg": version.split()[0],
            "db_gb": size / 1e9,
            "poll_ms": median(self.busy) * 1e3,
            "empty_ms": median(self.idle) * 1e3,
            "read_newest_s": median(self.reads["newest"]),
            "read_middle_s": median(self.reads["middle"]),
        }


def measure_all(sizes: list[int], args, server: TempPostgres, record: dict) -> list[dict]:
    """Build every size, then measure them in turns (poll i of every size, then poll i + 1):
    a load that comes and goes on a shared machine hits every size alike."""
    plants = [Plant(size, args, server, record) for size in sizes]
    for i in range(args.polls + 1):
        for plant in plants:
            plant.poll(i)
    for i in range(args.reads + 1):
        for plant in plants:
            plant.read(keep=i > 0)
    return [plant.result() for plant in plants]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readings", default="1e6,10e6", help="history sizes, comma-separated")
    parser.add_argument("--months", type=int, default=36, help="months the history spans")
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--reads", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default="/tmp/bench_partitions")
    parser.add_argument("--port", type=int, default=54341)
    args = parser.parse_args()
    sizes = [int(float(x)) for x in args.readings.split(",")]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    record = trained_model(cache, fast_config())
    bin_dir = find_pg_bin()
    if bin_dir is None:
        sys.exit("PostgreSQL server binaries not found (deploy/bootstrap.sh --test installs them)")
    server = TempPostgres(bin_dir, port=args.port)
    try:
        results = list(zip(sizes, measure_all(sizes, args, server, record), strict=True))
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
    base = results[0][1]
    pg = base["pg"]
    print("## readings partitioned by month: poll and training read against the history\n")
    print(
        f"PostgreSQL {pg} (private server, fsync off), history over {args.months} months; "
        f"medians of {args.polls} polls and {args.reads} reads after one warm-up.\n"
    )
    print(
        "| readings stored | charges | partitions | DB GB | poll, 50 new sticks ms | vs first "
        "| empty poll ms | training read, newest 100 charges s | vs first "
        "| read, 100 charges mid-history s | vs first | written in s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for _, r in results:
        print(
            f"| {r['readings']:,} | {r['charges']:,} | {r['months']} | {r['db_gb']:.1f} "
            f"| {r['poll_ms']:.0f} | {r['poll_ms'] / base['poll_ms']:.2f}x "
            f"| {r['empty_ms']:.1f} | {r['read_newest_s']:.2f} "
            f"| {r['read_newest_s'] / base['read_newest_s']:.2f}x | {r['read_middle_s']:.2f} "
            f"| {r['read_middle_s'] / base['read_middle_s']:.2f}x | {r['build_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
