"""The retraining daemon as the plant runs it: ``qcllp serve retrainer`` in processes of its
own, on a real SQLite file, fed by files dropped into its watched folders, watched over HTTP
(``/healthz``, ``/metrics``) and through the database (events, registry, alarms), stopped with
real signals (SIGTERM, SIGKILL).

The plant is :mod:`tests.support.retrain_plant` (48 history charges with counts, 14 later
ones as they are or after a process change) with the fast training setup; the daemon retrains
one station (``rolling``) so that a training takes a second or two; intervals are short (ingest
every 0.3 s) and the lease lives 3 s, so a takeover is quick.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from qcllp.retraining.retrain import retrain_station
from qcllp.station.registry import artifact_location, list_models, load_model
from qcllp.store import Alarm, IngestionBatch, Store
from qcllp.store.events import events, record_event
from tests.service.harness import ServiceProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]
STATION = "rolling"
# renewed every 2 s; a renewal waits for SQLite's writer (an ingest batch): at 3 s a busy host's
# leader lost its lease to the standby
LEASE_TTL_S = 6.0


class Daemon(ServiceProcess):
    """One ``qcllp serve retrainer`` process of a test plant."""

    def __init__(self, plant: DaemonPlant, name: str):
        super().__init__(
            ["--config", str(plant.config_path), "--db", plant.url],
            ["retrainer"],
            folder=plant.folder,
            name=name,
        )

    def leading(self, timeout: float = 30.0) -> dict:
        return wait_until(
            lambda: (b := self.body()).get("standby") is False and b,
            what=f"{self.name} to lead",
            procs=[self],
            timeout=timeout,
        )

    def logged(self, event: str, **fields) -> list[dict]:
        return [
            e
            for e in self.events()
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]


class DaemonPlant:
    """A plant folder: ``plant.yaml`` (fast training, watched folders, short intervals), its
    database, the drop folders, and the files of the retraining test plant to drop."""

    def __init__(
        self,
        folder: Path,
        source,
        *,
        retrain_interval_s: float,
        history: bool,
        url: str | None = None,
    ):
        self.folder, self.source = folder, source
        self.drop = folder / "drop"
        for kind in ("measurements", "defects"):
            (self.drop / kind).mkdir(parents=True)
        self.database = folder / "plant.sqlite"
        self.url = url or f"sqlite:///{self.database}"
        if history:
            source.copy_to(folder).close()
        else:
            Store.open(self.url).close()
        raw = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
        raw["training"] = {
            "default_method": "invcal",
            "methods": {"invcal": {"C_p": [1.0]}},
            "cv": 2,
            "bootstrap": 5,
        }
        raw["connectors"] = {
            "measurements": {"path": "drop/measurements", "format": "csv", "pattern": "*.csv"},
            "defects": {"path": "drop/defects", "format": "csv", "pattern": "*.csv"},
        }
        raw["schedules"] = {"ingest_interval_s": 0.3, "retrain_interval_s": retrain_interval_s}
        r = source.config.retrainer
        raw["retrainer"] = {
            "stations": [STATION],
            "holdout_charges": r.holdout_charges,
            "min_holdout_charges": r.min_holdout_charges,
            "lease_ttl_s": LEASE_TTL_S,
            "drift": {"window_charges": r.drift_window_charges},
            "shadow_trials": False,  # the shadow path: tests/service/test_retrainer_shadow.py
        }
        self.config_path = folder / "plant.yaml"
        self.config_path.write_text(yaml.safe_dump(raw))

    def drop_files(self, kind: str) -> None:
        """Copy the files of ``kind`` (history, same, worse, ...) into the watched folders,
        each written under a temporary name and renamed, as a careful exporter does."""
        for sub in ("measurements", "defects"):
            for path in sorted((self.source.folder / kind / sub).iterdir()):
                target = self.drop / sub / f"{kind}-{path.name}"
                partial = target.with_suffix(".part")
                shutil.copy(path, partial)
                partial.rename(target)

    def store(self) -> Store:
        return Store.open(self.url, models_dir=self.folder / "models")  # beside plant.yaml

    def decisions(self) -> list[dict]:
        with self.store() as store:
            return events(store, ["promotion"], station=STATION, limit=100)

    def trained(self) -> list[dict]:
        with self.store() as store:
            return events(store, ["trained"], station=STATION, limit=100)


@pytest.fixture
def start_daemon() -> Iterator:
    started: list[Daemon] = []

    def start(plant: DaemonPlant) -> Daemon:
        daemon = Daemon(plant, f"retrainer-{len(started) + 1}")
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop_if_running()


def make_plant(
    tmp_path, source, *, retrain_interval_s=3600.0, history=False, url=None
) -> DaemonPlant:
    return DaemonPlant(
        tmp_path / "plant", source, retrain_interval_s=retrain_interval_s, history=history, url=url
    )


def assert_registry_consistent(plant: DaemonPlant) -> None:
    """At most one active model; every model's artifact loads; every model the daemon trained
    got a decision; no artifact file without a row older than a lease."""
    with plant.store() as store:
        models = list_models(store, STATION)
        assert sum(m["status"] == "active" for m in models) <= 1, models
        for m in models:
            load_model(store, m["id"])
        trained = {e["model_id"] for e in events(store, ["trained"], limit=1000) if e["model_id"]}
        decided = {e["model_id"] for e in events(store, ["promotion"], limit=1000)}
        assert trained <= decided, (trained, decided)
        files = {Path(m["artifact_path"]).name for m in models}
        folder = plant.folder / "models"
        stale = time.time() - LEASE_TTL_S
        orphans = [
            p.name
            for p in (folder.iterdir() if folder.is_dir() else [])
            if p.name not in files and p.stat().st_mtime < stale
        ]
        assert orphans == [], orphans


# ----------------------------------------------------------------------------- the tests
def test_dropped_files_are_ingested_and_the_station_trained_promoted_and_reported(
    tmp_path, retrain_plant, start_daemon, store_url
):
    url = None if store_url.startswith("sqlite") else store_url  # PostgreSQL: the test server
    plant = make_plant(tmp_path, retrain_plant, retrain_interval_s=1.0, url=url)
    daemon = start_daemon(plant)
    daemon.leading()
    plant.drop_files("history")
    (promoted,) = wait_until(
        lambda: [d for d in plant.decisions() if d["outcome"] == "promoted"],
        what="a promotion",
        procs=[daemon],
    )
    assert promoted["reason"].startswith("first model")
    status, body = daemon.health()
    assert status == 200 and body["standby"] is False and body["problems"] == []
    # The decision is committed before the counter moves: wait for the counter, then pin it.
    wait_until(
        lambda: daemon.metric("qcllp_retrainer_station_retrains_total", outcome="promoted"),
        what="the promotion counted",
        procs=[daemon],
    )
    assert daemon.metric("qcllp_retrainer_station_retrains_total", outcome="promoted") == 1
    assert daemon.metric("qcllp_retrainer_leader") == 1
    wait_until(
        lambda: daemon.logged("retrain", station=STATION, outcome="skipped"),
        what="a retraining that finds nothing new",
        procs=[daemon],
    )
    with plant.store() as store:
        assert store.count(IngestionBatch) == 2
        from qcllp.reporting.status import plant_status

        state = plant_status(store, retrain_plant.config)
    assert state["retrainer"]["leader"] == body["holder"]
    assert {j["job"] for j in state["retrainer"]["jobs"]} == {"ingest", "retrain", "shadow"}
    assert state["decisions"][0]["model_id"] == promoted["model_id"]
    (rolling,) = [s for s in state["stations"] if s["station"] == STATION]
    assert rolling["active_model"] == promoted["model_id"] and rolling["model_age_h"] == 0.0
    assert daemon.terminate() == 0
    assert daemon.logged("stopped", exit_code=0)
    with plant.store() as store:
        assert state["retrainer"]["leader"] is not None
        from qcllp.store.leases import RETRAINER_LEASE, lease_holder

        assert lease_holder(store, RETRAINER_LEASE) is None  # released on the way out
    assert_registry_consistent(plant)


@pytest.mark.slow
def test_a_process_change_raises_the_drift_alarm_and_triggers_a_retraining(
    tmp_path, retrain_plant, start_daemon
):
    plant = make_plant(tmp_path, retrain_plant, history=True)
    with plant.store() as store:
        first = retrain_station(store, retrain_plant.config, STATION)
    assert first.outcome == "promoted"
    daemon = start_daemon(plant)
    daemon.leading()
    plant.drop_files("worse")  # the later charges: defects at three times the rate
    forced = wait_until(
        lambda: [
            d
            for d in plant.decisions()
            if d["model_id"] != first.model_id and d["detail"]["candidate"]
        ],
        what="the retraining the drift alarm queued, and its decision",
        procs=[daemon],
    )
    with plant.store() as store:
        (trained,) = [e for e in events(store, ["trained"]) if e["model_id"] != first.model_id]
        alarms = store.engine.connect().execute(select(Alarm.kind, Alarm.station)).all()
    assert trained["detail"]["forced"] is True and "(drift)" in trained["reason"]
    assert ("count_drift", STATION) in alarms
    assert daemon.logged("count_drift", station=STATION)
    assert daemon.metric("qcllp_retrainer_count_drift_alarms_total", station=STATION) == 1
    assert forced[0]["reason"]
    assert daemon.terminate() == 0
    assert_registry_consistent(plant)


@pytest.mark.slow
def test_a_retraining_a_kill_lost_in_a_worker_runs_when_the_daemon_starts(
    tmp_path, retrain_plant, start_daemon
):
    """The state a ``kill -9`` leaves after a suspension's queued job went to a worker: the
    ``guard_retrain`` event, no job row, no training. The next daemon retrains the station as
    it starts (the scheduled retraining is an hour away)."""
    plant = make_plant(tmp_path, retrain_plant, history=True)
    with plant.store() as store:
        first = retrain_station(store, retrain_plant.config, STATION)
        assert first.outcome == "promoted"
        record_event(
            store,
            "guard_retrain",
            "queued",
            f"retraining queued: lock-out suspended at {STATION}",
            station=STATION,
            model_id=first.model_id,
        )
        (wanted,) = events(store, ["guard_retrain"])
    daemon = start_daemon(plant)
    daemon.leading()
    answered = wait_until(
        lambda: [
            e
            for e in plant.trained()
            if e["model_id"] != first.model_id and e["detail"].get("answers") == wanted["id"]
        ],
        what="the forced retraining that answers the lost one",
        procs=[daemon],
    )
    assert answered[0]["detail"]["forced"] is True
    assert daemon.logged("retrain_requeued", station=STATION)
    assert daemon.terminate() == 0
    assert_registry_consistent(plant)


def test_two_daemons_one_works_the_other_stands_by_and_takes_over_after_a_kill(
    tmp_path, retrain_plant, start_daemon
):
    plant = make_plant(tmp_path, retrain_plant, retrain_interval_s=1.0)
    first, second = start_daemon(plant), start_daemon(plant)
    wait_until(
        lambda: {first.body().get("standby"), second.body().get("standby")} == {True, False},
        what="one leader and one standby",
        procs=[first, second],
    )
    leader, standby = (first, second) if first.body()["standby"] is False else (second, first)
    assert standby.health()[0] == 200 and standby.metric("qcllp_retrainer_leader") == 0
    plant.drop_files("history")
    wait_until(plant.decisions, what="a decision", procs=[leader, standby])
    time.sleep(2.5)  # more retraining ticks: nothing new, nothing trained twice
    with plant.store() as store:
        trained = events(store, ["trained"], limit=100)
    assert len(trained) == 1, trained
    assert standby.logged("standby") and not standby.logged("leading")

    leader.kill9()
    took_over = time.monotonic()
    standby.leading(timeout=LEASE_TTL_S * 4)
    assert time.monotonic() - took_over < LEASE_TTL_S * 2
    wait_until(
        lambda: standby.logged("retrain", station=STATION, outcome="skipped"),
        what="the new leader's first retraining",
        procs=[standby],
    )
    with plant.store() as store:
        assert len(events(store, ["trained"], limit=100)) == 1  # the same data: not again
    assert standby.terminate() == 0
    assert_registry_consistent(plant)


@pytest.mark.parametrize(
    "moment",
    [
        "grid search",
        pytest.param("charge-grouped validation", marks=pytest.mark.slow),
        pytest.param("registered", marks=pytest.mark.slow),
    ],
)
def test_a_kill_9_mid_training_leaves_a_consistent_registry_and_the_restart_recovers(
    tmp_path, retrain_plant, start_daemon, moment
):
    plant = make_plant(tmp_path, retrain_plant, retrain_interval_s=0.5, history=True)
    daemon = start_daemon(plant)
    wait_until(
        lambda: any(moment in e.get("step", "") for e in daemon.logged("progress")),
        what=f"the training to reach {moment!r}",
        procs=[daemon],
        interval=0.005,
    )
    daemon.kill9()
    with plant.store() as store:
        decided = {e["model_id"] for e in events(store, ["promotion"], limit=100)}
        undecided = [m["id"] for m in list_models(store, STATION) if m["id"] not in decided]
    restarted = start_daemon(plant)
    wait_until(
        lambda: [d for d in plant.decisions() if d["outcome"] == "promoted"],
        what="a promoted model after the restart",
        procs=[restarted],
    )
    assert restarted.terminate() == 0
    assert_registry_consistent(plant)
    with plant.store() as store:
        models = list_models(store, STATION)
    assert sum(m["status"] == "active" for m in models) == 1
    if undecided:  # killed between registration and decision: the restart decided
        assert [e["action"] for e in restarted.logged("recovered")], restarted.log()


def test_sigterm_mid_training_exits_0_and_registers_nothing_half_done(
    tmp_path, retrain_plant, start_daemon
):
    plant = make_plant(tmp_path, retrain_plant, retrain_interval_s=0.5, history=True)
    daemon = start_daemon(plant)
    wait_until(
        lambda: any("grid search" in e.get("step", "") for e in daemon.logged("progress")),
        what="a training under way",
        procs=[daemon],
        interval=0.005,
    )
    started = time.monotonic()
    assert daemon.terminate(timeout=60) == 0
    assert time.monotonic() - started < 30
    assert daemon.logged("stopped", exit_code=0)
    finished = daemon.logged("retrain", station=STATION)
    abandoned = daemon.logged("job_abandoned", job="retrain")
    assert len(finished) + len(abandoned) == 1, daemon.log()
    assert_registry_consistent(plant)
    with plant.store() as store:
        models = list_models(store, STATION)
        from qcllp.store.leases import lease_holder, station_lease_name

        assert lease_holder(store, station_lease_name(STATION)) is None
    if abandoned:
        assert models == []


@pytest.mark.slow
def test_a_daemon_that_was_down_runs_a_missed_job_once_not_once_per_missed_time(
    tmp_path, retrain_plant, start_daemon
):
    plant = make_plant(tmp_path, retrain_plant, retrain_interval_s=4.0, history=True)
    with plant.store() as store:
        retrain_station(store, retrain_plant.config, STATION)  # later retrainings: "skipped"
    daemon = start_daemon(plant)
    daemon.leading()
    wait_until(
        lambda: daemon.logged("job_done", job="retrain"), what="a first retraining", procs=[daemon]
    )
    assert daemon.terminate() == 0
    time.sleep(13)  # three scheduled times missed
    again = start_daemon(plant)
    again.leading()
    wait_until(
        lambda: again.logged("job_done", job="retrain"), what="the missed run", procs=[again]
    )
    # the stored schedule's grid: its missed time, and every 4 s after it
    (kept,) = again.logged("job_kept", job="retrain")  # the stored job, not a new schedule
    missed = datetime.fromisoformat(kept["next_run"])
    (led,) = again.logged("leading")
    leading = datetime.fromisoformat(led["ts"])
    periods = math.ceil((leading - missed).total_seconds() / 4.0)
    next_regular = missed + timedelta(seconds=4.0 * periods)
    # up to just before the second regular time: the missed times' one run and the first
    # regular run (one run when the two coincide); once per missed time would be 3 or more
    window_end = next_regular + timedelta(seconds=3.5)
    wait_until(lambda: datetime.now(UTC) > window_end, what="the window", procs=[again])
    runs = [
        e
        for e in again.logged("job_done", job="retrain")
        if datetime.fromisoformat(e["ts"]) < window_end
    ]
    assert (leading - missed).total_seconds() > 8  # at least two times were missed
    assert 1 <= len(runs) <= 2, json.dumps(again.events(), indent=1)[-3000:]
    assert again.terminate() == 0


def test_a_corrupt_active_model_does_not_stop_the_daemon(tmp_path, retrain_plant, start_daemon):
    plant = make_plant(tmp_path, retrain_plant, history=True)
    with plant.store() as store:
        first = retrain_station(store, retrain_plant.config, STATION)
        path = artifact_location(store, load_model(store, first.model_id).record)
    path.write_bytes(b"not a model any more")
    daemon = start_daemon(plant)
    daemon.leading()
    plant.drop_files("worse")
    wait_until(
        lambda: daemon.logged("drift_skipped", station=STATION),
        what="the drift watch to skip the unreadable model",
        procs=[daemon],
    )
    status, body = daemon.health()
    assert status == 200, body
    assert daemon.signal(signal.SIGTERM) is None and daemon.proc.wait(timeout=30) == 0
