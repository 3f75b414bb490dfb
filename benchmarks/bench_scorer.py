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
import json
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import qcllp.scoring.decide as decide  # noqa: E402
from qcllp.ingest import ingest_defect_counts, ingest_measurements  # noqa: E402
from qcllp.ingest.batches import run_batch  # noqa: E402
from qcllp.ingest.measurements import ingest_reading_frames  # noqa: E402
from qcllp.ingest.sources import Chunk  # noqa: E402
from qcllp.plant.config import PlantConfig, Training, load_plant_config  # noqa: E402
from qcllp.plant.simulate import simulate_plant, write_simulation  # noqa: E402
from qcllp.service.scorer import ScorerService  # noqa: E402
from qcllp.station.registry import active_model, get_model, promote, register_model  # noqa: E402
from qcllp.store import IN_CHUNK, Store, placeholders  # noqa: E402
from qcllp.store.series_stats import STAT_COLUMNS, series_stats  # noqa: E402
from qcllp.training.train import train_station  # noqa: E402

EXAMPLE = ROOT / "plant_config" / "example.yaml"
STATION = "cooling"
STICKS_PER_CHARGE = 50  # mean of the simulator's 20..80
READINGS_PER_STICK = 66  # 4 stations x 3 sensors x 5.5 readings
SIM_PIECE_CHARGES = 500  # simulate big histories in pieces (bounded memory)
TRAIN_CHARGES = 16
TRAIN_FIRST_CHARGE = 900_001  # ids apart from every measured charge
SCORER_TABLES = ("flags", "scorer_pending", "scorer_checkpoints", "alarms")


# ----------------------------------------------------------------------------- helpers
def machine() -> str:
    return (
        f"nproc {os.cpu_count()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.machine()} {platform.system()}"
    )


def fast_config(path: Path = EXAMPLE) -> PlantConfig:
    """The plant config with the fast training setup of the pipeline tests."""
    config = load_plant_config(path)
    training = Training(
        default_method="invcal", methods={"invcal": {"C_p": [1.0]}}, cv=2, bootstrap=5
    )
    return replace(config, training=training)


def with_max_sticks(config: PlantConfig, max_sticks: int) -> PlantConfig:
    return replace(config, scorer=replace(config.scorer, max_batch_sticks=max_sticks))


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def checkpoint_wal(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def scalar(store: Store, sql: str, **params) -> int:
    return int(store.execute_sql(sql, **params)[0][0])


@contextlib.contextmanager
def profiled(enabled: bool, title: str) -> Iterator[None]:
    """A pyinstrument profile of the block, printed to stdout (when ``enabled``)."""
    if not enabled:
        yield
        return
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.001)
    profiler.start()
    try:
        yield
    finally:
        profiler.stop()
        print(f"\n<details><summary>profile: {title}</summary>\n\n```")
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        print("```\n</details>\n")


# ----------------------------------------------------------------------------- data
def simulated_pieces(
    config: PlantConfig,
    n_charges: int,
    seed: int,
    *,
    first_charge: int = 1,
    start: pd.Timestamp | None = None,
    sticks_per_charge: tuple[int, int] = (20, 80),
) -> Iterator[pd.DataFrame]:
    """Readings of ``n_charges`` consecutive simulated charges, in pieces of at most
    :data:`SIM_PIECE_CHARGES` charges (each piece its own seed, times continue)."""
    done = 0
    start = pd.Timestamp("2026-01-05T06:00:00", tz="UTC") if start is None else start
    while done < n_charges:
        n = min(SIM_PIECE_CHARGES, n_charges - done)
        sim = simulate_plant(
            config,
            n,
            random_state=seed * 100_003 + first_charge + done,
            start=start,
            first_charge=first_charge + done,
            sticks_per_charge=sticks_per_charge,
        )
        yield sim.readings
        start = sim.readings["timestamp"].max() + pd.Timedelta(minutes=10)
        done += n


def ingest_frame(store: Store, config: PlantConfig, readings: pd.DataFrame, source: str) -> int:
    """One ingestion batch from an in-memory long frame (the public batch + frame API that the
    file and SQL connectors share; no CSV round trip). Returns readings stored."""

    def body(conn, batch_id, report) -> None:  # noqa: ANN001
        chunk = Chunk(readings.reset_index(drop=True), 1)
        ingest_reading_frames(conn, batch_id, report, config, source, [chunk])

    report = run_batch(store, "measurements", source, None, body)
    return 0 if report is None else report.stored


