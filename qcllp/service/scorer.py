"""The station scoring service: ``qcllp serve scorer --station S``.

An APScheduler 3.x interval job (the station's ``scoring_interval_s``, ``max_instances=1``,
``coalesce=True``) runs :func:`qcllp.scoring.step.score_step` -- the same code as ``qcllp
score`` -- and repeats it at once while a backlog is due, in bounded steps, so memory stays
flat when the service was down for hours. The job store is APScheduler's memory store on
purpose: the scorer's state is its checkpoint in the plant database, committed with every
step, so there is nothing for a persistent job store to keep.

Around each step:

* **idle polls** (SQLite): a poll looks first, without the database's one writer lock
  (:mod:`qcllp.scoring.idle_poll`), and steps only when the station has work -- or every
  :data:`FULL_STEP_EVERY_S`, which moves the checkpoint's time -- so four scorers polling
  fast do not take turns at the lock the intake writes under.
* **hot model reload**: the station's active model row is read every step; a new id is loaded
  and verified completely (checksum, station, target, the feature list the station builds
  today) before it replaces the current one, so no step is scored by a half-loaded model. A
  model that cannot be loaded is refused: the service keeps the last good one, records an
  alarm (table ``alarms``, log line, ``qcllp_scorer_alarms_total``) once per refused id.
* **shadow model**: the station's model on a shadow trial is followed the same way
  (:mod:`.scorer_models`) and scored beside the active one, or alone (the line then gets its
  audit samples only: ``/healthz`` says ``degraded``); one that cannot be loaded is an alarm
  (``shadow_refused``) and no shadow, never a failed step. ``/healthz`` names it
  (``shadow_model_id``); ``qcllp_scorer_shadow_model_id``, ``qcllp_scorer_shadow_sticks_total
  {decision}`` and ``qcllp_scorer_audit_samples_total{model=active|shadow}`` count its
  would-be decisions and the audit samples drawn (:mod:`.scorer_metrics`).
* **faults**: a database that is away (or any other error) fails the step; it is logged,
  counted, shown in ``/healthz`` (503) and retried on the next tick -- nothing is lost, as the
  checkpoint only moves with a committed step.
* **observability**: :mod:`qcllp.service.http` serves ``/healthz`` and ``/metrics`` on
  127.0.0.1; one JSON log line per step that did something. The lock-out guard's state
  (:mod:`qcllp.scoring.share_guard`) is read after every step: whether it holds the
  model's lock-outs (gauge ``qcllp_scorer_lockouts_suspended``; ``/healthz`` says
  ``"status": "degraded"`` with the reason) and the CUSUM of the model's over-prediction of
  final QC's counts (``qcllp_scorer_qc_over_prediction``), the lock-outs inspected at the bay
  that this process took in (``qcllp_scorer_inspected_lockouts_total{result=fail|good}``,
  audit samples in ``qcllp_scorer_inspected_audits_total``), the shortfall of their precision
  against break-even (``qcllp_scorer_inspection_shortfall``, :mod:`qcllp.scoring.
  inspection_guard`) and the active model's realized (inspected) saving since its promotion
  (``qcllp_scorer_realized_saving``: read from the database at the first step of a model and
  after each step that took in inspections of it, never on an idle poll); while suspended,
  ``/healthz`` names that saving (once something was inspected) next to the reason. A
  suspension answers 200, not 503, on purpose: the scorer works as designed -- it decides
  every stick and passes the ones the model would lock out -- so a supervisor that restarts
  or routes away from a 503 must not act; what ends a suspension is a new model (the daemon
  queues its retraining). Alerting reads ``status`` or the gauge.
* **alarms in ``/healthz``**: the station's latest alarms from the database (table
  ``alarms``), whoever raised them -- a previous run of this scorer, another instance, the
  daemon -- read once at start and then only the rows added since (``id >`` the last one
  seen: a poll costs in proportion to new alarms, not to history); an alarm the database
  could not take is shown from memory.
* **sink**: the station's flag file is claimed at start (:func:`qcllp.scoring.flag_sink.
  claim_sink`); a file another station owns, or another file than the one the station's
  checkpoint names, is refused with one line and exit code 1 -- the service does not start.
  A database away at start defers the claim to the first tick that reaches it. Every step
  then writes to the sink the checkpoint names.
* **MQTT**: with ``connectors.mqtt`` (and ``publish_flags``), every flag is published to the
  station's flags topic from the flags table as an outbox (:mod:`.mqtt.flag_publisher`); a broker
  away makes ``/healthz`` say ``degraded`` with how many flags wait, and delays nothing else.
* **PLC**: with the station in ``connectors.opcua.stations``, every flag is written to the
  line's PLC over OPC UA from the same outbox, under a cursor of its own
  (:mod:`qcllp.service.opcua.flag_writer`); a PLC away, or one that does not take its
  records, is ``degraded`` the same way.
* **SIGTERM / SIGINT**: the current step finishes and commits, the steps still due (a
  backlog of hundreds after a long stop) are left to the next start, the scheduler shuts
  down, exit code 0 -- within a step's time, well inside systemd's stop timeout.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from qcllp.plant.config import PlantConfig, exposed_host_warning
from qcllp.scoring.flag_sink import SinkError, claim_sink
from qcllp.scoring.idle_poll import idle_step
from qcllp.scoring.inspection_guard import Realized, model_realized
from qcllp.scoring.step import StepResult, record_alarm, score_step
from qcllp.service.flag_channels import flag_channels
from qcllp.service.http import HealthServer
from qcllp.service.logs import log_event, one_line
from qcllp.service.scorer_metrics import ScorerMetrics
from qcllp.service.scorer_models import ShadowSlot, load_verified
from qcllp.service.scorer_state import ALARMS_SHOWN, ScorerState
from qcllp.station.artifacts import ArtifactError
from qcllp.station.registry import LoadedModel, RegistryError, live_model_ids
from qcllp.store import Alarm, Store

__all__ = ["ScorerMetrics", "ScorerService", "ScorerState", "run_scorer"]

log = logging.getLogger("qcllp.scorer")
FULL_STEP_EVERY_S = 5.0  # on SQLite, an idle scorer still steps (moves its checkpoint) this often


class ScorerService:
    """One station's scorer: model handling, steps, metrics and state (no scheduling)."""

    def __init__(
        self,
        store: Store,
        config: PlantConfig,
        station: str,
        *,
        sink: str | Path | None = None,
    ):
        config.station(station)
        self.store, self.config, self.station = store, config, station
        self.sink = sink  # claimed by claim_sink(); steps write to the checkpoint's sink
        self.sink_claimed = sink is None
        self.stopping = threading.Event()  # set on SIGTERM: no step starts after it
        self.exit_code = 0
        self.metrics = ScorerMetrics(station)
        self.state = ScorerState(station, config.scorer.max_lag_s)
        self.model: LoadedModel | None = None
        self.shadow = ShadowSlot(store, config, station, self.alarm)
        self._refused: set[int] = set()
        self._alarms_seen: int | None = None  # the newest alarm id read (None: none read yet)
        self._realized_of: int | None = None  # the model whose realized saving is shown
        self._full_step_at = -float("inf")  # time.monotonic() of the last full step
        self.metrics.model_id.set(0)
        self.metrics.shadow_id.set(0)
        self.channels = flag_channels(store, config, station, self.metrics.registry)

    # -- model ---------------------------------------------------------------------------
    def refresh_models(self) -> None:
        """Follow the registry's active and shadow models of the station (one look at their
        ids, :func:`~qcllp.station.registry.live_model_ids`)."""
        ids = live_model_ids(self.store, self.station)
        self.refresh_model(ids.get("active"))
        self.refresh_shadow(ids.get("shadow"))

    def refresh_model(self, model_id: int | None) -> None:
        """Load the station's active model (id ``model_id``; ``None``: it has none) if it
        changed; refuse (and keep the last good one) if it cannot be loaded or does not build
        the station's features."""
        if model_id is None or (self.model is not None and model_id == self.model.id):
            return
        if model_id in self._refused:
            return
        try:
            loaded = load_verified(self.store, self.config, self.station, model_id)
        except (ArtifactError, RegistryError) as exc:
            self._refused.add(model_id)
            self.alarm("model_refused", f"model {model_id} refused: {exc}")
            return
        previous = None if self.model is None else self.model.id
        self.model = loaded
        self.metrics.model_id.set(loaded.id)
        with self.state.lock:
            self.state.model_id = loaded.id
        _log("model_loaded", station=self.station, model_id=loaded.id, previous=previous)

    def refresh_shadow(self, model_id: int | None) -> None:
        """Follow the station's shadow model (id ``model_id``; :class:`ShadowSlot`: a change
        of id loads it, one that cannot be loaded is an alarm and no shadow)."""
        if not self.shadow.refresh(model_id):
            return
        loaded = self.shadow.model
        self.metrics.shadow_id.set(0 if loaded is None else loaded.id)
        with self.state.lock:
            self.state.shadow_model_id = None if loaded is None else loaded.id
        _log("shadow_model", station=self.station, model_id=self.state.shadow_model_id)

    def alarm(self, kind: str, message: str) -> None:
        """Raise an alarm: stored (``/healthz`` reads it back with the others), counted, logged."""
        self._announce(kind, message)
        try:
            record_alarm(self.store, "scorer", self.station, kind, message)
        except SQLAlchemyError:  # the database is away: shown from memory meanwhile
            log.exception("could not record the alarm in the database")
            with self.state.lock:
                self.state.alarms.append(f"{kind}: {message} (not stored: database away)")

    def _announce(self, kind: str, message: str) -> None:
        """An alarm in the metrics and the log (``/healthz`` shows the stored ones)."""
        self.metrics.alarms.labels(station=self.station, kind=kind).inc()
        _log("alarm", level=logging.ERROR, station=self.station, kind=kind, message=message)

    # -- sink ----------------------------------------------------------------------------
    def claim_sink(self) -> None:
        """Claim the sink the service was given (once); :class:`SinkError` if it is another
        station's or not this station's (the caller refuses to run)."""
        if self.sink_claimed:
            return
        claim = claim_sink(self.store, self.station, self.sink)
        self.sink_claimed = True
        _log("sink_claimed", station=self.station, sink=claim.path, offset=claim.offset)

    def _claimed_or_refused(self) -> bool:
        """Claim a claim deferred at start (the database was away); a refusal stops the
        service with exit code 1, as it would have at start."""
        try:
            self.claim_sink()
        except SinkError as exc:
            _log("refused", level=logging.ERROR, station=self.station, error=str(exc))
            self.exit_code = 1
            self.stopping.set()
            return False
        return True

    def read_alarms(self) -> None:
        """Bring the station's alarms in ``/healthz`` up to date from the database: the
        latest :data:`ALARMS_SHOWN` at the first call, then the rows added since (a range of
        the primary key: the cost follows the new alarms, not the table)."""
        a = Alarm.__table__
        columns = select(a.c.id, a.c.kind, a.c.message)
        with self.store.engine.connect() as conn:
            if self._alarms_seen is None:
                top = conn.execute(select(a.c.id).order_by(a.c.id.desc()).limit(1)).scalar()
                self._alarms_seen = top or 0
                newest = columns.where(a.c.station == self.station, a.c.id <= self._alarms_seen)
                rows = conn.execute(newest.order_by(a.c.id.desc()).limit(ALARMS_SHOWN)).all()
                rows = rows[::-1]
            else:
                added = columns.where(a.c.id > self._alarms_seen, a.c.station == self.station)
                rows = conn.execute(added.order_by(a.c.id)).all()
        if rows:
            self._alarms_seen = max(self._alarms_seen, rows[-1].id)
            with self.state.lock:
                self.state.alarms.extend(f"{r.kind}: {r.message}" for r in rows)

    # -- one tick ------------------------------------------------------------------------
    def tick(self, *, max_steps: int = 1000) -> int:
        """Steps until nothing more is due right now (bounded) or until the service is
        stopping (checked before every step, so SIGTERM waits for one step at most);
        returns sticks decided."""
        decided = 0
        try:
            if not self._claimed_or_refused():
                return 0
            self.refresh_models()
            for _ in range(max_steps):
                if self.stopping.is_set():
                    break
                step = self.step()
                decided += len(step.scores)
                if step.standby or not step.more:
                    break
            self.read_alarms()
            with self.state.lock:
                self.state.last_error = None
            self._publish()
        except Exception as exc:  # noqa: BLE001 - a service keeps polling; the state says why
            self.metrics.errors.inc()
            message = one_line(exc)
            with self.state.lock:
                self.state.last_error = message
            _log("step_failed", level=logging.ERROR, station=self.station, error=message)
            if not isinstance(exc, (SQLAlchemyError, OSError, SinkError)):  # db, disk, sink: no bug
                log.exception("unexpected error in a scoring step")
        return decided

    def _publish(self) -> None:
        """Wake the flag channels (new flags may be committed) and show their state."""
        if not self.channels:
            return
        for channel in self.channels:
            channel.nudge()
        problems = [p for channel in self.channels for p in channel.status().problems()]
        with self.state.lock:
            self.state.publishing = problems

    def step(self) -> StepResult:
        """One step, or on SQLite a look without the writer lock when nothing is to do
        (:func:`_run_step`). What it did is counted and logged first (it is committed); then
        what its state needs from the database is read (the alarms it stored, a realized
        saving), and only then are the gauges and ``/healthz`` changed, so a look in between
        never sees a suspension without its alarm, and a read that fails leaves the counts
        right and the state as it was."""
        started = time.perf_counter()
        result, full = self._run_step()
        self._count(result, time.perf_counter() - started, full)
        if result.alarms or self._alarms_seen is None:
            self.read_alarms()
        self._show(result, self._realized_now(result))
        return result

    def _count(self, result: StepResult, seconds: float, full: bool) -> None:
        """The step's counters (sticks, latencies, alarms, inspections) and its log line."""
        if full:  # an idle look is no step: the histogram keeps the steps' own times
            self.metrics.batch_seconds.observe(seconds)
        self.metrics.count_step(result)
        self.metrics.arrival_to_flag.observe_many(np.maximum(result.latencies_s, 0.0))
        for kind, message in result.alarms:  # stored by the step in its transaction
            self._announce(kind, message)
        self.metrics.inspections.count(result.inspected)
        if len(result.scores) or result.batches_taken:
            _log(
                "step",
                station=self.station,
                model_id=result.model_id,
                batches=result.batches_taken,
                decided=len(result.scores),
                **result.counts,
                flags_written=result.flags_written,
                **_shadow_log(result),
                pending=result.pending,
                lag_s=round(result.lag_s, 3),
                seconds=round(seconds, 4),
            )

    def _show(self, result: StepResult, realized: Realized | None) -> None:
        """The step's state in the gauges and ``/healthz`` (``realized``: the active model's
        realized saving if it changed)."""
        if result.guard is not None:
            self.metrics.suspended.set(result.guard.suspended_at is not None)
            self.metrics.qc_excess.set(result.guard.qc_excess)
            self.metrics.inspections.shortfall.set(result.guard.inspect_excess)
        if realized is not None:
            self.metrics.inspections.realized.set(realized.saving)
        self.metrics.lag.set(result.lag_s)
        self.metrics.pending.set(result.pending)
        with self.state.lock:
            self.state.lag_s, self.state.pending = result.lag_s, result.pending
            self.state.standby = result.standby
            if result.guard is not None:
                self.state.lockouts_suspended = result.guard.reason
            if realized is not None:
                self.state.realized = realized
            self.state.last_step_at = datetime.now(UTC)

    def _run_step(self) -> tuple[StepResult, bool]:
        """On SQLite, a poll first looks without the writer lock (:func:`idle_step`) and
        runs the step only when the station has work, or when the last full step is
        :data:`FULL_STEP_EVERY_S` old (it moves the checkpoint's time, which ``qcllp status``
        shows as the scorer's last step). On PostgreSQL every poll is a step: it takes only
        the station's advisory lock, and is how a second scorer learns it is the standby.
        Returns the result and whether it was a full step."""
        now = datetime.now(UTC)
        recent = time.monotonic() - self._full_step_at < FULL_STEP_EVERY_S
        shadow = self.shadow.model
        if self.store.dialect == "sqlite" and recent:
            idle = idle_step(self.store, self.station, self.model, now, shadow=shadow)
            if idle is not None:
                return idle, False
        result = score_step(self.store, self.config, self.station, self.model, shadow=shadow)
        self._full_step_at = time.monotonic()
        return result, True

    def _realized_now(self, result: StepResult) -> Realized | None:
        """The active model's realized (inspected) saving, read again when the step's
        inspections changed it (or the model changed); ``None`` when it did not change, as on
        an idle poll."""
        if result.model_id is None or (
            result.model_id == self._realized_of and not result.inspected.any
        ):
            return None
        realized = model_realized(self.store, self.config.station(self.station), result.model_id)
        self._realized_of = result.model_id
        return realized


