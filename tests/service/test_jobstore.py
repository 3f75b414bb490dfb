"""The retraining daemon's job store reads its pickled rows without running code: the daemon's
real jobs load, a hostile row (a pickle that runs a command, or a job that would call
something else) is refused in one log line, deleted, and the daemon goes on -- checked on a
real ``qcllp serve retrainer`` process."""

from __future__ import annotations

import os
import pickle
import time

import pytest
from sqlalchemy import insert, select

from qcllp.service import retrainer
from qcllp.service.jobstore import JOB_FUNCTION, UnsafeJobError, job_state
from qcllp.store import RETRAINER_JOBS
from tests.service.harness import wait_until
from tests.service.test_retrainer_process import Daemon, make_plant, start_daemon  # noqa: F401
from tests.store.test_partitions import retention_config


class _RunsCommand:
    """A pickle whose loading runs a shell command (what a hostile row would hold)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _job_row(store, job_id: str, data: bytes) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            insert(RETRAINER_JOBS).values(id=job_id, next_run_time=time.time() - 5, job_state=data)
        )


def _stored_states(store) -> dict[str, bytes]:
    with store.engine.connect() as conn:
        return dict(conn.execute(select(RETRAINER_JOBS.c.id, RETRAINER_JOBS.c.job_state)).all())


def test_the_daemons_real_jobs_are_read_back(pg_store, pg_test_url, tmp_path):
    """Interval, cron (retention: PostgreSQL) and a queued one-off job, as the daemon stores
    them."""
    store = pg_store
    config = retention_config(tmp_path, pg_test_url, readings_days=400, cron="15 4 * * 1-5")
    scheduler = retrainer._scheduler(store, config)
    scheduler.start(paused=True)
    try:
        retrainer._reconcile_jobs(scheduler, config)
        assert retrainer._RetrainQueue(scheduler).put("furnace")
        states = _stored_states(store)
        assert {"ingest", "retrain", "retention", "queued-retrain-furnace"} <= set(states)
        for data in states.values():
            assert job_state(data)["func"] == JOB_FUNCTION
        assert {job.id for job in scheduler.get_jobs()} == set(states)
    finally:
        retrainer._shutdown(scheduler, wait=False)


@pytest.mark.parametrize(
    "payload, reason",
    [
        (_RunsCommand("true"), "may not hold posix.system"),
        ({"func": "os:system", "args": ("true",), "kwargs": {}}, "calls 'os:system'"),
        ({"func": JOB_FUNCTION, "args": (_RunsCommand("true"),), "kwargs": {}}, "posix.system"),
    ],
)
def test_a_hostile_job_state_is_refused_before_anything_runs(payload, reason):
    with pytest.raises(UnsafeJobError, match=reason):
        job_state(pickle.dumps(payload))


def test_a_free_getattr_is_refused():
    """``builtins.getattr`` is allowed only for ZoneInfo's own unpickling."""
    data = b"\x80\x04cbuiltins\ngetattr\ncdatetime\ndatetime\nX\x08\x00\x00\x00__init__\x86R."
    with pytest.raises(UnsafeJobError, match="getattr"):
        job_state(data)


def test_a_daemon_starting_on_hostile_job_rows_runs_none_of_them(
    tmp_path,
    retrain_plant,
    start_daemon,  # noqa: F811 (the fixture imported above)
):
    plant = make_plant(tmp_path, retrain_plant)
    ran = tmp_path / "ran"
    command = f"touch {ran}"
    called = {"func": "os:system", "args": (command,), "kwargs": {}, "id": "x", "version": 1}
    with plant.store() as store:
        _job_row(store, "evil-pickle", pickle.dumps({"x": _RunsCommand(command)}))
        _job_row(store, "queued-retrain-rolling", pickle.dumps(called))
    daemon = start_daemon(plant)
    daemon.leading()
    for job in ("evil-pickle", "queued-retrain-rolling"):
        wait_until(lambda j=job: daemon.logged("job_refused", job=j), what=f"{job} refused")
    time.sleep(1.0)  # the scheduler's loop has run due jobs by now
    assert not ran.exists()
    (line,) = daemon.logged("job_refused", job="evil-pickle")
    assert "may not hold posix.system" in line["error"]
    with plant.store() as store:
        states = _stored_states(store)
    assert "evil-pickle" not in states and "queued-retrain-rolling" not in states
    assert {"ingest", "retrain"} <= set(states)  # the configured jobs are scheduled
    assert daemon.terminate() == 0
    for data in states.values():
        job_state(data)
