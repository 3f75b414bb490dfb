"""The scorer's plant for process tests, shared by the service tests: ``qcllp serve scorer``
in a process of its own against a real database file (SQLite, or a PostgreSQL URL), fed fresh
charges by in-process ingestion while it runs (:class:`Plant`, :class:`Scorer`), and the
checks the tests share. The fixtures (``history``, ``plant``, ``plant_ab``, ``start_scorer``)
reach every module of ``tests/service`` through its ``conftest.py``.

The plant: the example plant with a fast training setup (InvCal, one grid point, 2 folds),
10 history charges with their final-QC counts (the training data; they have left the line and
are never scored) and fresh charges without counts, fed in small batches. The scored station is
``cooling`` (polled every 0.2 s, ``settle_s`` 0.2 s); the simulator gives every stick readings
at ``straightening`` too, so a fresh stick is complete as soon as its batch is taken in.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.engine import make_url

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import PlantConfig, load_plant_config
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation
from qcllp.scoring.step import flags_frame
from qcllp.station.registry import promote
from qcllp.store import Alarm, ScorerCheckpoint, Store
from qcllp.training.train import train_station
from tests.service import harness
from tests.service.harness import ServiceProcess
from tests.support.eager_model import promote_locking_all

ROOT = Path(__file__).resolve().parents[2]
STATION = "cooling"
LATER_STATION = "straightening"
HISTORY_CHARGES = 10
STICKS_PER_CHARGE = (8, 16)
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S.%f%z"  # as write_simulation writes CSV timestamps
KILLS = int(os.environ.get("QCLLP_SCORER_KILLS", "20"))
KILL_SEED = int(os.environ.get("QCLLP_SCORER_KILL_SEED", "20260105"))
UNCOMMITTED_LINE = (
    b'{"station":"cooling","charge_id":"CH999999","stick_id":"CH999999-001","decision":"pass"}\n'
)
CATCH_UP_S = 60.0  # generous: the scorer needs a fraction of a second per feed


# ----------------------------------------------------------------------------- the plant
def write_config(
    folder: Path, *, timeout_s: float = 5.0, edit: Callable[[dict], None] | None = None
) -> Path:
    """The example plant, fast training, ``cooling`` polled every 0.2 s; ``edit`` changes the
    YAML's mapping before it is written (a test's connectors or scorer settings)."""
    raw = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    raw["training"] = {
        "default_method": "inv_cal",
        "methods": {"inv_cal": {"C_p": [1.0]}},
        "cv": 2,
        "random_state": 0,
        "bootstrap": 5,
    }
    for station in raw["stations"]:
        if station["name"] == STATION:
            station["scoring_interval_s"] = 0.2
            station["completion"] = {"settle_s": 0.2, "timeout_s": timeout_s}
    raw["scorer"] = {"max_lag_s": 60.0, "max_batch_sticks": 5000}
    if edit is not None:
        edit(raw)
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@dataclass(frozen=True)
class History:
    """Simulated history charges written as files (ingested into each test's database)."""

    folder: Path
    sim: SimulatedPlant


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> History:
    folder = tmp_path_factory.mktemp("scorer_history")
    config = load_plant_config(write_config(folder))
    sim = simulate_plant(
        config, HISTORY_CHARGES, random_state=3, sticks_per_charge=STICKS_PER_CHARGE
    )
    write_simulation(sim, folder)
    return History(folder, sim)


@dataclass
class Plant:
    """One test's plant database with a trained (and usually active) cooling model."""

    folder: Path
    config_path: Path
    config: PlantConfig
    url: str
    store: Store
    model_a: int
    model_b: int | None
    start: pd.Timestamp
    next_charge: int = HISTORY_CHARGES + 1
    feeds: int = 0
    expected: set[tuple[str, str]] = field(default_factory=set)

    def feed(
        self,
        n_charges: int,
        *,
        seed: int | None = None,
        edit: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
    ) -> set[tuple[str, str]]:
        """Ingest ``n_charges`` fresh charges (no counts: still on the line) as one batch;
        returns the (charge, stick) that have readings at the scored station."""
        self.feeds += 1
        sim = simulate_plant(
            self.config,
            n_charges,
            random_state=1000 + self.feeds if seed is None else seed,
            start=self.start,
            first_charge=self.next_charge,
            sticks_per_charge=STICKS_PER_CHARGE,
        )
        readings = sim.readings if edit is None else edit(sim.readings.copy())
        path = self.folder / "feeds" / f"feed-{self.feeds:03d}.csv"
        path.parent.mkdir(exist_ok=True)
        readings.to_csv(path, index=False, date_format=DATE_FORMAT)
        report = ingest_measurements(self.store, self.config, path)
        assert report.stored == len(readings) and report.quarantined_total == 0, report
        self.next_charge += n_charges
        self.start = sim.readings["timestamp"].max() + pd.Timedelta(minutes=10)
        here = readings[readings["station"] == STATION]
        keys = set(map(tuple, here[["charge_id", "stick_id"]].astype(str).values))
        self.expected |= keys
        return keys

    def flags(self) -> pd.DataFrame:
        return flags_frame(self.store, STATION)

    def flagged(self) -> set[tuple[str, str]]:
        flags = self.flags()
        return set(zip(flags["charge_id"], flags["stick_id"], strict=True))

    def checkpoint_offset(self) -> int:
        t = ScorerCheckpoint.__table__
        with self.store.engine.connect() as conn:
            offset = conn.execute(select(t.c.sink_offset).where(t.c.station == STATION)).scalar()
        return 0 if offset is None else int(offset)

    def alarms(self) -> pd.DataFrame:
        t = Alarm.__table__
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(t.c.kind, t.c.station, t.c.message)).all()
        return pd.DataFrame(rows, columns=["kind", "station", "message"])


