"""The retraining daemon's job store with its PostgreSQL server halted (a real server of the
test's own, stopped as an operator's restart stops it): the two calls APScheduler makes
outside any ``try`` -- the next run time, and the update of a job it just submitted -- log
one line and return instead of raising, which would end the scheduler's thread; once the
server is back the job store answers again and the job is as it was."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from qcllp.service.jobstore import JOB_FUNCTION, RETRY_S, SafeJobStore
from qcllp.store import RETRAINER_JOBS, Store
from tests.service.test_postgres_restart import own_server  # noqa: F401 (fixture)


def test_the_job_store_says_the_database_is_away_and_the_scheduler_lives_on(
    own_server,  # noqa: F811
    caplog,
):
    url = own_server.create_database("plant")
    store = Store.open(url)
    jobs = SafeJobStore(engine=store.engine, tablename=RETRAINER_JOBS.name)
    scheduler = BackgroundScheduler(timezone="UTC", jobstores={"default": jobs})
    later = datetime.now(UTC) + timedelta(days=1)
    scheduler.add_job(JOB_FUNCTION, "date", run_date=later, args=["retrain"], id="retrain")
    scheduler.start(paused=True)
    try:
        job = scheduler.get_job("retrain")
        assert jobs.get_next_run_time() == later
        own_server.halt()
        with caplog.at_level(logging.WARNING, logger="qcllp.retrainer"):
            before = datetime.now(UTC)
            retry_at = jobs.get_next_run_time()
            job.next_run_time = later + timedelta(hours=1)
            jobs.update_job(job)  # would have raised, ending the scheduler's thread
        lines = [json.loads(r.getMessage()) for r in caplog.records]
        assert [line["event"] for line in lines] == ["job_store_unreachable", "job_not_updated"]
        assert lines[0]["retry_s"] == RETRY_S and "OperationalError" in lines[0]["error"]
        assert lines[1]["job"] == "retrain"
        assert before + timedelta(seconds=RETRY_S - 1) <= retry_at
        assert retry_at <= datetime.now(UTC) + timedelta(seconds=RETRY_S)
        own_server.start()
        assert jobs.get_next_run_time() == later  # the row as it was: the update did not land
    finally:
        scheduler.shutdown(wait=False)
        store.close()
