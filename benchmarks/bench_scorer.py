"""Station scorer throughput, latency and poll cost on SQLite (the example plant, station cooling).

Three parts, chosen by the first argument; each prints a markdown table with the machine
(nproc, Python, SQLite). All figures compare within one run; times are medians of repeats.
Databases are built once and cached under ``--cache`` (default ``/tmp/bench_scorer``), keyed by
size and seed; building them is never part of a measure. The model is InvCal with one grid
point and 2 folds (as ``tests/support/plants.py`` ``fast_config``), trained once on 16
labeled charges in a separate small database and promoted into each measured database (its
artifact stays in the cache). The measured charges have no defect counts (charges with
final-QC counts have left the line and are skipped by the scorer).

backlog -- sticks flagged per second when the scorer drains a backlog::

    .venv/bin/python benchmarks/bench_scorer.py backlog [--sticks 50000] \\
        [--max-sticks 2000,5000,20000] [--repeats 3] [--batch-charges 50] [--profile]
    .venv/bin/python benchmarks/bench_scorer.py backlog --sticks 200000 --repeats 1  # full size

  ``--sticks`` sticks (~50 per charge, all four stations) are ingested in batches of
  ``--batch-charges`` charges; then ``ScorerService(...).tick()`` (the model loaded before the
  clock starts) decides all of them at station cooling, for each ``scorer.max_batch_sticks``
  value, with a sink file under the cache. Between repeats the scorer state (flags, pending,
  checkpoint) is deleted. Prints sticks/s, steps, the slowest and the first step (which takes
  in up to 50 batches), for the product's ``kept`` statistics and, alternated with it, the
  ``raw`` readings (``--paths``; the scorer before issue 34). Target: >= 30,000 sticks/s.
  The default 50,000 sticks is the quick mode (18 drains); 200,000 sticks build in ~1 min,
  but a raw drain took ~2.5 min there, hence one repeat.

feed -- arrival-to-flag latency with a live feeder and the real service::

    .venv/bin/python benchmarks/bench_scorer.py feed [--seconds 60] [--rate 500] [--period 0.5]

  ``.venv/bin/qcllp serve scorer --station cooling --interval 1`` runs as a subprocess with a
  temporary plant YAML where cooling has ``completion: {settle_s: 0, timeout_s: 60}``. This
  process is the feeder: every ``--period`` s it ingests one pre-written CSV file (long
  layout) with all readings of ``rate * period`` sticks at furnace, rolling and cooling. After
  the last file it waits until every fed stick is flagged (at most 60 s), stops the service
  with SIGTERM and reads the latency ``flags.scored_at - flags.arrived_at`` from the database
  (``arrived_at``: commit of the batch that brought the stick; ``scored_at``: start of the
  step). The service's JSON step log adds the step duration, giving the latency to the
  commit of the flag. Also checks one flag per fed stick and one sink line per flag.
  Target: p99 <= 2 s.

poll -- the cost of a poll against the stored history::

    .venv/bin/python benchmarks/bench_scorer.py poll [--readings 100000,1000000] [--polls 20]
    .venv/bin/python benchmarks/bench_scorer.py poll --readings 1000000,10000000   # full size

  For each history size (readings stored, all four stations, everything already flagged --
  the drain is setup, cached), ``--polls`` times: ingest one new charge of 50 sticks (not
  timed), time ``tick()`` (takes the batch in and flags the 50 sticks), then time ``tick()``
  again with nothing new. Medians; the ratio to the smallest size shows whether a poll grows
  with history (it should stay ~1x). The default sizes are the quick mode (0.1M vs 1M); the
  full comparison 1M vs 10M takes a few minutes to build once.

``--profile`` (backlog, poll) prints a pyinstrument profile of one drain / of the polls at the
largest size (``pip install pyinstrument``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sqlite3
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer_bench_feed import run_feed  # noqa: E402
from scorer_bench_poll import DEFAULT_POLL_READINGS, run_poll  # noqa: E402
from scorer_bench_support import (  # noqa: E402
    STATION,
    STICKS_PER_CHARGE,
    TimedService,
    cached_history,
    checkpoint_wal,
    fast_config,
    feature_path,
    machine,
    median,
    profiled,
    reset_scorer,
    say,
    scalar,
    sqlite_url,
    trained_model,
    with_max_sticks,
)

from qcllp.features import station_pairs  # noqa: E402
from qcllp.plant.config import PlantConfig  # noqa: E402
from qcllp.store import IN_CHUNK, Store  # noqa: E402
from qcllp.store.kept_stats import stick_query  # noqa: E402


# ----------------------------------------------------------------------------- backlog
def backlog_db(cache: Path, config: PlantConfig, args, record: dict) -> tuple[Path, dict]:
    """The backlog: ``args.sticks`` sticks ingested, none flagged yet."""
    n_charges = max(1, math.ceil(args.sticks / STICKS_PER_CHARGE))

    def count_batches(store: Store) -> dict:
        sql = "SELECT count(*) FROM ingestion_batches WHERE status = 'done'"
        return {"batches": scalar(store, sql)}

    return cached_history(cache, "backlog", n_charges, config, args, record, count_batches)


def drain_once(store: Store, db: Path, config: PlantConfig, sink: Path, args, path: str) -> dict:  # noqa: ANN001
    """One timed drain of the whole backlog from a forgotten scorer state, on ``path``."""
    reset_scorer(store)
    checkpoint_wal(db)
    sink.unlink(missing_ok=True)
    service = TimedService(store, config, sink)
    title = f"backlog drain, {path}, max_batch_sticks={config.scorer.max_batch_sticks}"
    with feature_path(path), profiled(args.profile, title):
        decided, seconds = service.tick()
    with open(sink, "rb") as fh:
        sink_lines = sum(1 for _ in fh)
    return {
        "seconds": seconds,
        "decided": decided,
        "flags": scalar(store, "SELECT count(*) FROM flags WHERE station = :s", s=STATION),
        "sink": sink_lines,
        "steps": len(service.steps),
        "first": service.steps[0] if service.steps else float("nan"),
        "slowest": max(service.steps, default=float("nan")),
        "locked": scalar(store, "SELECT count(*) FROM flags WHERE decision = 'lock_out'"),
    }


def run_backlog(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    config = fast_config()
    record = trained_model(cache, config)
    db, meta = backlog_db(cache, config, args, record)
    sink = cache / "backlog-sink.jsonl"
    say(
        f"backlog: {meta['sticks']:,} sticks, {meta['readings']:,} readings in "
        f"{meta['batches']} batches (built in {meta['build_s']} s)"
    )
    rows: dict[tuple[int, str], list[dict]] = {}
    with Store.open(sqlite_url(db), create=False) as store:
        for max_sticks in args.max_sticks:
            cfg = with_max_sticks(config, max_sticks)
            for repeat in range(args.repeats):
                for path in args.paths:  # alternated, so both see the same machine
                    run = drain_once(store, db, cfg, sink, args, path)
                    rows.setdefault((max_sticks, path), []).append(run)
                    say(
                        f"  {path} max_batch_sticks={max_sticks} repeat {repeat + 1}: "
                        f"{run['decided']:,} sticks in {run['seconds']:.2f} s "
                        f"({run['decided'] / run['seconds']:,.0f}/s), {run['steps']} steps"
                    )
    print_backlog(rows, meta, db, args)
    if args.floor:
        best = max(r[0]["decided"] / median([x["seconds"] for x in r]) for r in rows.values())
        print_floor(measure_floor(db, config, args.repeats), meta, best)


def print_backlog(rows: dict[tuple[int, str], list[dict]], meta: dict, db: Path, args) -> None:  # noqa: ANN001
    print(f"## backlog: draining {meta['sticks']:,} sticks at `{STATION}` (SQLite)\n")
    print(f"Machine: {machine()}.  ")
    print(
        f"History: {meta['charges']:,} charges, {meta['sticks']:,} sticks, "
        f"{meta['readings']:,} readings, {meta['batches']} ingestion batches of "
        f"{args.batch_charges} charges; database {db.stat().st_size / 1e6:,.0f} MB.  "
    )
    print(
        f"Median of {args.repeats} drains per row (`ScorerService.tick()`, sink file on, "
        "model loaded before the clock), the paths alternated. `kept`: the product, one row of "
        "statistics per stick and station; `raw`: the series' readings, reduced in NumPy "
        "(the scorer before issue 34). Target >= 30,000 sticks/s.\n"
    )
    print(
        "| max_batch_sticks | path | sticks flagged | drain s | sticks/s | vs raw | vs target "
        "| steps | first step s | slowest step s | flags = sink = sticks |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for (max_sticks, path), runs in rows.items():
        seconds = median([r["seconds"] for r in runs])
        raw = rows.get((max_sticks, "raw"))
        versus = f"{median([r['seconds'] for r in raw]) / seconds:.2f}x" if raw else "-"
        decided = runs[0]["decided"]
        ok = all(r["flags"] == r["sink"] == r["decided"] == meta["sticks"] for r in runs)
        print(
            f"| {max_sticks:,} | {path} | {decided:,} | {seconds:.2f} | {decided / seconds:,.0f} "
            f"| {versus} | {decided / seconds / 30_000:.2f}x | {runs[0]['steps']} "
            f"| {median([r['first'] for r in runs]):.2f} "
            f"| {median([r['slowest'] for r in runs]):.2f} | {'yes' if ok else 'NO'} |"
        )
    locked = {p: r[0]["locked"] for (_, p), r in rows.items()}
    print(f"\nLocked out by the model, per path: {locked} of {meta['sticks']:,} sticks.")


def measure_floor(db: Path, config: PlantConfig, repeats: int) -> dict[str, float]:
    """The database work a drain cannot avoid, timed on the plain ``sqlite3`` driver with no
    pandas, SQLAlchemy or model around it (medians of ``repeats``):

    * ``read``: per step of ~5,000 sticks (100 charges) the raw path's two queries -- the series
      of those charges at the stations up to cooling, then their readings by ``series_id`` in
      chunks of ``IN_CHUNK`` -- fetched as tuples;
    * ``kept``: the product's query instead, each stick's series joined to their kept
      statistics (:func:`_floor_kept_read`);
    * ``write``: per stick one ``flags`` row inserted and its pending row deleted (what a
      stick complete at intake costs), as ``executemany`` with tuples built before the
      clock, inside one transaction that is rolled back.
    """
    stations = [s.name for s in config.stations_up_to(STATION)]
    reads, kept_reads, writes = [], [], []
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as con:
        cur = con.cursor()
        charges = [r[0] for r in cur.execute("SELECT DISTINCT charge_id FROM batch_sticks")]
        sticks = cur.execute(
            "SELECT DISTINCT charge_id, stick_id FROM batch_sticks WHERE station = ?", (STATION,)
        ).fetchall()
        model_id = cur.execute("SELECT max(id) FROM models").fetchone()[0]
        for _ in range(repeats):
            started = time.perf_counter()
            rows_read = _floor_raw_read(cur, charges, stations)
            reads.append(time.perf_counter() - started)
            started = time.perf_counter()
            kept_rows = _floor_kept_read(cur, sticks, config)
            kept_reads.append(time.perf_counter() - started)
            writes.append(_floor_writes(cur, sticks, model_id))
    return {
        "sticks": len(sticks),
        "rows_read": rows_read,
        "read_s": median(reads),
        "kept_rows": kept_rows,
        "kept_s": median(kept_reads),
        "write_s": median(writes),
    }


def _floor_raw_read(cur: sqlite3.Cursor, charges: list[str], stations: list[str]) -> int:
    """The raw path's reads, 100 charges at a time: the series, then their readings by
    ``series_id`` in chunks of ``IN_CHUNK``; the readings fetched."""
    rows_read = 0
    for lo in range(0, len(charges), 100):
        part = charges[lo : lo + 100]
        series = cur.execute(
            "SELECT id, charge_id, stick_id, station, sensor FROM series "
            f"WHERE station IN ({','.join('?' * len(stations))}) "
            f"AND charge_id IN ({','.join('?' * len(part))})",
            [*stations, *part],
        ).fetchall()
        ids = [r[0] for r in series]
        for at in range(0, len(ids), IN_CHUNK):
            chunk = ids[at : at + IN_CHUNK]
            rows_read += len(
                cur.execute(
                    "SELECT series_id, ts_us, value FROM readings "
                    f"WHERE series_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
    return rows_read


def _floor_kept_read(cur: sqlite3.Cursor, sticks: list[tuple], config: PlantConfig) -> int:
    """The product's statement (``kept_stats.stick_query``, as ``fetch_stick_stats`` sends
    it), 5,000 sticks at a time: each stick's row of kept statistics at each station up to
    cooling, its position and its records; the rows fetched."""
    stations = list(dict.fromkeys(name for name, _ in station_pairs(config, STATION)))
    rows = 0
    for lo in range(0, len(sticks), 5000):
        sql, parameters = stick_query("sqlite", stations, sticks[lo : lo + 5000])
        rows += len(cur.execute(sql, parameters).fetchall())
    return rows


def _floor_writes(cur: sqlite3.Cursor, sticks: list[tuple], model_id: int) -> float:
    """Seconds to insert a flag and delete any pending row for every stick, as the product
    does for sticks complete at intake (``executemany``, tuples built before the clock),
    rolled back."""
    stamp = "2026-01-05 06:00:00.000000"
    flags = [(STATION, c, s, model_id, 0.1, 0, "pass", 0.5, stamp, stamp) for c, s in sticks]
    keys = [(STATION, c, s) for c, s in sticks]
    cur.execute("BEGIN IMMEDIATE")
    started = time.perf_counter()
    cur.executemany(
        "INSERT INTO flags (station, charge_id, stick_id, model_id, probability, "
        "flagged, decision, threshold, arrived_at, scored_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        flags,
    )
    cur.executemany(
        "DELETE FROM scorer_pending WHERE station = ? AND charge_id = ? AND stick_id = ?",
        keys,
    )
    took = time.perf_counter() - started
    cur.execute("ROLLBACK")
    return took


def print_floor(floor: dict[str, float], meta: dict, best: float) -> None:
    n = floor["sticks"]
    read, write = floor["read_s"], floor["write_s"]
    print(f"\n### floor: the database work of draining {n:,} sticks, plain `sqlite3` driver\n")
    print(
        "What no scorer on this schema can avoid: fetching each stick's series statistics "
        "(tuples, no pandas; the raw readings for comparison) and writing one flag and one "
        "delete of a pending row per stick (`executemany`, rolled back). Median of the same "
        "repeats.\n"
    )
    print("| work | rows | s | sticks/s if only this |")
    print("|---|---:|---:|---:|")
    kept = floor["kept_s"]
    for work, rows, s in (
        ("read series + readings (raw)", floor["rows_read"], read),
        ("read stick statistics (kept)", floor["kept_rows"], kept),
    ):
        print(f"| {work} | {rows:,} | {s:.2f} | {n / s:,.0f} |")
    print(f"| write a flag, delete pending | {2 * n:,} | {write:.2f} | {n / write:,.0f} |")
    print(f"| kept read + write (the ceiling) | | {kept + write:.2f} | {n / (kept + write):,.0f} |")
    print(f"| the scorer's drain (best row above) | | {n / best:.2f} | {best:,.0f} |")


# ----------------------------------------------------------------------------- main


def int_list(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", default="/tmp/bench_scorer", help="databases and files")
    parser.add_argument("--seed", type=int, default=0)
    parts = parser.add_subparsers(dest="part", required=True)

    backlog = parts.add_parser("backlog", help="sticks flagged per second draining a backlog")
    backlog.add_argument("--sticks", type=int, default=50_000)
    backlog.add_argument("--max-sticks", type=int_list, default=[2000, 5000, 20000])
    backlog.add_argument("--repeats", type=int, default=3)
    backlog.add_argument("--batch-charges", type=int, default=50)
    backlog.add_argument("--profile", action="store_true")
    backlog.add_argument(
        "--paths", type=lambda t: t.split(","), default=["kept", "raw"], help="kept,raw"
    )
    backlog.add_argument(
        "--floor", action="store_true", help="also time the bare database work (the ceiling)"
    )

    feed = parts.add_parser("feed", help="arrival-to-flag latency with a live feeder")
    feed.add_argument("--seconds", type=float, default=60.0)
    feed.add_argument("--rate", type=float, default=500.0, help="sticks per second fed")
    feed.add_argument("--period", type=float, default=0.5, help="seconds between files")
    feed.add_argument("--interval", type=float, default=1.0, help="scorer poll interval")

    poll = parts.add_parser("poll", help="cost of a poll with growing stored history")
    poll.add_argument("--readings", type=int_list, default=DEFAULT_POLL_READINGS)
    poll.add_argument("--polls", type=int, default=20)
    poll.add_argument("--batch-charges", type=int, default=50)
    poll.add_argument("--profile", action="store_true")

    args = parser.parse_args(argv)
    started = time.perf_counter()
    runner: Callable = {"backlog": run_backlog, "feed": run_feed, "poll": run_poll}[args.part]
    runner(args)
    took = time.perf_counter() - started
    print(f"\n_{args.part}: {took:.0f} s wall clock, finished {datetime.now(UTC):%H:%M} UTC._")


if __name__ == "__main__":
    main()