def make_plant(
    folder: Path,
    history: History,
    *,
    url: str | None = None,
    second_model: bool = False,
    promote_first: bool = True,
    timeout_s: float = 5.0,
    edit: Callable[[dict], None] | None = None,
) -> Plant:
    """Ingest the history (with counts), train cooling (twice if ``second_model``), promote
    the first model unless told not to; ``edit``: :func:`write_config`'s."""
    config_path = write_config(folder, timeout_s=timeout_s, edit=edit)
    config = load_plant_config(config_path)
    url = url or f"sqlite:///{folder / 'plant.sqlite'}"
    store = Store.open(url, models_dir=config.models_dir)
    ingest_measurements(store, config, history.folder / "measurements")
    ingest_defect_counts(store, config, history.folder / "defects")
    model_a = train_station(store, config, STATION).model_id
    model_b = train_station(store, config, STATION).model_id if second_model else None
    if promote_first:
        promote(store, model_a)
    start = history.sim.readings["timestamp"].max() + pd.Timedelta(minutes=10)
    return Plant(folder, config_path, config, url, store, model_a, model_b, start)


# ----------------------------------------------------------------------------- the process
def wait_until(predicate, *, what: str, procs=(), timeout: float = CATCH_UP_S):
    """:func:`harness.wait_until`, by default allowing the scorer :data:`CATCH_UP_S`."""
    return harness.wait_until(predicate, what=what, procs=procs, timeout=timeout)


class Scorer(ServiceProcess):
    """One ``qcllp serve scorer`` process for the plant's cooling station."""

    def __init__(self, plant: Plant, *, sink: Path | None, name: str):
        serve_args = ["scorer", "--station", STATION]
        if sink is not None:
            serve_args += ["--sink", str(sink)]
        super().__init__(
            ["--config", str(plant.config_path), "--db", plant.url],
            serve_args,
            folder=plant.folder,
            name=name,
        )

    def wait_stepped(self, timeout: float = 30.0) -> tuple[int, dict]:
        """Until a first step has committed (the signal handlers are in place by then)."""
        return wait_until(
            lambda: (h := self.health()) is not None and h[1]["last_step_at"] is not None and h,
            what="a first step",
            procs=[self],
            timeout=timeout,
        )


@pytest.fixture
def start_scorer():
    """Start scorer processes; the ones still running at teardown are SIGKILLed (by pid)."""
    started: list[Scorer] = []

    def start(plant: Plant, *, sink: Path | None = None) -> Scorer:
        scorer = Scorer(plant, sink=sink, name=f"scorer-{len(started) + 1}")
        started.append(scorer)
        return scorer

    yield start
    for scorer in started:
        scorer.stop_if_running()


@pytest.fixture
def plant(tmp_path, history) -> Iterator[Plant]:
    """A SQLite plant with cooling model A active."""
    built = make_plant(tmp_path, history)
    yield built
    built.store.close()


@pytest.fixture
def plant_ab(tmp_path, history) -> Iterator[Plant]:
    """A SQLite plant with cooling model A active and model B a candidate."""
    built = make_plant(tmp_path, history, second_model=True)
    yield built
    built.store.close()