def ingest_history(
    store: Store, config: PlantConfig, n_charges: int, seed: int, batch_charges: int
) -> tuple[int, int, pd.Timestamp]:
    """Simulate and ingest ``n_charges`` charges in batches of ``batch_charges`` charges;
    returns (sticks, readings, last timestamp)."""
    sticks = readings = batches = 0
    last = None
    started = time.perf_counter()
    for piece in simulated_pieces(config, n_charges, seed):
        codes = piece["charge_id"].cat.codes.to_numpy()
        for lo in range(0, int(codes.max()) + 1, batch_charges):
            part = piece[(codes >= lo) & (codes < lo + batch_charges)]
            readings += ingest_frame(store, config, part, f"bench:history:{batches}")
            sticks += part["stick_id"].nunique()
            batches += 1
        last = piece["timestamp"].max()
        rate = readings / (time.perf_counter() - started)
        say(f"  ingested {sticks:,} sticks, {readings:,} readings ({rate:,.0f} readings/s)")
    return sticks, readings, last


def trained_model(cache: Path, config: PlantConfig) -> dict:
    """The registry row of a cooling model trained in a small separate database (cached)."""
    folder = cache / "train"
    db = folder / "train.sqlite"
    if db.exists():
        with Store.open(sqlite_url(db), create=False) as store:
            record = active_model(store, STATION)
        if record is not None and (folder / "models" / record["artifact_path"]).exists():
            return {**record, "artifact_path": str(folder / "models" / record["artifact_path"])}
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    say(f"training the {STATION} model on {TRAIN_CHARGES} labeled charges ...")
    sim = simulate_plant(config, TRAIN_CHARGES, random_state=3, first_charge=TRAIN_FIRST_CHARGE)
    files = write_simulation(sim, folder / "files")
    with Store.open(sqlite_url(db)) as store:
        ingest_measurements(store, config, folder / "files" / "measurements")
        ingest_defect_counts(store, config, files["defects"])
        model_id = train_station(store, config, STATION).model_id
        promote(store, model_id)
        record = get_model(store, model_id)
    return {**record, "artifact_path": str(folder / "models" / record["artifact_path"])}


def install_model(store: Store, record: dict) -> int:
    """Copy the trained model's artifact into ``store``'s models folder (a row may only name a
    file there), register it and make it active there."""
    current = active_model(store, STATION)
    if current is not None and current["sha256"] == record["sha256"]:
        return int(current["id"])
    source = Path(record["artifact_path"])
    store.models_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copy(source, store.models_dir / source.name)
    fields = {k: v for k, v in record.items() if k not in ("id", "status", "promoted_at")}
    fields["artifact_path"] = source.name
    model_id = register_model(store, **fields)
    promote(store, model_id)
    return model_id


def reset_scorer(store: Store) -> None:
    """Forget everything the scorers did (flags, pending sticks, checkpoints, alarms)."""
    with store.engine.begin() as conn:
        for table in SCORER_TABLES:
            conn.exec_driver_sql(f"DELETE FROM {table}")


class TimedService:
    """A ScorerService whose steps are timed one by one."""

    def __init__(self, store: Store, config: PlantConfig, sink: Path | None):
        self.service = ScorerService(store, config, STATION, sink=sink)
        self.service.refresh_models()  # loaded and verified before any clock starts
        self.steps: list[float] = []
        plain_step = self.service.step

        def step():  # noqa: ANN202
            started = time.perf_counter()
            result = plain_step()
            self.steps.append(time.perf_counter() - started)
            return result

        self.service.step = step

    def tick(self) -> tuple[int, float]:
        """(sticks decided, seconds) of one tick."""
        started = time.perf_counter()
        decided = self.service.tick(max_steps=1_000_000)
        return decided, time.perf_counter() - started


