"""The retraining daemon: ``qcllp serve retrainer``.

It keeps the station models current without an engineer at the keyboard:

* **ingest** (``schedules.ingest_interval_s`` or ``ingest_cron``): every configured connector
  (:func:`qcllp.ingest.connectors.ingest_from_config`); after new defect counts, the drift
  watch of every active model with both signals, after new readings only the feature signal
  (:mod:`qcllp.retraining.drift`). A count-drift alarm queues a retraining of that station,
  and so does a station scorer's suspension of the active model's lock-outs (the lock-out
  guard, :mod:`qcllp.scoring.share_guard`; checked at every ingest poll, once per
  suspended model).
* **retention** (``retention.cron``, when ``retention.readings_days`` is set): the months of
  readings past it are archived and dropped (:mod:`qcllp.store.retention`).
* **retrain** (``schedules.retrain_cron``, or ``retrain_interval_s``): every station (or
  ``retrainer.stations``) in line order: a candidate trained up to the holdout window, the
  champion / challenger gate, promotion only of a better model (:mod:`qcllp.retraining.retrain`,
  :mod:`qcllp.retraining.promotion`); every decision is an event row.

**Scheduling** is APScheduler 3.x with its ``SQLAlchemyJobStore`` in the plant database (table
``retrainer_jobs``, created by the migrations; its pickled rows are read with a restricted
unpickler, :mod:`.jobstore`): the next run times survive a restart, and with
``coalesce`` and ``misfire_grace_time`` a daemon that was down runs each missed job once when
it is back, not once per missed time. At start the stored jobs are kept when their trigger is
unchanged (a re-added job would lose its missed run) and replaced when the config changed it.
A retraining queued by a drift alarm or a suspension is a one-off job (``queued-retrain-<station>``)
in the same job store: a daemon killed or stopped before the job was handed to a worker runs it
when it is back. APScheduler removes a one-off job from its store as it hands it to a worker,
where it may still wait behind a running training. So the want is also an event
(``drift_retrain``, written with the drift alarm; ``guard_retrain``, once the suspension's job
is stored), and at start the daemon queues every station whose newest such event no retraining
has answered -- one that took the station's lease after it was written
(:meth:`RetrainerService.requeue_unanswered`): a daemon killed after the hand-over, or stopped
before it could queue an alarm, retrains the station when it is back.
(:func:`qcllp.retraining.retrain.recover` decides what a killed training left.)

**One daemon per plant**: the daemon works only while it holds the ``retrainer`` lease
(:mod:`qcllp.store.leases`); a second one started by mistake waits as a standby
(``/healthz`` says so) and takes over within a lease time to live when the first one dies.
Station trainings take the station's own lease too, so a manual ``qcllp train`` of the same
station never runs at the same time. A daemon that loses its lease (it could not renew it in
time, and another took it) stops its scheduler and exits with code 3; systemd starts it again
as a standby.

**Faults**: a database that is away fails the attempt; it is retried with exponential backoff
(1, 2, 4 ... 60 s) while the daemon runs, and ``/healthz`` answers 503 meanwhile. SIGTERM or
SIGINT: no new job starts, a running training is abandoned at its next phase boundary before
anything is registered (or finishes registering), the scheduler shuts down, exit code 0. At
start, :func:`qcllp.retraining.retrain.recover` decides candidates a killed daemon left
undecided and removes artifact files no model row points at.

**Observability**: one JSON log line per job and decision (an input that keeps failing --
a drop folder not mounted -- is logged and recorded when it starts failing, when its reason
changes and when it recovers, not at every poll; ``qcllp_retrainer_inputs_failing`` counts
them meanwhile); ``/healthz`` and ``/metrics``
(prometheus_client) on ``retrainer.host:retrainer.port``; ``qcllp status`` reads the job
table, the lease and the events from the database, whether or not the daemon runs.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy.exc import SQLAlchemyError

from qcllp.ingest.batches import FileMemo
from qcllp.ingest.connectors import ingest_from_config
from qcllp.plant.config import PlantConfig, exposed_host_warning
from qcllp.retraining.drift import watch_station
from qcllp.retraining.retrain import (
    Abandoned,
    decide_undecided,
    recover,
    retrain_station,
    unanswered_want,
)
from qcllp.scoring.share_guard import suspended_models
from qcllp.service.http import HealthServer
from qcllp.service.jobstore import SafeJobStore
from qcllp.service.logs import log_event, one_line
from qcllp.station.artifacts import ArtifactError
from qcllp.station.registry import RegistryError, active_model, load_model
from qcllp.store import RETRAINER_JOBS, Store, stored_utc
from qcllp.store.events import QUEUED_PREFIX, events, record_event
from qcllp.store.leases import (
    RETRAINER_LEASE,
    HeldLease,
    acquire,
    holder_id,
    lease_holder,
)
from qcllp.store.retention import apply_retention

__all__ = ["LEASE", "RetrainerService", "RetrainerState", "run_retrainer", "run_job"]

log = logging.getLogger("qcllp.retrainer")

LEASE = RETRAINER_LEASE
EXIT_LEASE_LOST = 3
EXIT_DATABASE = 1  # the database stayed away at start: systemd starts the daemon again
_BACKOFF_S = (1, 2, 4, 8, 15, 30, 60)
_SERVICE: RetrainerService | None = None  # the jobs in the persistent store refer to it
T = TypeVar("T")


def run_job(name: str, *args: Any) -> None:
    """Entry point of every scheduled job (a module-level function, so the persistent job
    store can keep a reference to it)."""
    if _SERVICE is None:  # pragma: no cover - the scheduler only runs inside run_retrainer
        raise RuntimeError("the retraining daemon is not running in this process")
    _SERVICE.run(name, *args)


class RetrainerMetrics:
    """Prometheus metrics of the daemon, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Counter(
            "qcllp_retrainer_jobs",
            "Job runs by job and outcome (ok, failed, abandoned).",
            ["job", "outcome"],
            registry=self.registry,
        )
        self.job_seconds = Histogram(
            "qcllp_retrainer_job_seconds",
            "Duration of a job run.",
            ["job"],
            registry=self.registry,
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600),
        )
        self.retrains = Counter(
            "qcllp_retrainer_station_retrains",
            "Station retrainings by outcome (promoted, kept, skipped, failed).",
            ["station", "outcome"],
            registry=self.registry,
        )
        self.drift_alarms = Counter(
            "qcllp_retrainer_count_drift_alarms",
            "Count-drift alarms raised (each queues a retraining of the station).",
            ["station"],
            registry=self.registry,
        )
        self.guard_retrains = Counter(
            "qcllp_retrainer_guard_retrains",
            "Retrainings queued because a scorer suspended the active model's lock-outs.",
            ["station"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "qcllp_retrainer_leader",
            "1 while this daemon holds the plant's retrainer lease, 0 as a standby.",
            registry=self.registry,
        )
        self.last_success = Gauge(
            "qcllp_retrainer_last_success_timestamp_seconds",
            "When a job last ran without error (Unix time).",
            ["job"],
            registry=self.registry,
        )
        self.inputs_failing = Gauge(
            "qcllp_retrainer_inputs_failing",
            "Inputs (files, folders, SQL sources) whose last ingestion attempt failed.",
            registry=self.registry,
        )


@dataclass
class RetrainerState:
    """What ``/healthz`` reports; written by the job threads, read by the HTTP thread."""

    holder: str
    standby: bool = True
    running: str | None = None
    last_error: str | None = None
    last_runs: dict[str, str] = field(default_factory=dict)
    lease: HeldLease | None = None  # while leading: its renewal failures make it unhealthy
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def health(self) -> tuple[int, dict[str, Any]]:
        """HTTP status and body: 503 while the last attempt failed or the lease cannot be
        renewed (the database away: the daemon would lose its lease after its time to live
        and can do no job meanwhile), until a renewal succeeds; else 200."""
        with self.lock:
            problems = [f"last attempt failed: {self.last_error}"] if self.last_error else []
            failing = self.lease.failing if self.lease is not None else None
            if failing is not None:
                reason, since = failing
                problems.append(
                    f"lease renewal failed: {reason}, since {since:%Y-%m-%d %H:%M:%S} UTC"
                )
            body = {
                "service": "retrainer",
                "status": "ok" if not problems else "unhealthy",
                "problems": problems,
                "holder": self.holder,
                "standby": self.standby,
                "running": self.running,
                "last_runs": dict(self.last_runs),
            }
        return (200 if not problems else 503), body


class RetrainerService:
    """The daemon's jobs, their retries, metrics and state (no scheduling, no signals)."""

    def __init__(self, store: Store, config: PlantConfig, *, holder: str | None = None):
        self.store, self.config = store, config
        self.holder = holder or holder_id()
        self.metrics = RetrainerMetrics()
        self.state = RetrainerState(self.holder)
        self.stopping = threading.Event()
        self.reference_cache: dict[int, Any] = {}
        self.queue_retrain: Callable[[str], bool] = lambda station: False
        self.stations = list(config.retrainer.stations or config.station_names)
        self.files = FileMemo()
        self.failing: dict[str, str] = {}  # input -> why its last ingestion failed

    # -- jobs ----------------------------------------------------------------------------
    def run(self, name: str, *args: Any) -> None:
        """Run job ``name`` with retries on database errors; never raises."""
        jobs = {"ingest": self.ingest, "retrain": self.retrain, "retention": self.retention}
        started = time.perf_counter()
        with self.state.lock:
            self.state.running = name
        outcome = "ok"
        try:
            summary = self._with_retries(name, lambda: jobs[name](*args))
            if summary.get("batches", 1) or summary.get("inputs_failed"):  # idle polls: quiet
                seconds = round(time.perf_counter() - started, 2)
                _log("job_done", job=name, seconds=seconds, **summary)
            self.metrics.last_success.labels(job=name).set(time.time())
            with self.state.lock:
                self.state.last_error = None
        except Abandoned as exc:
            outcome = "abandoned"
            _log("job_abandoned", level=logging.WARNING, job=name, reason=str(exc))
            self._event(name, "abandoned", str(exc))
        except Exception as exc:  # noqa: BLE001 - a daemon keeps running; the state says why
            outcome = "failed"
            message = one_line(exc)
            with self.state.lock:
                self.state.last_error = f"{name}: {message}"
            _log("job_failed", level=logging.ERROR, job=name, error=message)
            if not isinstance(exc, SQLAlchemyError):
                log.exception("unexpected error in job %s", name)
            self._event(name, "failed", message)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.jobs.labels(job=name, outcome=outcome).inc()
            self.metrics.job_seconds.labels(job=name).observe(seconds)
            with self.state.lock:
                self.state.running = None
                self.state.last_runs[name] = f"{datetime.now(UTC).isoformat()} {outcome}"

    def _with_retries(self, name: str, work: Callable[[], T]) -> T:
        """``work()``, again after a database error, with backoff, until it succeeds or the
        daemon stops (then the last error is raised). The error it reported in ``/healthz``
        goes when it succeeds (a start-up step has no job run to clear it)."""
        for attempt in range(len(_BACKOFF_S) + 1):
            try:
                result = work()
            except SQLAlchemyError as exc:
                if attempt == len(_BACKOFF_S) or self.stopping.is_set():
                    raise
                wait = _BACKOFF_S[attempt]
                with self.state.lock:
                    self.state.last_error = f"{name}: {one_line(exc)}"
                _log(
                    "retry",
                    level=logging.WARNING,
                    job=name,
                    attempt=attempt + 1,
                    wait_s=wait,
                    error=one_line(exc),
                )
                if self.stopping.wait(wait):
                    raise
                continue
            with self.state.lock:
                if (self.state.last_error or "").startswith(f"{name}: "):
                    self.state.last_error = None
            return result
        raise AssertionError("unreachable")

    def ingest(self) -> dict[str, Any]:
        """Ingest from the connectors (drop files: only new or changed ones, :class:`FileMemo`);
        watch drift where new data arrived."""
        reports = ingest_from_config(self.store, self.config, memo=self.files)
        counted = [r for r in reports.values() if r.kind == "defect_counts"]
        measured = [r for r in reports.values() if r.kind == "measurements"]
        new_counts = any(r.files_ingested or r.batches for r in counted)
        new_readings = any(r.stored for r in measured)
        failed = {f: why for r in reports.values() for f, why in r.files_failed.items()}
        news = self._note_failures(failed)
        summary = {
            "stored": sum(r.stored for r in reports.values()),
            "quarantined": sum(r.quarantined_total for r in reports.values()),
            "batches": sum(len(r.batches) for r in reports.values()),
            "inputs_failed": len(news),
        }
        if summary["batches"] or news:
            line = (
                f"ingested {summary['batches']} batches: {summary['stored']} rows stored, "
                f"{summary['quarantined']} quarantined; {len(news)} inputs failed"
            )
            self._event("ingest", "failed" if news else "ok", line, {**summary, "failed": news})
        if new_counts or new_readings:
            summary["drift_checked"] = self.watch(counts=new_counts)
        guarded = self.watch_guards()
        if guarded:
            summary["guard_retrains"] = guarded
        return summary

    def watch_guards(self) -> list[str]:
        """Queue a retraining of every station whose active model's lock-outs a scorer
        suspended (the plant has changed since training; a new model is the way back), once
        per suspension: the event ``guard_retrain`` remembers it across restarts, and the
        queued job is stored (:class:`_RetrainQueue`)."""
        queued = []
        for s in suspended_models(self.store):
            if s.station not in self.stations:
                continue
            since = stored_utc(s.suspended_at).isoformat()
            done = events(self.store, ["guard_retrain"], station=s.station, limit=1)
            if done and (done[0]["model_id"], done[0]["detail"].get("suspended_at")) == (
                s.model_id,
                since,
            ):
                continue
            # queued first: should the event not be written, the retry queues it again (one
            # job per station); should the daemon be stopping, nothing is recorded and its
            # next start finds the suspension unanswered
            if not self.queue_retrain(s.station):
                continue
            record_event(
                self.store,
                "guard_retrain",
                "queued",
                f"retraining queued: {s.reason}",
                station=s.station,
                model_id=s.model_id,
                detail={"suspended_at": since},
            )
            self.metrics.guard_retrains.labels(station=s.station).inc()
            _log("guard_retrain", level=logging.WARNING, station=s.station, model_id=s.model_id)
            queued.append(s.station)
        return queued

    def _note_failures(self, failed: dict[str, str]) -> dict[str, str]:
        """Log an input's failure when it starts or its reason changes, and its recovery; not
        at every poll: a drop folder that is missing for a weekend is one error line and one
        event, not one per minute (``qcllp_retrainer_inputs_failing`` says it persists).
        Returns the failures that are new."""
        news = {f: why for f, why in failed.items() if self.failing.get(f) != why}
        for source, why in news.items():
            _log("ingest_failed", level=logging.ERROR, source=source, error=why)
        for source in self.failing.keys() - failed.keys():
            _log("ingest_recovered", source=source)
        self.failing = dict(failed)
        self.metrics.inputs_failing.set(len(failed))
        return news

    def watch(self, *, counts: bool) -> int:
        """Drift watch of every active model; queues a retraining on a new count alarm."""
        checked = 0
        for station in self.stations:
            record = active_model(self.store, station)
            if record is None:
                continue
            try:
                loaded = load_model(self.store, record["id"])
            except (ArtifactError, RegistryError) as exc:
                _log("drift_skipped", level=logging.WARNING, station=station, error=str(exc))
                continue
            crossed = watch_station(
                self.store,
                self.config,
                station,
                loaded,
                counts=counts,
                reference_cache=self.reference_cache,
            )
            checked += 1
            if crossed:
                self.metrics.drift_alarms.labels(station=station).inc()
                _log("count_drift", level=logging.WARNING, station=station, model_id=loaded.id)
                self.queue_retrain(station)  # refused while stopping: the next start queues
        return checked

    def requeue_unanswered(self) -> list[str]:
        """At start: queue a retraining of every station whose newest queued retraining no
        retraining has answered (:func:`qcllp.retraining.retrain.unanswered_want`). Covers what
        the stored one-off job cannot: a job handed to a worker when the daemon was killed, a
        count-drift alarm the stopping daemon could no longer queue, and a queued job that
        found the station being trained (the running training predates the alarm)."""
        queued = []
        for station in self.stations:
            wanted = unanswered_want(self.store, station)
            if wanted is not None and self.queue_retrain(station):
                _log("retrain_requeued", station=station, wanted=wanted["reason"])
                queued.append(station)
        return queued

    def retrain(self, stations: list[str] | None = None, force: bool = False) -> dict[str, Any]:
        """Retrain the stations in line order; each decision is an event row."""
        # a decision a crash or a database outage interrupted (its lease has expired by now)
        for line in decide_undecided(self.store, self.config):
            _log("recovered", action=line)
        outcomes: dict[str, str] = {}
        for station in stations or self.stations:
            if self.stopping.is_set():
                raise Abandoned("the daemon is stopping: stations left untrained")
            result = retrain_station(
                self.store,
                self.config,
                station,
                force=force,
                holder=None,
                progress=lambda message, s=station: _log("progress", station=s, step=message),
                should_stop=self.stopping.is_set,
            )
            outcomes[station] = result.outcome
            self.metrics.retrains.labels(station=station, outcome=result.outcome).inc()
            _log(
                "retrain",
                station=station,
                outcome=result.outcome,
                model_id=result.model_id,
                reason=result.reason,
            )
        line = ", ".join(f"{station} {outcome}" for station, outcome in outcomes.items())
        self._event("retrain", "ok", f"retrained: {line}", {"stations": outcomes, "forced": force})
        return {"stations": outcomes, "forced": force}

    def retention(self) -> dict[str, Any]:
        """Archive and drop the months of readings past ``retention.readings_days``."""
        report = apply_retention(self.store, self.config)
        if report.dropped or report.waiting:
            self._event("retention", "ok", report.summary(), report.as_dict())
        return {"dropped": report.dropped, "waiting": report.waiting}

    def _event(self, job: str, outcome: str, reason: str, detail: dict | None = None) -> None:
        try:
            record_event(self.store, "job", outcome, reason, detail={"job": job, **(detail or {})})
        except SQLAlchemyError:  # the database is away: the log line remains
            log.warning("could not record the %s event", job)


# ------------------------------------------------------------------------------ scheduling
def _triggers(config: PlantConfig) -> dict[str, Any]:
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
    triggers = {"ingest": ingest, "retrain": retrain}
    if config.retention.readings_days is not None:
        triggers["retention"] = CronTrigger.from_crontab(config.retention.cron, timezone=tz)
    return triggers


def _reconcile_jobs(scheduler: BackgroundScheduler, config: PlantConfig) -> None:
    """Add the jobs; keep a stored job whose trigger is unchanged (its next run time, maybe a
    missed one, must survive the restart), replace one the config changed."""
    grace = max(1, int(config.retrainer.misfire_grace_s))  # APScheduler wants whole seconds
    triggers = _triggers(config)
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
            run_job,
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


class _RetrainQueue:
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
                run_job,
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


def _shutdown(scheduler: BackgroundScheduler, *, wait: bool = True) -> None:
    """Stop the scheduler with its stored jobs left exactly as they are.

    APScheduler 3's loop makes one more pass after ``shutdown()``: a job due at that instant is
    taken as started (submitted to the stopped executor, which refuses it), then a recurring
    one is moved to its next time (a run lost, where the next start would have run it as
    missed) and a one-off one ends the loop's thread with an error. Paused first (no new job
    starts) and with the store detached, that pass finds nothing."""
    scheduler.pause()
    scheduler.remove_jobstore("default", shutdown=False)
    scheduler.shutdown(wait=wait)


def _scheduler(store: Store, config: PlantConfig) -> BackgroundScheduler:
    return BackgroundScheduler(
        jobstores={
            # the stored jobs are pickles: read them with a restricted unpickler
            "default": SafeJobStore(engine=store.engine, tablename=RETRAINER_JOBS.name),
        },
        # ingest and a long retraining may run side by side; each job has max_instances=1
        executors={"default": ThreadPoolExecutor(max_workers=2)},
        timezone=config.timezone,
    )


def run_retrainer(store: Store, config: PlantConfig, *, port: int | None = None) -> int:
    """Run the daemon until SIGTERM/SIGINT; returns the exit code (0, or 3: lease lost)."""
    global _SERVICE
    service = RetrainerService(store, config)
    _SERVICE = service
    stop = threading.Event()

    def on_signal(*_: Any) -> None:
        stop.set()
        service.stopping.set()  # also ends a retry's backoff wait at start (recover, schedule)

    for signum in (signal.SIGTERM, signal.SIGINT):  # before anything else starts
        signal.signal(signum, on_signal)
    settings = config.retrainer
    http = HealthServer(
        settings.host,
        settings.port if port is None else port,
        service.state,
        service.metrics.registry,
    )
    http.start()
    _log(
        "started",
        holder=service.holder,
        http=f"http://{settings.host}:{http.port}",
        database=store.display_url,
        stations=service.stations,
    )
    exposed = exposed_host_warning("retrainer.host", settings.host)
    if exposed:
        _log("exposed", level=logging.WARNING, warning=exposed)
    code = 0
    try:
        if _wait_for_lease(service, stop):
            code = _lead(service, stop)
    except SQLAlchemyError as exc:  # the database stayed away through every retry at start
        code = 0 if stop.is_set() else EXIT_DATABASE
        _log("database_unreachable", level=logging.ERROR, error=one_line(exc), exit_code=code)
    service.stopping.set()
    http.stop()
    _log("stopped", holder=service.holder, exit_code=code)
    _SERVICE = None
    return code


def _wait_for_lease(service: RetrainerService, stop: threading.Event) -> bool:
    """Standby until this daemon holds the plant's lease (``True``) or is stopped."""
    ttl = service.config.retrainer.lease_ttl_s
    said = None
    attempt = 0
    while not stop.is_set():
        try:
            if acquire(service.store, LEASE, service.holder, ttl):
                return True
            held = lease_holder(service.store, LEASE)
            if said != (held and held[0]):
                said = held and held[0]
                _log("standby", holder=service.holder, leader=said)
            with service.state.lock:
                service.state.last_error = None
            wait = ttl / 3
            attempt = 0
        except SQLAlchemyError as exc:
            wait = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
            attempt += 1
            with service.state.lock:
                service.state.last_error = f"database: {one_line(exc)}"
            _log("database_unreachable", level=logging.ERROR, error=one_line(exc), wait_s=wait)
        stop.wait(wait)
    return False


def _lead(service: RetrainerService, stop: threading.Event) -> int:
    """Hold the lease and run the scheduler until stopped or the lease is lost."""
    store, config = service.store, service.config
    lease = HeldLease(store, LEASE, service.holder, config.retrainer.lease_ttl_s)
    with lease:
        service.metrics.leader.set(1)
        with service.state.lock:
            service.state.standby, service.state.lease = False, lease
        _log("leading", holder=service.holder)
        for line in service._with_retries("recover", lambda: recover(store, config)):
            _log("recovered", action=line)
        scheduler = _scheduler(store, config)
        scheduler.start(paused=True)
        queue = _RetrainQueue(scheduler)
        service.queue_retrain = queue.put
        try:
            return _run_scheduler(service, scheduler, lease, stop)
        finally:
            service.stopping.set()
            queue.close()
            if scheduler.running:  # a running job finishes or abandons at a phase boundary
                _shutdown(scheduler)
            service.metrics.leader.set(0)
            with service.state.lock:
                service.state.lease = None


def _run_scheduler(
    service: RetrainerService,
    scheduler: BackgroundScheduler,
    lease: HeldLease,
    stop: threading.Event,
) -> int:
    """Schedule the jobs, let them run until stopped or the lease is lost; the exit code."""
    config = service.config
    service._with_retries("schedule", lambda: _reconcile_jobs(scheduler, config))
    service._with_retries("requeue", service.requeue_unanswered)
    scheduler.resume()
    while not stop.wait(1.0):
        if lease.lost:
            break
    code = EXIT_LEASE_LOST if lease.lost and not stop.is_set() else 0
    if code:
        _log("lease_lost", level=logging.ERROR, holder=service.holder)
    _log("stopping", holder=service.holder)
    return code


def _log(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    log_event(log, event, level=level, **fields)