# ----------------------------------------------------------------------------- checks
def sink_records(sink: Path) -> list[dict]:
    """Every line of the sink, parsed (each must be one complete JSON object)."""
    data = sink.read_bytes() if sink.exists() else b""
    assert data == b"" or data.endswith(b"\n"), f"sink ends in a partial line: {data[-80:]!r}"
    records = []
    for number, line in enumerate(data.decode().splitlines(), 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise AssertionError(f"sink line {number} is not JSON: {line[:120]!r}") from exc
    return records


def assert_sink_holds_each_flag_once(plant: Plant, sink: Path) -> list[dict]:
    """The sink file holds exactly the database's flags, each once, and nothing beyond the
    committed offset (call with no scorer running)."""
    records = sink_records(sink)
    keys = [(r["charge_id"], r["stick_id"]) for r in records]
    duplicates = {k: n for k, n in Counter(keys).items() if n > 1}
    assert not duplicates, f"{len(duplicates)} flags in the sink more than once: {duplicates}"
    flags = plant.flags()
    in_db = {
        (c, s): (d, int(m))
        for c, s, d, m in zip(
            flags["charge_id"], flags["stick_id"], flags["decision"], flags["model_id"], strict=True
        )
    }
    in_sink = {(r["charge_id"], r["stick_id"]): (r["decision"], r["model_id"]) for r in records}
    assert set(in_sink) == set(in_db), (
        f"sink and database differ: {len(set(in_sink) - set(in_db))} only in the sink, "
        f"{len(set(in_db) - set(in_sink))} only in the database"
    )
    assert in_sink == in_db
    assert all(r["station"] == STATION for r in records)
    assert plant.checkpoint_offset() == (sink.stat().st_size if sink.exists() else 0)
    return records


def assert_one_flag_per_fed_stick(plant: Plant) -> None:
    flags = plant.flags()
    keys = list(zip(flags["charge_id"], flags["stick_id"], strict=True))
    assert len(keys) == len(set(keys)), "a stick has more than one flag"
    assert set(keys) == plant.expected, (
        f"{len(plant.expected - set(keys))} fed sticks without a flag, "
        f"{len(set(keys) - plant.expected)} flags for sticks never fed"
    )


def all_flagged(plant: Plant) -> bool:
    return plant.flagged() == plant.expected


@contextmanager
def paused(plant: Plant, scorer: Scorer) -> Iterator[None]:
    """The scorer SIGSTOPped between two steps (SQLite): the writer lock is taken first, so
    the process cannot be stopped inside a step's transaction; SIGCONT on exit."""
    database = make_url(plant.url).database
    conn = sqlite3.connect(database, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")  # waits for a running step to commit
        scorer.stop()  # stopped, not only signalled, before the lock is let go
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    try:
        yield
    finally:
        scorer.signal(signal.SIGCONT)


# ----------------------------------------------------------------------------- 1. kill -9


def start_locking_every_stick(plant: Plant, start_scorer) -> tuple:  # noqa: ANN001
    """A scorer whose model locks out every stick (a declining one has nothing to suspend),
    its guard tripping at the first over-predicted charge, fed 3 charges until all are
    flagged: (the scorer process, the fed (charge, stick) pairs)."""
    raw = yaml.safe_load(plant.config_path.read_text())
    raw["scorer"]["count_guard_interval"] = 0.05
    plant.config_path.write_text(yaml.safe_dump(raw))
    promote_locking_all(plant.store, plant.config, STATION, plant.model_a)
    scorer = start_scorer(plant)
    fed = plant.feed(3)
    wait_until(lambda: all_flagged(plant), what="the feed flagged", procs=[scorer])
    return scorer, fed


def report_no_failures(plant: Plant, fed) -> None:  # noqa: ANN001
    """Final QC, the line in shadow mode: every fed stick reached it and none failed."""
    n_sticks = pd.Series(Counter(charge for charge, _ in fed)).sort_index()
    qc = pd.DataFrame({"charge_id": n_sticks.index, "n_sticks": n_sticks.to_numpy()})
    for kind in plant.config.defect_types:
        qc[kind] = 0
    qc.to_csv(plant.folder / "qc.csv", index=False)
    ingest_defect_counts(plant.store, plant.config, plant.folder / "qc.csv")


# ----------------------------------------------------------------------------- 8. final QC
