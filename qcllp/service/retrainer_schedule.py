"""The retraining daemon's scheduler: APScheduler with its jobs stored in the plant database.

The persistent jobs and their triggers from the plant config, reconciled with the stored ones
at start (:func:`reconcile_jobs`), one-off queued retrainings (:class:`RetrainQueue`), and a
shutdown that leaves the stored jobs exactly as they are (:func:`shutdown`). Every job calls
:data:`qcllp.service.jobstore.JOB_FUNCTION` (``qcllp.service.retrainer:run_job``), named by
that reference: the stored rows hold it, and the job store accepts no other.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from qcllp.plant.config import PlantConfig
from qcllp.service.jobstore import JOB_FUNCTION, SafeJobStore
from qcllp.service.logs import log_event
from qcllp.store import RETRAINER_JOBS, Store
from qcllp.store.events import QUEUED_PREFIX

__all__ = ["RetrainQueue", "job_triggers", "new_scheduler", "reconcile_jobs", "shutdown"]

log = logging.getLogger("qcllp.retrainer")


def job_triggers(config: PlantConfig) -> dict[str, Any]:
    """The persistent jobs and their triggers, from the plant config."""
    s, tz = config.schedules, config.timezone
    ingest = (
        IntervalTrigger(seconds=s.ingest_interval_s, timezone=tz)
        if s.ingest_interval_s
        else CronTrigger.from_crontab(s.ingest_cron, timezone=tz)
    )
    retrain = (
        IntervalTrigger(seconds=s.retrain_interval_s, timezone=tz)
        if s.retrain_interval_s
        else CronTrigger.from_crontab(s.retrain_cron, timezone=tz)
    )
    shadow = IntervalTrigger(seconds=config.retrainer.shadow_check_interval_s, timezone=tz)
    triggers = {"ingest": ingest, "retrain": retrain, "shadow": shadow}
    if config.retention.readings_days is not None:
        triggers["retention"] = CronTrigger.from_crontab(config.retention.cron, timezone=tz)
    return triggers


def reconcile_jobs(scheduler: BackgroundScheduler, config: PlantConfig) -> None:
    """Add the jobs; keep a stored job whose trigger is unchanged (its next run time, maybe a
    missed one, must survive the restart), replace one the config changed."""
    grace = max(1, int(config.retrainer.misfire_grace_s))  # APScheduler wants whole seconds
    triggers = job_triggers(config)
    for job in scheduler.get_jobs(jobstore="default"):
        # the config no longer has it (retention switched off); a queued one-off job stays
        if job.id not in triggers and not job.id.startswith(QUEUED_PREFIX):
            scheduler.remove_job(job.id, jobstore="default")
            _log("job_removed", job=job.id)
    for name, trigger in triggers.items():
        existing = scheduler.get_job(name, jobstore="default")
        same = (
            existing is not None
            and str(existing.trigger) == str(trigger)
            and existing.misfire_grace_time == grace
            and existing.args == (name,)
        )
        if same:
            _log("job_kept", job=name, next_run=existing.next_run_time)
            continue
        scheduler.add_job(
            JOB_FUNCTION,
            trigger,
            args=(name,),
            id=name,
            name=name,
            jobstore="default",
            replace_existing=True,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=grace,
        )
        _log("job_scheduled", job=name, trigger=str(trigger))


class RetrainQueue:
    """Queues one-off retrainings (``put``) in the stored job store until ``close``.

    A job (the ingest poll) queues while the daemon may be stopping: APScheduler's
    ``shutdown(wait=True)`` holds its job-store lock while it waits for running jobs, so an
    ``add_job`` from one of them would wait for ever. ``close`` (before the shutdown) waits for
    a ``put`` under way and refuses later ones; the caller then leaves its event unrecorded.
    One job per station: queued twice, it runs once."""

    def __init__(self, scheduler: BackgroundScheduler):
        self.scheduler = scheduler
        self.lock = threading.Lock()
        self.open = True

    def put(self, station: str) -> bool:
        with self.lock:
            if not self.open:
                return False
            self.scheduler.add_job(
                JOB_FUNCTION,
                "date",
                args=("retrain", [station], True),
                id=f"{QUEUED_PREFIX}{station}",
                name=f"retrain {station} (queued)",
                jobstore="default",
                replace_existing=True,
                misfire_grace_time=None,
            )
            return True

    def close(self) -> None:
        with self.lock:
            self.open = False


def shutdown(scheduler: BackgroundScheduler, *, wait: bool = True) -> None:
    """Stop the scheduler with its stored jobs left exactly as they are.

    APScheduler 3's loop makes one more pass after ``shutdown()``: a job due at that instant is
    taken as started (submitted to the stopped executor, which refuses it), then a recurring
    one is moved to its next time (a run lost, where the next start would have run it as
    missed) and a one-off one ends the loop's thread with an error. Paused first (no new job
    starts) and with the store detached, that pass finds nothing."""
    scheduler.pause()
    scheduler.remove_jobstore("default", shutdown=False)
    scheduler.shutdown(wait=wait)


def new_scheduler(store: Store, config: PlantConfig) -> BackgroundScheduler:
    """The daemon's APScheduler: its jobs stored in the plant database (read with the
    restricted unpickler), two worker threads, the plant's time zone."""
    return BackgroundScheduler(
        jobstores={
            # the stored jobs are pickles: read them with a restricted unpickler
            "default": SafeJobStore(engine=store.engine, tablename=RETRAINER_JOBS.name),
        },
        # ingest and a long retraining may run side by side; each job has max_instances=1
        executors={"default": ThreadPoolExecutor(max_workers=2)},
        timezone=config.timezone,
    )


def _log(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    log_event(log, event, level=level, **fields)