def raw_stick_stats(conn, sticks: pd.DataFrame, stations: list[str]):  # noqa: ANN001, ANN201
    """The raw path, for comparison: what ``decide.read_stick_stats`` returns (the rows and
    their (charge_id, stick_id)), computed from
    the sticks' readings as the scorer did before issue 34 -- their series by station and
    charge, then every reading of them by ``series_id`` -- reduced to statistics in NumPy."""
    wanted = pd.MultiIndex.from_frame(sticks[["charge_id", "stick_id"]].astype(str))
    charges = sorted(set(wanted.get_level_values(0)))
    names = ["id", "charge_id", "stick_id", "station", "sensor"]
    cursor = conn.connection.dbapi_connection.cursor()
    found, values = [], []
    for lo in range(0, len(charges), IN_CHUNK):
        part = charges[lo : lo + IN_CHUNK]
        cursor.execute(
            f"SELECT {', '.join(names)} FROM series WHERE station IN "
            f"({placeholders(conn, len(stations))}) AND charge_id IN "
            f"({placeholders(conn, len(part))})",
            [*stations, *part],
        )
        found += cursor.fetchall()
    series = pd.DataFrame.from_records(found, columns=names)
    series = series.loc[pd.MultiIndex.from_frame(series[names[1:3]]).isin(wanted)]
    ids = series["id"].astype("int64").tolist()
    for lo in range(0, len(ids), IN_CHUNK):
        chunk = ids[lo : lo + IN_CHUNK]
        cursor.execute(
            "SELECT series_id, ts_us, value FROM readings "
            f"WHERE series_id IN ({placeholders(conn, len(chunk))})",
            chunk,
        )
        values += cursor.fetchall()
    cursor.close()
    sid, ts, value = (np.array(c) for c in zip(*values, strict=True))
    stats = series_stats(sid.astype(np.int64), ts.astype(np.int64), value.astype(np.float64))
    out = series.set_index("id").loc[stats.ids, names[1:]].reset_index(drop=True)
    for column in STAT_COLUMNS:
        out[column] = getattr(stats, column)
    keys = zip(
        out["charge_id"].astype(str).tolist(), out["stick_id"].astype(str).tolist(), strict=True
    )
    return out, list(keys)


@contextlib.contextmanager
def feature_path(path: str) -> Iterator[None]:
    """Run the scorer on the ``kept`` statistics (the product) or the ``raw`` readings."""
    product = decide.read_stick_stats
    decide.read_stick_stats = raw_stick_stats if path == "raw" else product
    try:
        yield
    finally:
        decide.read_stick_stats = product


