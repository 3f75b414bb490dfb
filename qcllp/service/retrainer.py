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
  :mod:`qcllp.retraining.promotion`), on a shadow trial first when ``retrainer.shadow_trials``
  asks for one; every decision is an event row.
* **shadow** (``retrainer.shadow_check_interval_s``): every station's shadow trial judged on
  its inspected would-be lock-outs, confirmed (promoted active) or rejected (retired)
  (:mod:`.retrainer_shadow`, :mod:`qcllp.retraining.shadow_trial`).

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

Here are the service's jobs and the daemon's life (lease, scheduler, signals); the ingest job
and its watches are in :mod:`.retrainer_ingest`, the scheduler's jobs and triggers in
:mod:`.retrainer_schedule`, the metrics and the ``/healthz`` state in :mod:`.retrainer_health`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.exc import SQLAlchemyError

from qcllp.ingest.batches import FileMemo
from qcllp.plant.config import PlantConfig, exposed_host_warning
from qcllp.retraining.retrain import (
    Abandoned,
    decide_undecided,
    recover,
    retrain_station,
    unanswered_want,
)
from qcllp.service.http import HealthServer
from qcllp.service.logs import log_event, one_line
from qcllp.service.retrainer_health import RetrainerMetrics, RetrainerState
from qcllp.service.retrainer_ingest import IngestJob

# the scheduler's parts under the names they had here (tests drive them as retrainer._...)
from qcllp.service.retrainer_schedule import RetrainQueue as _RetrainQueue
from qcllp.service.retrainer_schedule import job_triggers as _job_triggers
from qcllp.service.retrainer_schedule import new_scheduler as _scheduler
from qcllp.service.retrainer_schedule import reconcile_jobs as _reconcile_jobs
from qcllp.service.retrainer_schedule import shutdown as _shutdown
from qcllp.service.retrainer_shadow import ShadowJob
from qcllp.store import Store
from qcllp.store.events import record_event
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


class RetrainerService(IngestJob, ShadowJob):
    """The daemon's jobs, their retries, metrics and state (no scheduling, no signals); the
    ingest job and its watches are :class:`.retrainer_ingest.IngestJob`'s, the shadow-trial
    job :class:`.retrainer_shadow.ShadowJob`'s."""

    def __init__(self, store: Store, config: PlantConfig, *, holder: str | None = None):
        self.store, self.config = store, config
        self.holder = holder or holder_id()
        self.metrics = RetrainerMetrics()
        self.state = RetrainerState(self.holder)
        self.stopping = threading.Event()
        self.reference_cache: dict[int, Any] = {}
        self.queue_retrain: Callable[[str], bool] = lambda station: False
        self.stations = list(config.retrainer.stations or config.station_names)
        self.metrics.start_at_zero(self.stations, _job_triggers(config))
        self.files = FileMemo()
        self.failing: dict[str, str] = {}  # input -> why its last ingestion failed

    # -- jobs ----------------------------------------------------------------------------
    def run(self, name: str, *args: Any) -> None:
        """Run job ``name`` with retries on database errors; never raises."""
        jobs = {
            "ingest": self.ingest,
            "retrain": self.retrain,
            "retention": self.retention,
            "shadow": self.shadow,
        }
        started = time.perf_counter()
        with self.state.lock:
            self.state.running = name
        outcome = "ok"
        try:
            summary = self._with_retries(name, lambda: jobs[name](*args))
            busy = summary.get("batches", 1) or summary.get("inputs_failed")
            if busy and not summary.get("quiet"):  # idle polls: quiet
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
        """Record a job's event; with the database away, the log line remains."""
        try:
            record_event(self.store, "job", outcome, reason, detail={"job": job, **(detail or {})})
        except SQLAlchemyError:  # the database is away: the log line remains
            log.warning("could not record the %s event", job)


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
