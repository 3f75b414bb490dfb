"""The retraining daemon's retention job: scheduled from the config, removed with it, and run
as a job that archives, drops and leaves an event (real PostgreSQL, real scheduler)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from qcllp.ingest.measurements import ingest_measurements
from qcllp.plant.config import Retention
from qcllp.service import retrainer
from qcllp.service.retrainer import RetrainerService
from qcllp.store.events import events
from qcllp.store.partitions import list_partitions
from tests.store.test_partitions import MONTHS, month_measurements, retention_config


def test_the_retention_job_is_scheduled_from_the_config_and_removed_with_it(
    pg_store, pg_test_url, tmp_path
):
    config = retention_config(tmp_path, pg_test_url, readings_days=400, cron="15 4 * * *")
    scheduler = retrainer._scheduler(pg_store, config)
    scheduler.start(paused=True)
    try:
        retrainer._reconcile_jobs(scheduler, config)
        job = scheduler.get_job("retention", jobstore="default")
        assert job is not None and "hour='4'" in str(job.trigger)
        retrainer._reconcile_jobs(scheduler, replace(config, retention=Retention()))
        assert scheduler.get_job("retention", jobstore="default") is None
        assert scheduler.get_job("ingest", jobstore="default") is not None
    finally:
        scheduler.shutdown(wait=False)


def test_the_retention_job_drops_old_months_and_says_so(
    pg_store, pg_test_url, tiny_config, tmp_path
):
    for i, when in enumerate(MONTHS):
        ingest_measurements(pg_store, tiny_config, month_measurements(tmp_path, f"c{i}", when))
    days = (datetime.now(UTC) - datetime(2024, 3, 1, tzinfo=UTC)).days  # Jan, Feb are older
    config = retention_config(tmp_path, pg_test_url, readings_days=days)
    RetrainerService(pg_store, config).run("retention")
    with pg_store.engine.connect() as conn:
        assert [p.month for p in list_partitions(conn)] == ["2024-03"]
    (event,) = [e for e in events(pg_store, ["job"]) if e["detail"].get("job") == "retention"]
    assert event["outcome"] == "ok" and "2024-01, 2024-02" in event["reason"]