def run_scorer(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    sink: str | Path | None = None,
    port: int | None = None,
    interval_s: float | None = None,
) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit code (0; 1 when its sink was
    claimed by another scorer while it ran). :class:`SinkError` before anything starts when
    the sink is another station's or not this station's (the CLI prints it, exit 1)."""
    service = ScorerService(store, config, station, sink=sink)
    try:
        service.claim_sink()
    except SQLAlchemyError as exc:  # the database is away: the first tick that reaches it claims
        _log("sink_claim_deferred", level=logging.ERROR, station=station, error=one_line(exc))
    interval = interval_s or config.station(station).scoring_interval_s
    port = config.scorer.base_port + config.station_index(station) if port is None else port
    for signum in (signal.SIGTERM, signal.SIGINT):  # before anything else starts
        signal.signal(signum, lambda *_: service.stopping.set())
    http = HealthServer(config.scorer.host, port, service.state, service.metrics.registry)
    http.start()
    for channel in service.channels:
        channel.start()
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        service.tick,
        "interval",
        seconds=interval,
        max_instances=1,
        coalesce=True,
        next_run_time=datetime.now(UTC),
        id=f"score-{station}",
    )
    scheduler.start()
    _log(
        "started",
        station=station,
        interval_s=interval,
        http=f"http://{config.scorer.host}:{http.port}",
        database=store.display_url,
        sink=str(sink) if sink else None,
    )
    exposed = exposed_host_warning("scorer.host", config.scorer.host)
    if exposed:
        _log("exposed", level=logging.WARNING, station=station, warning=exposed)
    service.stopping.wait()
    _log("stopping", station=station)
    scheduler.shutdown(wait=True)  # the running step finishes and commits; no other starts
    for channel in service.channels:
        channel.stop()  # what the broker or the PLC has not acknowledged goes at the next start
    http.stop()
    _log("stopped", station=station)
    return service.exit_code


def _log(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    log_event(log, event, level=level, **fields)


def _shadow_log(result: StepResult) -> dict[str, Any]:
    """A step's log fields of the shadow model (none without one)."""
    if result.shadow_id is None:
        return {}
    return {
        "shadow_model_id": result.shadow_id,
        "shadow": result.shadow_counts,
        "shadow_written": result.shadow_written,
        "shadow_audits": result.shadow_audits,
    }
