"""What the scorer benchmarks share (``bench_scorer.py``, ``bench_partitions.py``): the
example plant's fast training setup, simulated histories ingested in pieces, the model trained
once and installed into each measured database, a scorer service whose ticks are timed, and the
raw readings' path the scorer read before issue 34 (the backlog's comparison)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

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
from qcllp.store.series_stats import series_stats  # noqa: E402
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


def raw_stick_stats(conn, sticks: list[tuple[str, str]], pairs: list[tuple[str, str]]):  # noqa: ANN001, ANN201
    """The raw path, for comparison: what ``decide.read_stick_stats`` returns (the sticks'
    series statistics coded by the sticks' and the pairs' positions), computed from the
    sticks' readings as the scorer did before issue 34 -- their series by station and
    charge, then every reading of them by ``series_id`` -- reduced to statistics in NumPy."""
    position = {key: i for i, key in enumerate(sticks)}
    code = {pair: k for k, pair in enumerate(pairs)}
    stations = list(dict.fromkeys(station for station, _ in pairs))
    charges = sorted({charge for charge, _ in sticks})
    cursor = conn.connection.dbapi_connection.cursor()
    series: dict[int, int] = {}  # series id -> its coded id
    for lo in range(0, len(charges), IN_CHUNK):
        part = charges[lo : lo + IN_CHUNK]
        cursor.execute(
            "SELECT id, charge_id, stick_id, station, sensor FROM series WHERE station IN "
            f"({placeholders(conn, len(stations))}) AND charge_id IN "
            f"({placeholders(conn, len(part))})",
            [*stations, *part],
        )
        for sid, charge, stick, station, sensor in cursor.fetchall():
            at, pair = position.get((charge, stick)), code.get((station, sensor))
            if at is not None and pair is not None:
                series[sid] = at * len(pairs) + pair
    ids, values = list(series), []
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
    coded = np.array([series[i] for i in sid.tolist()], dtype=np.int64)
    return series_stats(coded, ts.astype(np.int64), value.astype(np.float64))


@contextlib.contextmanager
def feature_path(path: str) -> Iterator[None]:
    """Run the scorer on the ``kept`` statistics (the product) or the ``raw`` readings."""
    product = decide.read_stick_stats
    decide.read_stick_stats = raw_stick_stats if path == "raw" else product
    try:
        yield
    finally:
        decide.read_stick_stats = product


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
