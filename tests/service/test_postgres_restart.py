"""A PostgreSQL server restarted under a running scorer and retraining daemon (issue "Beyond
one machine", item 4): both are real ``qcllp serve`` processes on a server of the test's own;
the server is stopped as an operator's restart stops it (``pg_ctl stop -m fast``: sessions
terminated, open transactions rolled back), kept away for a few seconds and started again.
Both services must notice (a failed scorer step; a retried daemon job or APScheduler's failed
look-up of due jobs), neither may exit, and
afterwards every stick fed is flagged exactly once, in the database and in the sink file.
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.pgserver import TempPostgres, find_pg_bin
from tests.service.harness import ServiceProcess, free_port
from tests.service.scorer_plant import (
    STATION,
    assert_one_flag_per_fed_stick,
    assert_sink_holds_each_flag_once,
    make_plant,
    wait_until,
)

OUTAGE_S = 4.0


@pytest.fixture
def own_server():
    """A PostgreSQL server for this test alone (the session's server must not go away)."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found (deploy/bootstrap.sh --test)")
    server = TempPostgres(bin_dir, port=free_port())
    try:
        yield server
    finally:
        server.stop()


def daemon_config(plant) -> str:
    """The scorer plant's config with the daemon's part: cooling retrained every 2 s, a lease
    that outlives the outage (a lost lease ends a daemon on purpose: not this test's point)."""
    raw = yaml.safe_load(plant.config_path.read_text())
    raw["schedules"] = {"ingest_interval_s": 1.0, "retrain_interval_s": 2.0}
    raw["retrainer"] = {
        "stations": [STATION],
        "holdout_charges": 3,
        "min_holdout_charges": 2,
        "lease_ttl_s": 60,
    }
    for kind in ("measurements", "defects"):  # the example's drop folders, empty here
        (plant.folder / "data" / kind).mkdir(parents=True, exist_ok=True)
    path = plant.folder / "daemon.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _stop_the_server_a_while(plant, own_server, scorer, daemon) -> None:
    """The server stopped under both services for :data:`OUTAGE_S` once the scorer noticed,
    the scorer unhealthy meanwhile, then started again."""
    plant.store.engine.dispose()  # the test's own connections would only be stale
    own_server.halt()
    wait_until(
        lambda: scorer.metric("qcllp_scorer_step_errors_total") > 0,
        what="the scorer to notice the database is away",
        procs=[scorer, daemon],
    )
    time.sleep(OUTAGE_S)
    status, body = scorer.health()
    assert status == 503 and any("last step failed" in p for p in body["problems"]), body
    own_server.start()


@pytest.mark.slow
def test_a_postgresql_restart_under_both_services_loses_nothing_and_repeats_nothing(
    tmp_path,
    history,
    start_scorer,
    own_server,
):
    url = own_server.create_database("plant")
    plant = make_plant(tmp_path, history, url=url)
    sink = tmp_path / "flags.jsonl"
    scorer = start_scorer(plant, sink=sink)
    daemon = ServiceProcess(
        ["--config", daemon_config(plant), "--db", url],
        ["retrainer"],
        folder=plant.folder,
        name="retrainer",
    )
    try:
        scorer.wait_stepped()
        wait_until(lambda: daemon.body().get("standby") is False, what="the daemon to lead",
                   procs=[daemon])  # fmt: skip
        plant.feed(3)
        wait_until(lambda: plant.flagged() == plant.expected, what="the first feed's flags",
                   procs=[scorer, daemon])  # fmt: skip
        jobs_before = daemon.metric("qcllp_retrainer_jobs_total")

        _stop_the_server_a_while(plant, own_server, scorer, daemon)
        plant.feed(4)  # after the return: the services must take it up on their own
        wait_until(lambda: plant.flagged() == plant.expected, what="the flags after the restart",
                   procs=[scorer, daemon])  # fmt: skip
        wait_until(lambda: scorer.health()[0] == 200, what="the scorer healthy again",
                   procs=[scorer])  # fmt: skip
        wait_until(
            lambda: daemon.metric("qcllp_retrainer_jobs_total", outcome="ok") > jobs_before,
            what="a daemon job to succeed after the restart",
            procs=[daemon],
        )
        # the daemon met the outage either in a job (retried with backoff) or in APScheduler's
        # look-up of due jobs in its job store (the plant database), which it repeats itself
        met = [
            e
            for e in daemon.events()
            if e.get("event") == "retry"
            or (e.get("logger") == "apscheduler.scheduler" and "job store" in e.get("message", ""))
        ]
        assert met, "the daemon never met the outage"
        assert daemon.health()[0] == 200 and daemon.body()["standby"] is False
        assert scorer.terminate() == 0 and daemon.terminate() == 0
    finally:
        daemon.stop_if_running()
    assert_one_flag_per_fed_stick(plant)
    assert_sink_holds_each_flag_once(plant, sink)
    plant.store.close()
