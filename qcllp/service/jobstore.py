"""The retraining daemon's job store: APScheduler's SQLAlchemy store, read without running code.

APScheduler 3 stores each job as a pickle in the plant database (``retrainer_jobs``) and
unpickles it when the daemon starts or looks for due jobs: whoever can write that table would
run code in the daemon. :class:`SafeJobStore` keeps APScheduler's store (the next run times, a
missed run and a queued one-off retraining must survive a restart) and reads each row with a
restricted unpickler that builds only the types a qcllp job holds -- APScheduler's triggers and
cron fields, ``datetime``/``timedelta``/time zones -- and then accepts the job only if it calls
:func:`qcllp.service.retrainer.run_job` with plain arguments (a job calling anything else would
run that at its next time). A row that fails is logged in one line naming the job, deleted (as
APScheduler deletes a row it cannot restore) and the daemon goes on; its next start adds the
configured jobs again. The set of names was found by pickling the daemon's real jobs (an
interval, a cron and a one-off date job, with ZoneInfo and UTC time zones).
"""

from __future__ import annotations

import io
import logging
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.job import Job
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from sqlalchemy import and_, select
from sqlalchemy.exc import SQLAlchemyError

from qcllp.service.logs import log_event, one_line

__all__ = ["JOB_FUNCTION", "SafeJobStore", "UnsafeJobError", "job_state"]

log = logging.getLogger("qcllp.retrainer")

JOB_FUNCTION = "qcllp.service.retrainer:run_job"
RETRY_S = 10.0  # with the database away, the scheduler looks again after this (its own default)

_CRON_FIELDS = (
    "BaseField",
    "WeekField",
    "DayOfMonthField",
    "DayOfWeekField",
    "MonthField",
)
_CRON_EXPRESSIONS = (
    "AllExpression",
    "RangeExpression",
    "MonthRangeExpression",
    "WeekdayRangeExpression",
    "WeekdayPositionExpression",
    "LastDayOfMonthExpression",
)
_ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        ("apscheduler.triggers.cron", "CronTrigger"),
        ("apscheduler.triggers.interval", "IntervalTrigger"),
        ("apscheduler.triggers.date", "DateTrigger"),
        ("datetime", "datetime"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("zoneinfo", "ZoneInfo"),
        *(("apscheduler.triggers.cron.fields", name) for name in _CRON_FIELDS),
        *(("apscheduler.triggers.cron.expressions", name) for name in _CRON_EXPRESSIONS),
    }
)


class UnsafeJobError(pickle.UnpicklingError):
    """A stored job that holds something other than a qcllp job."""


def _zoneinfo_attribute(obj: Any, name: str) -> Any:
    """The one ``getattr`` a pickled ZoneInfo needs (``ZoneInfo._unpickle``), and no other:
    a free ``getattr`` would reach any attribute of the allowed classes."""
    if obj is ZoneInfo and name == "_unpickle":
        return ZoneInfo._unpickle
    raise UnsafeJobError(f"getattr({obj!r}, {name!r}) is not allowed in a stored job")


class _JobUnpickler(pickle.Unpickler):
    """Builds only the names of :data:`_ALLOWED` (and ZoneInfo's one ``getattr``)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _zoneinfo_attribute
        if (module, name) not in _ALLOWED:
            raise UnsafeJobError(f"a stored job may not hold {module}.{name}")
        return super().find_class(module, name)


def _plain(value: Any) -> bool:
    """Strings, booleans, numbers, None and lists/tuples of them: a job's arguments."""
    if isinstance(value, list | tuple):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, str | bool | int | float)


def job_state(data: bytes) -> dict[str, Any]:
    """A stored job's state, refused (:class:`UnsafeJobError`) unless it is a qcllp job:
    only allowed types, :data:`JOB_FUNCTION` called with plain arguments."""
    state = _JobUnpickler(io.BytesIO(data)).load()
    if not isinstance(state, dict):
        raise UnsafeJobError(f"a stored job is a {type(state).__name__}, not a job's state")
    if state.get("func") != JOB_FUNCTION:
        raise UnsafeJobError(f"a stored job calls {state.get('func')!r}, not {JOB_FUNCTION}")
    if not _plain(state.get("args", ())) or state.get("kwargs"):
        raise UnsafeJobError("a stored job's arguments are not plain values")
    return state


class SafeJobStore(SQLAlchemyJobStore):
    """APScheduler's SQLAlchemy job store reading its rows with :func:`job_state`, and
    surviving a database that is away (:meth:`get_next_run_time`, :meth:`update_job`)."""

    def get_next_run_time(self) -> datetime | None:
        """As APScheduler's; with the database away, one log line and a wake-up in
        :data:`RETRY_S`. APScheduler 3.11 calls this outside the ``try`` it puts around the
        look-up of due jobs (``BaseScheduler._process_jobs``): a database that went away
        between the two ended the scheduler's thread, and the daemon ran on scheduling
        nothing (seen once in ``test_health_says_what_is_wrong``, a server halted at that
        moment). The next look-up retries, and is logged by APScheduler while it fails."""
        try:
            return super().get_next_run_time()
        except SQLAlchemyError as exc:
            log_event(
                log, "job_store_unreachable", level=logging.WARNING, error=one_line(exc),
                retry_s=RETRY_S,
            )  # fmt: skip
            return datetime.now(UTC) + timedelta(seconds=RETRY_S)

    def update_job(self, job: Job) -> None:
        """As APScheduler's; with the database away, one log line instead of the end of the
        scheduler's thread (it calls this outside any ``try`` once a due job is submitted).
        The row keeps its old next run time, so the job is due again once the database is
        back: a run that failed for want of the database runs again."""
        try:
            super().update_job(job)
        except SQLAlchemyError as exc:
            log_event(
                log, "job_not_updated", level=logging.WARNING, job=job.id,
                error=one_line(exc), action="due again once the database is back",
            )  # fmt: skip

    def _reconstitute_job(self, job_state_bytes: bytes) -> Job:
        state = job_state(job_state_bytes)
        state["jobstore"] = self
        job = Job.__new__(Job)
        job.__setstate__(state)
        job._scheduler = self._scheduler
        job._jobstore_alias = self._alias
        return job

    def _get_jobs(self, *conditions: Any) -> list[Job]:
        """As APScheduler's, but a row that cannot be restored is one log line (naming the
        job and why), not a traceback; it is deleted, as APScheduler does."""
        jobs, failed = [], []
        query = select(self.jobs_t.c.id, self.jobs_t.c.job_state).order_by(
            self.jobs_t.c.next_run_time
        )
        query = query.where(and_(*conditions)) if conditions else query
        with self.engine.begin() as connection:
            for row in connection.execute(query):
                try:
                    jobs.append(self._reconstitute_job(row.job_state))
                except Exception as exc:  # any failure: the row is not a job we run
                    log_event(
                        log,
                        "job_refused",
                        level=logging.ERROR,
                        job=row.id,
                        error=one_line(exc),
                        action="deleted; a configured job is added again at the next start",
                    )
                    failed.append(row.id)
            if failed:
                connection.execute(self.jobs_t.delete().where(self.jobs_t.c.id.in_(failed)))
        return jobs
