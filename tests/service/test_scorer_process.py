"""The station scorer as the plant runs it: ``qcllp serve scorer`` in a process of its own.

Every test starts real processes (``python -m qcllp.cli ... serve scorer``) against a real
database file (SQLite, PostgreSQL where noted), feeds fresh charges by in-process ingestion
while the service runs, talks HTTP to its ``/healthz`` and ``/metrics`` on 127.0.0.1 and stops
it with real signals (``SIGKILL``, ``SIGTERM``, ``SIGSTOP``/``SIGCONT``).

The plant: the example plant with a fast training setup (InvCal, one grid point, 2 folds),
10 history charges with their final-QC counts (the training data; they have left the line and
are never scored) and fresh charges without counts, fed in small batches. The scored station is
``cooling`` (polled every 0.2 s, ``settle_s`` 0.2 s); the simulator gives every stick readings
at ``straightening`` too, so a fresh stick is complete as soon as its batch is taken in.

The kill test sends 5 SIGKILLs in the default run and ``QCLLP_SCORER_KILLS`` (default 20, the
issue's minimum) in the slow run CI makes (``pytest -m slow``; each kill costs a restart of
about a second), at moments drawn from a seeded generator (``QCLLP_SCORER_KILL_SEED``, default
20260105).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import select
from sqlalchemy.engine import make_url

from qcllp.cli import main
from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import PlantConfig, load_plant_config
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation
from qcllp.scoring.step import flags_frame
from qcllp.station.registry import artifact_location, get_model, promote
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
@pytest.mark.parametrize(
    "n_kills", [pytest.param(5, id="5"), pytest.param(KILLS, id="full", marks=pytest.mark.slow)]
)
def test_kill_9_at_random_moments_loses_no_flag_and_writes_none_twice(
    plant, start_scorer, capsys, n_kills
):
    rng = random.Random(KILL_SEED)
    sink = plant.folder / "flags-cooling.jsonl"
    plant.feed(3)  # waiting before the first start
    kills = torn = outstanding = 0
    left = 0  # sink size when the last scorer was started
    for round_ in range(n_kills):
        scorer = start_scorer(plant, sink=sink)
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.1, 2.5))  # during start-up or its first steps
        else:
            scorer.wait_up()
            plant.feed(rng.randint(2, 4))
            time.sleep(rng.uniform(0.0, 0.6))  # somewhere in taking in / deciding / writing
        assert scorer.proc.poll() is None, scorer.log()
        scorer.kill9()
        kills += 1
        outstanding += plant.flagged() != plant.expected
        size = sink.stat().st_size if sink.exists() else 0
        if size > plant.checkpoint_offset() and size != left:
            torn += 1  # killed between the sink's fsync and the commit
        if round_ == 1:  # as if killed in the middle of writing a line
            with open(sink, "ab") as fh:
                fh.write(b'{"station":"cooling","charge_id":"CH0000')
        if round_ == 2:  # as if killed after writing whole lines, before the commit
            lines = sink.read_bytes().splitlines(keepends=True) if sink.exists() else []
            with open(sink, "ab") as fh:
                fh.write(lines[-1] if lines else UNCOMMITTED_LINE)
        if rng.random() < 0.5:
            plant.feed(rng.randint(1, 3))  # arrives while the scorer is down
        left = sink.stat().st_size if sink.exists() else 0
    final = start_scorer(plant, sink=sink)
    final.wait_stepped()  # it cuts what the last kill left in the sink even with nothing to do
    wait_until(lambda: all_flagged(plant), what="every fed stick flagged", procs=[final])
    assert final.terminate() == 0, final.log()

    assert kills == n_kills >= 1
    assert_one_flag_per_fed_stick(plant)
    records = assert_sink_holds_each_flag_once(plant, sink)
    assert len(records) == len(plant.expected) > 0
    with capsys.disabled():
        print(
            f"\n[kill -9] seed {KILL_SEED}: {kills} kills, {outstanding} with sticks not yet "
            f"flagged, {torn} between sink write and commit; {len(records)} flags, "
            f"{plant.feeds} feeds"
        )


# ----------------------------------------------------------------------------- 2. two scorers
def test_two_scorers_for_one_station_decide_each_stick_once_into_one_shared_sink(
    store_url, tmp_path, history, start_scorer
):
    plant = make_plant(tmp_path, history, url=store_url)
    try:
        sink = tmp_path / "flags-cooling.jsonl"
        first, second = start_scorer(plant, sink=sink), start_scorer(plant, sink=sink)
        first.wait_up()
        second.wait_up()
        for n in (3, 2, 4):
            plant.feed(n)
            time.sleep(0.25)
        wait_until(lambda: all_flagged(plant), what="every stick flagged", procs=[first, second])

        # each stick was decided by exactly one of the two (the lock serializes the steps);
        # the counters move just after the commit, hence the wait
        def decided() -> list[float]:
            return [s.metric("qcllp_scorer_sticks_total") for s in (first, second)]

        wait_until(
            lambda: sum(decided()) >= len(plant.expected),
            what="the decisions counted",
            procs=[first, second],
            timeout=10,
        )
        time.sleep(0.5)  # a few more ticks: nothing is decided again
        assert sum(decided()) == len(plant.expected), decided()
        assert first.terminate() == 0, first.log()
        assert second.terminate() == 0, second.log()

        assert_one_flag_per_fed_stick(plant)
        records = assert_sink_holds_each_flag_once(plant, sink)
        assert len(records) == len(plant.expected)
    finally:
        plant.store.close()


# ----------------------------------------------------------------------------- 3. promotion
def test_a_promotion_is_picked_up_live_and_later_sticks_carry_the_new_model(plant_ab, start_scorer):
    plant = plant_ab
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    before = plant.feed(3)
    wait_until(lambda: before <= plant.flagged(), what="the first feed flagged", procs=[scorer])
    assert scorer.body()["model_id"] == plant.model_a

    promote(plant.store, plant.model_b)
    wait_until(
        lambda: scorer.body().get("model_id") == plant.model_b,
        what="the promoted model loaded",
        procs=[scorer],
        timeout=20,
    )
    after = plant.feed(3)
    wait_until(lambda: all_flagged(plant), what="the second feed flagged", procs=[scorer])

    assert scorer.proc.poll() is None  # the same process, no restart
    assert scorer.metric("qcllp_scorer_active_model_id") == plant.model_b
    flags = plant.flags().set_index(["charge_id", "stick_id"])
    assert (flags.loc[sorted(before), "model_id"] == plant.model_a).all()
    assert (flags.loc[sorted(after), "model_id"] == plant.model_b).all()
    loaded = [e for e in scorer.events() if e["event"] == "model_loaded"]
    assert [(e["model_id"], e["previous"]) for e in loaded] == [
        (plant.model_a, None),
        (plant.model_b, plant.model_a),
    ]
    assert scorer.terminate() == 0
    assert_sink_holds_each_flag_once(plant, sink)


# ----------------------------------------------------------------------------- 4. corrupt model
def test_a_corrupt_artifact_is_refused_with_an_alarm_and_the_last_good_model_keeps_scoring(
    plant_ab, start_scorer
):
    plant = plant_ab
    scorer = start_scorer(plant)
    before = plant.feed(2)
    wait_until(lambda: before <= plant.flagged(), what="the first feed flagged", procs=[scorer])

    artifact = artifact_location(plant.store, get_model(plant.store, plant.model_b))
    with paused(plant, scorer):  # so it cannot load model B before its file is damaged
        promote(plant.store, plant.model_b)  # verifies the (still intact) file
        data = bytearray(artifact.read_bytes())
        data[len(data) // 2] ^= 0xFF
        artifact.write_bytes(bytes(data))
    after = plant.feed(2)
    wait_until(lambda: all_flagged(plant), what="the second feed flagged", procs=[scorer])
    time.sleep(0.6)  # a few more ticks: the refusal is alarmed once, not once per tick

    flags = plant.flags()
    assert (flags["model_id"] == plant.model_a).all() and len(flags) == len(before | after)
    alarms = plant.alarms()
    refused = alarms[alarms["kind"] == "model_refused"]
    assert len(refused) == 1, alarms
    assert refused["station"].iloc[0] == STATION
    assert f"model {plant.model_b} refused" in refused["message"].iloc[0]
    assert scorer.metric("qcllp_scorer_alarms_total", kind="model_refused") == 1
    assert scorer.metric("qcllp_scorer_active_model_id") == plant.model_a
    status, body = scorer.health()
    assert status == 200 and body["model_id"] == plant.model_a
    assert any(a.startswith("model_refused") for a in body["alarms"])
    assert scorer.terminate() == 0


# ----------------------------------------------------------------------------- 5. unscorable
def test_a_stick_missing_a_sensor_is_unscorable_and_the_reason_names_the_sensor(
    tmp_path, history, start_scorer
):
    timeout_s = 3.0
    plant = make_plant(tmp_path, history, timeout_s=timeout_s)
    chosen: dict[str, tuple[str, str]] = {}

    def edit(readings: pd.DataFrame) -> pd.DataFrame:
        charge = sorted(readings["charge_id"].unique())[0]
        sticks = sorted(readings.loc[readings["charge_id"] == charge, "stick_id"].unique())
        later_seen, waits, settles = ((charge, s) for s in sticks[:3])
        chosen.update(later_seen=later_seen, waits=waits, settles=settles)
        key = list(zip(readings["charge_id"], readings["stick_id"], strict=True))
        stick = pd.Series(key, index=readings.index)
        at, sensor = readings["station"], readings["sensor"]
        drop = (
            ((stick == later_seen) & (at == STATION) & (sensor == "cooling_rate"))
            # missing water_flow and never seen later: complete only at the timeout
            | ((stick == waits) & (at == STATION) & (sensor == "water_flow"))
            | ((stick == waits) & (at == LATER_STATION))
            # every cooling sensor, not seen later: complete after settle_s
            | ((stick == settles) & (at == LATER_STATION))
        )
        return readings[~drop.to_numpy()]

    sink = tmp_path / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    try:
        fed_at = time.monotonic()
        plant.feed(2, edit=edit)
        others = plant.expected - {chosen["waits"]}
        wait_until(lambda: others <= plant.flagged(), what="the sticks but one", procs=[scorer])
        if time.monotonic() - fed_at < timeout_s - 1.0:  # (only if this machine kept up)
            assert chosen["waits"] not in plant.flagged(), "decided before its timeout"
        wait_until(lambda: all_flagged(plant), what="the timed-out stick", procs=[scorer])
        assert scorer.terminate() == 0

        flags = plant.flags().set_index(["charge_id", "stick_id"])
        row = flags.loc[chosen["later_seen"]]
        assert row["decision"] == "unscorable" and np.isnan(row["probability"])
        assert row["reason"] == f"no reading from sensor(s) cooling_rate at {STATION}"
        row = flags.loc[chosen["waits"]]
        assert row["decision"] == "unscorable"
        assert row["reason"] == f"no reading from sensor(s) water_flow at {STATION}"
        waited = (row["scored_at"] - row["arrived_at"]).total_seconds()
        assert waited >= timeout_s, waited
        row = flags.loc[chosen["settles"]]
        assert row["decision"] in ("pass", "lock_out") and 0.0 <= row["probability"] <= 1.0
        rest = flags.drop(index=[chosen["later_seen"], chosen["waits"]])
        assert (rest["decision"] != "unscorable").all() and rest["reason"].isna().all()
        assert_one_flag_per_fed_stick(plant)
        records = assert_sink_holds_each_flag_once(plant, sink)
        records = {(r["charge_id"], r["stick_id"]): r for r in records}
        assert "cooling_rate" in records[chosen["later_seen"]]["reason"]
        assert records[chosen["waits"]]["decision"] == "unscorable"
    finally:
        plant.store.close()


# ----------------------------------------------------------------------------- 6. endpoint
def test_healthz_is_503_without_a_model_and_200_with_its_id_once_one_is_promoted(
    tmp_path, history, start_scorer
):
    plant = make_plant(tmp_path, history, promote_first=False)
    try:
        scorer = start_scorer(plant)
        status, body = scorer.wait_up()
        assert status == 503, body
        assert body["status"] == "unhealthy" and body["model_id"] is None
        assert "no model loaded" in body["problems"]
        fed = plant.feed(2)
        # taken in and kept, not decided, while no model is active
        wait_until(
            lambda: scorer.body().get("pending_sticks") == len(fed),
            what="the sticks taken in",
            procs=[scorer],
        )
        assert scorer.health()[0] == 503 and plant.flagged() == set()
        assert scorer.metric("qcllp_scorer_active_model_id") == 0
        assert scorer.metric("qcllp_scorer_pending_sticks") == len(fed)

        promote(plant.store, plant.model_a)
        status, body = wait_until(
            lambda: (h := scorer.health()) is not None and h[0] == 200 and h,
            what="200 after the promotion",
            procs=[scorer],
        )
        assert body["status"] == "ok" and body["problems"] == []
        assert body["model_id"] == plant.model_a and body["station"] == STATION
        wait_until(lambda: all_flagged(plant), what="the waiting sticks flagged", procs=[scorer])
        assert scorer.metric("qcllp_scorer_active_model_id") == plant.model_a
        wait_until(  # the counters move just after the step's commit
            lambda: scorer.metric("qcllp_scorer_sticks_total") >= len(fed),
            what="the decisions counted",
            procs=[scorer],
            timeout=10,
        )
        assert scorer.metric("qcllp_scorer_sticks_total") == len(fed)
        assert scorer.metric("qcllp_scorer_step_seconds_count") > 0
        assert scorer.metric("qcllp_scorer_arrival_to_flag_seconds_count") == len(fed)
        wait_until(
            lambda: scorer.body().get("pending_sticks") == 0,
            what="nothing pending",
            procs=[scorer],
        )
        assert scorer.get("/nope")[0] == 404
        assert scorer.terminate() == 0
    finally:
        plant.store.close()


# ----------------------------------------------------------------------------- 7. SIGTERM
def test_sigterm_exits_0_with_flags_and_sink_consistent_and_a_restart_goes_on(plant, start_scorer):
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    scorer.wait_stepped()
    plant.feed(6)
    time.sleep(0.25)  # likely in the middle of taking the feed in or deciding it
    assert scorer.terminate() == 0, scorer.log()
    events = [e["event"] for e in scorer.events()]
    assert events[-1] == "stopped" and "stopping" in events, events
    assert_sink_holds_each_flag_once(plant, sink)
    assert plant.flagged() <= plant.expected

    plant.feed(2)
    again = start_scorer(plant, sink=sink)
    wait_until(lambda: all_flagged(plant), what="the rest flagged after a restart", procs=[again])
    assert again.terminate() == 0, again.log()
    assert_one_flag_per_fed_stick(plant)
    assert_sink_holds_each_flag_once(plant, sink)

    # what `qcllp status` tells the operator (in-process: the CLI's own tests start it)
    args = ["--config", str(plant.config_path), "--db", plant.url, "--json", "status"]
    status = CliRunner().invoke(main, args)
    assert status.exit_code == 0, status.output
    cooling = {s["station"]: s for s in json.loads(status.stdout)["stations"]}[STATION]
    assert cooling["scorer_model"] == cooling["active_model"] == plant.model_a
    assert cooling["batches_behind"] == 0 and cooling["pending_sticks"] == 0
    assert sum(cooling["flags"].values()) == len(plant.expected)


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
def test_final_qc_counts_that_the_model_over_predicted_suspend_its_lockouts_live(
    plant, start_scorer
):
    scorer, fed = start_locking_every_stick(plant, start_scorer)
    assert scorer.metric("qcllp_scorer_lockouts_suspended") == 0
    report_no_failures(plant, fed)

    wait_until(
        lambda: scorer.metric("qcllp_scorer_lockouts_suspended") == 1,
        what="the lock-outs suspended",
        procs=[scorer],
    )
    assert scorer.metric("qcllp_scorer_qc_over_prediction") > 0.05
    assert scorer.metric("qcllp_scorer_alarms_total", kind="lockout_suspended") == 1
    reason = scorer.body()["lockouts_suspended"]
    assert reason.startswith(f"lock-out suspended at {STATION}: final QC found fewer failures")
    alarms = plant.alarms()
    assert list(alarms["kind"]) == ["lockout_suspended"] and alarms["message"][0] == reason
    logged = [e for e in scorer.events() if e["event"] == "alarm"]
    assert [e["kind"] for e in logged] == ["lockout_suspended"]
    assert scorer.terminate() == 0, scorer.log()
