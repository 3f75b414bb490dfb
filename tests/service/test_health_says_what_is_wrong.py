"""``/healthz`` says what is wrong (issue 31, item 9), measured on real processes over real
HTTP: the retraining daemon answers 503 naming the failed lease renewal while its PostgreSQL
server is stopped (``pg_ctl stop``) and 200 again once a renewal succeeds after the restart;
a scorer whose station's lock-outs are suspended answers ``"status": "degraded"`` with the
reason and the alarm from the database -- also after a restart, when this process raised
nothing -- and shows an alarm another process stored for its station."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace

import yaml

from qcllp.plant.config import load_plant_config
from qcllp.scoring.step import record_alarm
from qcllp.service.retrainer import RetrainerService
from qcllp.service.scorer import ScorerService
from qcllp.store import Store
from tests.plant.conftest import EXAMPLE
from tests.service.harness import ServiceProcess, wait_until
from tests.service.scorer_plant import (
    STATION,
    all_flagged,
    make_plant,
    report_no_failures,
    start_locking_every_stick,
)
from tests.service.test_postgres_restart import own_server  # noqa: F401 (fixture)
from tests.support.eager_model import promote_locking_all

LEASE_TTL_S = 30.0  # renewed every 10 s (BEAT_MAX_S), retried every 2 s after a failure


def daemon_config(tmp_path) -> str:
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["schedules"] = {"ingest_interval_s": 3600.0, "retrain_interval_s": 3600.0}
    raw["retrainer"] = {"lease_ttl_s": LEASE_TTL_S}
    for kind in ("measurements", "defects"):  # the example's drop folders, empty here
        (tmp_path / "data" / kind).mkdir(parents=True, exist_ok=True)
    path = tmp_path / "daemon.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def renewal_problem(daemon: ServiceProcess) -> str | None:
    answer = daemon.health()
    if answer is None or answer[0] != 503:
        return None
    found = [p for p in answer[1]["problems"] if p.startswith("lease renewal failed: ")]
    return found[0] if found else None


def test_the_daemon_is_unhealthy_while_it_cannot_renew_its_lease(tmp_path, own_server):  # noqa: F811
    url = own_server.create_database("plant")
    Store.open(url).close()  # migrated
    daemon = ServiceProcess(
        ["--config", daemon_config(tmp_path), "--db", url],
        ["retrainer"],
        folder=tmp_path,
        name="retrainer",
    )
    try:
        wait_until(
            lambda: (h := daemon.health()) and h[0] == 200 and not h[1]["standby"],
            what="the daemon leading and healthy",
            procs=[daemon],
        )
        wait_until(  # its start-up done: the jobs are in the store
            lambda: len([e for e in daemon.events() if e["event"] == "job_scheduled"]) == 3,
            what="the jobs scheduled",
            procs=[daemon],
        )
        own_server.halt()
        stopped = time.monotonic()
        problem = wait_until(
            lambda: renewal_problem(daemon), what="503 naming the renewal", procs=[daemon]
        )
        assert time.monotonic() - stopped < 10.0 + 5.0  # one beat, and slack for a busy host
        assert " UTC" in problem and "since " in problem
        time.sleep(4.0)  # retried meanwhile: still failing, still said
        assert renewal_problem(daemon) is not None
        own_server.start()
        wait_until(
            lambda: (h := daemon.health()) and h[0] == 200 and h[1]["problems"] == [],
            what="200 after a renewal succeeded",
            procs=[daemon],
            timeout=30,
        )
        assert daemon.terminate() == 0
    finally:
        daemon.stop_if_running()
    assert [e for e in daemon.events() if e.get("event") == "lease_lost"] == []


def test_a_scorer_with_suspended_lockouts_says_degraded_with_the_alarm_across_a_restart(
    plant,
    start_scorer,
):
    scorer, fed = start_locking_every_stick(plant, start_scorer)
    report_no_failures(plant, fed)
    wait_until(
        lambda: scorer.body().get("lockouts_suspended"),
        what="the lock-outs suspended",
        procs=[scorer],
    )
    (alarm,) = plant.alarms()["message"]
    assert_degraded(scorer, alarm)

    scorer.kill9()  # a new process: it raised no alarm itself
    again = start_scorer(plant)
    wait_until(lambda: again.body().get("lockouts_suspended"), what="the suspension read")
    assert_degraded(again, alarm)
    record_alarm(plant.store, "retrainer", STATION, "count_drift", "raised by another process")
    wait_until(
        lambda: "count_drift: raised by another process" in again.body()["alarms"],
        what="another process's alarm shown",
        procs=[again],
    )
    assert again.terminate() == 0


def test_a_step_that_reads_a_suspension_shows_its_alarm_with_it(plant):
    """The step that sets ``lockouts_suspended`` brings the stored alarm into ``/healthz``
    too -- the one that raised it, and a restarted scorer's first -- before, the alarms were
    read only at the end of the tick, and a look between saw the suspension without its
    alarm (a CI run of the process test above)."""
    promote_locking_all(plant.store, plant.config, STATION, plant.model_a)
    config = replace(plant.config, scorer=replace(plant.config.scorer, count_guard_interval=0.05))
    fed = plant.feed(3)
    service = ScorerService(plant.store, config, STATION)
    service.refresh_models()
    while service.step().more:
        pass
    assert all_flagged(plant)
    report_no_failures(plant, fed)
    for _ in range(5):  # the guard reads final QC's counts in a step of its own
        guard = service.step().guard  # None on an idle look
        if guard is not None and guard.suspended_at is not None:
            break
    (alarm,) = plant.alarms()["message"]
    for scorer in (service, ScorerService(plant.store, config, STATION)):
        if scorer is not service:  # a restart: one step, no tick
            scorer.refresh_models()
            scorer.step()
        body = scorer.state.health()[1]
        assert body["lockouts_suspended"] and body["alarms"] == [f"lockout_suspended: {alarm}"]


def assert_degraded(scorer: ServiceProcess, alarm: str) -> None:
    status, body = scorer.health()
    assert status == 200, body  # it still decides every stick: nothing to restart
    assert body["status"] == "degraded"
    assert body["problems"] == [f"lock-outs suspended: {body['lockouts_suspended']}"]
    assert body["alarms"] == [f"lockout_suspended: {alarm}"]


def test_a_start_up_step_retried_through_an_outage_leaves_no_stale_error(own_server):  # noqa: F811
    """A step before the first job (recover, schedule) retried while the database was away
    reports it in ``/healthz`` and takes it back once it succeeded (no job run would clear it
    for hours: the daemon stayed 503 after the database was back)."""
    url = own_server.create_database("plant")
    store = Store.open(url)
    service = RetrainerService(store, load_plant_config(EXAMPLE))
    own_server.halt()
    seen: list[int] = []

    def step() -> list:
        seen.append(service.state.health()[0])
        return store.execute_sql("SELECT 1")

    back = threading.Timer(0.5, own_server.start)
    back.start()
    try:
        assert service._with_retries("recover", step) == [(1,)]
    finally:
        back.join()
        store.close()
    assert 503 in seen  # it was said while it lasted
    status, body = service.state.health()
    assert status == 200 and body["problems"] == [], body


def test_a_read_that_fails_after_a_step_commits_keeps_the_step_counted_and_says_why(
    tmp_path,
    history,
    own_server,  # noqa: F811
    caplog,
):
    """The step commits its flags, then the service reads what its state needs (the
    station's alarms). Here that read fails for real: the scorer's PostgreSQL role may write
    alarms but not read them. The step's flags stand once, its counters and log line count
    them, ``/healthz`` names the failed read and keeps the state it had; with the read
    allowed again the next tick shows the step."""
    caplog.set_level(logging.INFO, logger="qcllp.scorer")
    plant = make_plant(tmp_path, history, url=own_server.create_database("plant"))
    own_server.execute(
        "plant",
        "CREATE ROLE scorer LOGIN",
        "GRANT ALL ON ALL TABLES IN SCHEMA public TO scorer",
        "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO scorer",
        "REVOKE SELECT ON alarms FROM scorer",
    )
    fed = plant.feed(2)
    scorer_url = plant.url.replace("postgres@", "scorer@", 1)
    store = Store.open(scorer_url, models_dir=plant.config.models_dir)
    try:
        service = ScorerService(store, plant.config, STATION)
        service.tick()
        assert plant.flagged() == fed and len(plant.flags()) == len(fed)  # committed, once
        sample = service.metrics.registry.get_sample_value
        decided = [
            sample("qcllp_scorer_sticks_total", {"station": STATION, "decision": d}) or 0.0
            for d in ("lock_out", "pass", "inspect", "unscorable")
        ]
        assert sum(decided) == len(fed)
        assert sample("qcllp_scorer_step_errors_total", {"station": STATION}) == 1
        events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "qcllp.scorer"]
        assert [e["decided"] for e in events if e["event"] == "step"] == [len(fed)]
        status, body = service.state.health()
        assert status == 503 and any("permission denied" in p for p in body["problems"]), body
        assert body["pending_sticks"] is None  # the state as it was: no step shown yet

        own_server.execute("plant", "GRANT SELECT ON alarms TO scorer")
        service.tick()
        status, body = service.state.health()
        assert status == 200 and body["pending_sticks"] == 0 and body["problems"] == [], body
        assert len(plant.flags()) == len(fed)  # nothing decided twice
    finally:
        store.close()
        plant.store.close()