# ----------------------------------------------------------------------------- backlog
def cached_history(
    cache: Path,
    kind: str,
    n_charges: int,
    config: PlantConfig,
    args,  # noqa: ANN001 - seed, batch_charges
    record: dict,
    finish: Callable[[Store], dict],
) -> tuple[Path, dict]:
    """A SQLite history of ``n_charges`` ingested charges with the model installed, built once
    and cached as ``<kind>-<charges>ch-s<seed>-b<batch>.sqlite`` with its meta in a ``.json``
    beside it; ``finish(store)`` does the part's own setup and returns its extra meta."""
    db = cache / f"{kind}-{n_charges}ch-s{args.seed}-b{args.batch_charges}.sqlite"
    meta_path = db.with_suffix(".json")
    if db.exists() and meta_path.exists():
        return db, json.loads(meta_path.read_text())
    building = db.with_name(db.name + ".building")
    remove_db(building)
    say(f"building the {kind} history: {n_charges} charges -> {db}")
    started = time.perf_counter()
    with Store.open(sqlite_url(building)) as store:
        sticks, readings, last = ingest_history(
            store, config, n_charges, args.seed, args.batch_charges
        )
        install_model(store, record)
        extra = finish(store)
    checkpoint_wal(building)
    meta = {
        "charges": n_charges,
        "sticks": sticks,
        "readings": readings,
        "last": last.isoformat(),
        **extra,
        "build_s": round(time.perf_counter() - started, 1),
    }
    os.replace(building, db)
    meta_path.write_text(json.dumps(meta))
    return db, meta


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
        "statistics per series; `raw`: the series' readings, reduced in NumPy (the scorer "
        "before issue 34). Target >= 30,000 sticks/s.\n"
    )
    print(
        "| max_batch_sticks | path | sticks flagged | drain s | sticks/s | vs raw | vs target "
        "| steps | first step s | slowest step s | flags = sink = sticks |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for (max_sticks, path), runs in rows.items():
        seconds = median([r["seconds"] for r in runs])
        raw = rows.get((max_sticks, "raw"))
        versus = median([r["seconds"] for r in raw]) / seconds if raw else float("nan")
        decided = runs[0]["decided"]
        ok = all(r["flags"] == r["sink"] == r["decided"] == meta["sticks"] for r in runs)
        print(
            f"| {max_sticks:,} | {path} | {decided:,} | {seconds:.2f} | {decided / seconds:,.0f} "
            f"| {versus:.2f}x | {decided / seconds / 30_000:.2f}x | {runs[0]['steps']} "
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
    * ``kept``: the product's one query instead, the same series joined to their kept
      statistics;
    * ``write``: per stick one ``scorer_pending`` row inserted, one ``flags`` row inserted and
      the pending row deleted, as ``executemany`` with tuples built before the clock, inside
      one transaction that is rolled back.
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
            kept_rows = _floor_kept_read(cur, charges, stations)
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


def _floor_kept_read(cur: sqlite3.Cursor, charges: list[str], stations: list[str]) -> int:
    """The product's one query, 100 charges at a time: the series joined to their kept
    statistics; the rows fetched."""
    rows = 0
    for lo in range(0, len(charges), 100):
        part = charges[lo : lo + 100]
        rows += len(
            cur.execute(
                "SELECT s.charge_id, s.stick_id, s.station, s.sensor, t.version, t.n, "
                "t.t0_us, t.t1_us, t.moments FROM series s JOIN series_stats t "
                f"ON t.series_id = s.id WHERE s.station IN ({','.join('?' * len(stations))}) "
                f"AND s.charge_id IN ({','.join('?' * len(part))})",
                [*stations, *part],
            ).fetchall()
        )
    return rows


def _floor_writes(cur: sqlite3.Cursor, sticks: list[tuple], model_id: int) -> float:
    """Seconds to insert a pending row and a flag and delete the pending row for every
    stick (``executemany``, tuples built before the clock), rolled back."""
    stamp = "2026-01-05 06:00:00.000000"
    pending = [(STATION, c, s, stamp, stamp, stamp, 1) for c, s in sticks]
    flags = [(STATION, c, s, model_id, 0.1, 0, "pass", 0.5, stamp, stamp) for c, s in sticks]
    keys = [(STATION, c, s) for c, s in sticks]
    cur.execute("BEGIN IMMEDIATE")
    started = time.perf_counter()
    cur.executemany(
        "INSERT INTO scorer_pending (station, charge_id, stick_id, first_arrived_at, "
        "arrived_at, due_at, later_seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
        pending,
    )
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
        "(tuples, no pandas; the raw readings for comparison) and writing one pending row, "
        "one flag and one delete per stick (`executemany`, rolled back). Median of the same "
        "repeats.\n"
    )
    print("| work | rows | s | sticks/s if only this |")
    print("|---|---:|---:|---:|")
    kept = floor["kept_s"]
    for work, rows, s in (
        ("read series + readings (raw)", floor["rows_read"], read),
        ("read series + statistics (kept)", floor["kept_rows"], kept),
    ):
        print(f"| {work} | {rows:,} | {s:.2f} | {n / s:,.0f} |")
    print(f"| write pending + flag, delete pending | {3 * n:,} | {write:.2f} | {n / write:,.0f} |")
    print(f"| kept read + write (the ceiling) | | {kept + write:.2f} | {n / (kept + write):,.0f} |")
    print(f"| the scorer's drain (best row above) | | {n / best:.2f} | {best:,.0f} |")


# ----------------------------------------------------------------------------- feed
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def feed_yaml(folder: Path) -> Path:
    """The example plant with cooling completing at once (settle 0 s, timeout 60 s)."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    for station in raw["stations"]:
        if station["name"] == STATION:
            station["completion"] = {"settle_s": 0.0, "timeout_s": 60}
    raw.pop("connectors", None)
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def feed_files(cache: Path, config: PlantConfig, args) -> tuple[list[Path], set[tuple[str, str]]]:
    """Pre-written CSV files (long layout), each with all readings of ``rate * period`` sticks
    at the stations up to cooling; and the fed (charge, stick) keys."""
    n_files = max(1, round(args.seconds / args.period))
    per_file = max(1, round(args.rate * args.period))
    folder = cache / f"feed-{n_files}x{per_file}-s{args.seed}"
    keys_path = folder / "sticks.csv"
    if keys_path.exists():
        files = sorted(folder.glob("batch-*.csv"))
        keys = pd.read_csv(keys_path, dtype=str)
        if len(files) == n_files:
            return files, set(zip(keys["charge_id"], keys["stick_id"], strict=True))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    total = n_files * per_file
    n_charges = math.ceil(total / STICKS_PER_CHARGE * 1.1) + 1
    say(f"writing {n_files} feed files of {per_file} sticks ({n_charges} charges simulated)")
    sim = simulate_plant(config, n_charges, random_state=args.seed, first_charge=500_001)
    stations = [s.name for s in config.stations_up_to(STATION)]
    readings = sim.readings[sim.readings["station"].isin(stations)]
    order = sim.truth[["charge_id", "stick_id"]].astype(str).iloc[:total]
    file_of = pd.Series(np.arange(len(order)) // per_file, index=order["stick_id"].to_numpy())
    which = file_of.reindex(readings["stick_id"].astype(str).to_numpy()).to_numpy()
    files = []
    for i in range(n_files):
        part = readings[which == i].sort_values(["station", "timestamp"], kind="stable")
        path = folder / f"batch-{i:05d}.csv"
        part.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S.%f%z")
        files.append(path)
    order.to_csv(keys_path, index=False)
    return files, set(zip(order["charge_id"], order["stick_id"], strict=True))


def healthz(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 503 carries the same body
        return json.loads(exc.read())
    except OSError:
        return None


def run_feed(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    record = trained_model(cache, fast_config())
    files, fed = feed_files(cache, fast_config(), args)
    run = cache / "feed-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    config_path = feed_yaml(run)
    config = load_plant_config(config_path)
    url = sqlite_url(run / "plant.sqlite")
    with Store.open(url) as store:
        install_model(store, record)
    sink, log_path = run / "flags-cooling.jsonl", run / "scorer.log"
    service = start_feed_scorer(config_path, url, sink, log_path, args)
    try:
        say(f"feeding {len(files)} files")
        with Store.open(url, create=False) as store:
            fed_s, ingest_s, behind = feed_on_schedule(store, config, files, args)
            stored, flags = flags_after_feed(store, fed, service, args)
    finally:
        code = stop_service(service)
    feeding = {"fed_s": fed_s, "ingest_s": ingest_s, "behind": behind, "stored": stored}
    print_feed(flags, fed, files, sink, log_path, feeding, code, args)


def start_feed_scorer(
    config_path: Path, url: str, sink: Path, log_path: Path, args
) -> subprocess.Popen:
    """``qcllp serve scorer`` for cooling with ``sink``, logging to ``log_path``, once its
    ``/healthz`` names the model: the process."""
    port = free_port()
    command = [
        str(ROOT / ".venv" / "bin" / "qcllp"), "--config", str(config_path), "--db", url,
        "serve", "scorer", "--station", STATION, "--interval", str(args.interval),
        "--port", str(port), "--sink", str(sink),
    ]  # fmt: skip
    say("starting: " + " ".join(command))
    with open(log_path, "wb") as log_file:
        service = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while (health := healthz(port)) is None or health.get("model_id") is None:
        if service.poll() is not None or time.monotonic() > deadline:
            stop_service(service)
            raise RuntimeError(f"the scorer did not come up; see {log_path}")
        time.sleep(0.1)
    say(f"scorer up (model {health['model_id']})")
    return service


def feed_on_schedule(store: Store, config: PlantConfig, files: list[Path], args) -> tuple:
    """Ingest one file every ``args.period`` s: (seconds it took, each file's ingest
    seconds, the most it fell behind the schedule)."""
    ingest_s, behind = [], 0.0
    started = time.monotonic()
    for i, path in enumerate(files):
        wait = started + i * args.period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            behind = max(behind, -wait)
        t = time.perf_counter()
        ingest_measurements(store, config, path)
        ingest_s.append(time.perf_counter() - t)
    return time.monotonic() - started, ingest_s, behind


def flags_after_feed(
    store: Store, fed: set, service: subprocess.Popen, args
) -> tuple[int, pd.DataFrame]:
    """Once every fed stick has a flag (at most a minute, unless the scorer exits), and one
    more poll: the readings stored and the station's flags."""
    deadline = time.monotonic() + 60
    while scalar(store, "SELECT count(*) FROM flags") < len(fed):
        if time.monotonic() > deadline or service.poll() is not None:
            break
        time.sleep(0.2)
    time.sleep(2 * args.interval)  # one more poll: nothing must be flagged twice
    stored = scalar(store, "SELECT coalesce(sum(rows_stored), 0) FROM ingestion_batches")
    columns = ["charge_id", "stick_id", "decision", "arrived_at", "scored_at"]
    rows = store.execute_sql(
        f"SELECT {', '.join(columns)} FROM flags WHERE station = :s", s=STATION
    )
    return stored, pd.DataFrame(rows, columns=columns)


def stop_service(service: subprocess.Popen) -> int:
    """SIGTERM, a minute to exit, then SIGKILL: the exit code."""
    service.send_signal(signal.SIGTERM)
    try:
        return service.wait(timeout=60)
    except subprocess.TimeoutExpired:
        service.kill()
        return service.wait()


def print_feed(
    flags: pd.DataFrame,
    fed: set,
    files: list[Path],
    sink: Path,
    log_path: Path,
    feeding: dict,
    code: int,
    args,
) -> None:
    """The feed's latency table and its checks (markdown)."""
    arrived = pd.to_datetime(flags["arrived_at"], utc=True, format="ISO8601")
    scored = pd.to_datetime(flags["scored_at"], utc=True, format="ISO8601")
    latency = (scored - arrived).dt.total_seconds().to_numpy()
    steps = step_log(log_path)
    commit = committed_latency(scored, arrived, steps)
    keys = list(zip(flags["charge_id"], flags["stick_id"], strict=True))
    once = len(keys) == len(set(keys)) == len(fed) and set(keys) == fed
    sink_keys = [
        (line["charge_id"], line["stick_id"])
        for line in map(json.loads, sink.read_text().splitlines())
    ]
    sink_once = len(sink_keys) == len(set(sink_keys)) and set(sink_keys) == set(keys)

    def pct(values: np.ndarray, q: float) -> str:
        return f"{np.percentile(values, q):.3f}" if len(values) else "n/a"

    ingest_s = feeding["ingest_s"]
    print(f"## feed: arrival-to-flag latency at `{STATION}` with a live feeder (SQLite)\n")
    print(f"Machine: {machine()}.  ")
    print(
        f"Feeder (this process): {len(files)} CSV files, one per {args.period:g} s, "
        f"{len(fed) / len(files):.0f} sticks each ({args.rate:g} sticks/s, "
        f"{feeding['stored'] / len(files):,.0f} readings per file) for {args.seconds:g} s; fed in "
        f"{feeding['fed_s']:.1f} s, median ingest {median(ingest_s):.3f} s per file (max "
        f"{max(ingest_s):.3f} s), at most {feeding['behind']:.2f} s behind schedule.  "
    )
    print(
        f"Service: `qcllp serve scorer --station {STATION} --interval {args.interval:g}` "
        f"(subprocess, exit code {code}); cooling `completion: {{settle_s: 0, timeout_s: 60}}`; "
        f"{len(steps)} steps that did work, median {median([s for _, s in steps]):.3f} s, "
        f"max {max([s for _, s in steps], default=float('nan')):.3f} s. Target p99 <= 2 s.\n"
    )
    print("| latency | n | p50 s | p99 s | max s |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| `scored_at - arrived_at` (to the step's start) | {len(latency):,} "
        f"| {pct(latency, 50)} | {pct(latency, 99)} | {pct(latency, 100)} |"
    )
    print(
        f"| + step duration (to the flag's commit, from the step log) | {len(commit):,} "
        f"| {pct(commit, 50)} | {pct(commit, 99)} | {pct(commit, 100)} |"
    )
    print()
    print("| check | result |")
    print("|---|---|")
    print(f"| sticks fed | {len(fed):,} |")
    print(f"| sticks flagged | {len(set(keys)):,} ({flags['decision'].value_counts().to_dict()}) |")
    print(f"| every fed stick exactly one flag | {'yes' if once else 'NO'} |")
    print(f"| sink: one line per flag | {'yes' if sink_once else 'NO'} ({len(sink_keys):,}) |")


def step_log(path: Path) -> list[tuple[pd.Timestamp, float]]:
    """(end time, seconds) of the service's logged steps that did work."""
    steps = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") == "step":
                steps.append((pd.Timestamp(event["ts"]), float(event["seconds"])))
    return steps


def committed_latency(
    scored: pd.Series, arrived: pd.Series, steps: list[tuple[pd.Timestamp, float]]
) -> np.ndarray:
    """Latency to the end of the step that wrote each flag: the flag's ``scored_at`` is its
    step's start, the log line's time is (just after) its end."""
    if not steps or not len(scored):
        return np.empty(0)
    ends = pd.DatetimeIndex([t for t, _ in steps]).tz_convert("UTC").sort_values()
    position = ends.searchsorted(pd.DatetimeIndex(scored))
    known = position < len(ends)
    end = pd.Series(pd.NaT, index=scored.index, dtype="datetime64[ns, UTC]")
    end[known] = ends[position[known]]
    return (end - arrived).dt.total_seconds().dropna().to_numpy()


# ----------------------------------------------------------------------------- poll
def poll_db(cache: Path, config: PlantConfig, readings: int, args, record: dict) -> tuple:
    """A cached history of about ``readings`` readings, everything flagged already."""
    n_charges = max(1, round(readings / (STICKS_PER_CHARGE * READINGS_PER_STICK)))

    def flag_everything(store: Store) -> dict:
        decided, drain_s = TimedService(store, config, None).tick()
        say(f"  history flagged: {decided:,} sticks in {drain_s:.1f} s (setup, not measured)")
        return {"drain_s": round(drain_s, 1)}

    return cached_history(cache, "poll", n_charges, config, args, record, flag_everything)


def run_poll(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    config = fast_config()
    record = trained_model(cache, config)
    results = [poll_size(cache, config, size, args, record) for size in args.readings]
    print_poll(results, args)


def poll_size(cache: Path, config: PlantConfig, size: int, args, record: dict) -> tuple:
    """``args.polls`` timed polls (one new charge each, then an empty poll) on a copy of the
    cached history of about ``size`` readings: (meta, flags, busy s, idle s, DB bytes)."""
    db, meta = poll_db(cache, config, size, args, record)
    work = cache / "poll-work.sqlite"
    remove_db(work)
    shutil.copyfile(db, work)
    new = list(
        simulated_pieces(
            config,
            args.polls + 1,
            args.seed + 7,
            first_charge=800_001,
            start=pd.Timestamp(meta["last"]) + pd.Timedelta(hours=1),
            sticks_per_charge=(50, 50),
        )
    )[0]
    codes = new["charge_id"].cat.codes.to_numpy()
    busy, idle = [], []
    with Store.open(sqlite_url(work), create=False) as store:
        service = TimedService(store, config, cache / "poll-sink.jsonl")
        service.tick()  # nothing new: warm caches
        profile = args.profile and size == max(args.readings)
        with profiled(profile, f"{args.polls} polls with {meta['readings']:,} readings stored"):
            for i in range(args.polls + 1):
                ingest_frame(store, config, new[codes == i], f"bench:poll:{i}")
                decided, seconds = service.tick()
                if decided != 50:
                    raise RuntimeError(f"poll {i} decided {decided} sticks, expected 50")
                _, idle_s = service.tick()
                if i:  # the first poll after opening is a warm-up
                    busy.append(seconds)
                    idle.append(idle_s)
        flags = scalar(store, "SELECT count(*) FROM flags")
    remove_db(work)
    say(
        f"  {meta['readings']:,} readings: poll with 50 new sticks {median(busy) * 1e3:.1f} ms,"
        f" empty poll {median(idle) * 1e3:.1f} ms"
    )
    return meta, flags, busy, idle, db.stat().st_size


def print_poll(results: list[tuple], args) -> None:
    base_busy, base_idle = median(results[0][2]), median(results[0][3])
    print("## poll: one poll against the stored history (SQLite)\n")
    print(f"Machine: {machine()}.  ")
    sizes = " vs ".join(f"{r / 1e6:g}M" for r in args.readings)
    mode = "quick mode (default)" if args.readings == DEFAULT_POLL_READINGS else "custom sizes"
    print(
        f"History sizes requested: {sizes} readings ({mode}); every stored stick already flagged."
        f"  \nPer poll: one new ingestion batch (1 charge, 50 sticks, all stations; ingest not "
        f"timed), then `tick()` (takes it in, flags 50), then `tick()` with nothing new. "
        f"Median of {args.polls} polls after one warm-up.\n"
    )
    print(
        "| readings stored | sticks stored | flags stored | DB MB | poll, 50 new sticks ms "
        "| vs smallest | empty poll ms | vs smallest |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for meta, flags, busy, idle, size in results:
        print(
            f"| {meta['readings']:,} | {meta['sticks']:,} | {flags:,} | {size / 1e6:,.0f} "
            f"| {median(busy) * 1e3:.1f} | {median(busy) / base_busy:.2f}x "
            f"| {median(idle) * 1e3:.1f} | {median(idle) / base_idle:.2f}x |"
        )


# ----------------------------------------------------------------------------- main
DEFAULT_POLL_READINGS = [100_000, 1_000_000]


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
