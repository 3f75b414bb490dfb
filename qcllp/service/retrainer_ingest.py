"""The retraining daemon's ingest job: the connectors polled, then the watches new data calls for.

The connectors are readings, defect counts and inspections (``connectors.inspections``, SQL
sources of ``kind: inspections``); the job's event counts the inspections stored and the audit
samples among them. After new defect counts the drift watch of every active model with both
signals, after new readings only the feature signal (:mod:`qcllp.retraining.drift`); a
count-drift alarm queues a retraining of the station, and so does a scorer's suspension of the
active model's lock-outs (:mod:`qcllp.scoring.share_guard`), once per suspension. An input
that keeps failing is logged when it starts failing, when its reason changes and when it
recovers.

:class:`IngestJob` is the part of :class:`qcllp.service.retrainer.RetrainerService` that does
this; it uses the service's store, config, stations, metrics, retrain queue and events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from qcllp.ingest.batches import FileMemo
from qcllp.ingest.connectors import ingest_from_config
from qcllp.plant.config import PlantConfig
from qcllp.retraining.drift import watch_station
from qcllp.scoring.share_guard import suspended_models
from qcllp.service.logs import log_event
from qcllp.service.retrainer_health import RetrainerMetrics
from qcllp.station.artifacts import ArtifactError
from qcllp.station.registry import RegistryError, active_model, load_model
from qcllp.store import Store, stored_utc
from qcllp.store.events import events, record_event

__all__ = ["IngestJob"]

log = logging.getLogger("qcllp.retrainer")


class IngestJob:
    """The ingest job and its watches (a part of the daemon's service, module docstring)."""

    store: Store
    config: PlantConfig
    stations: list[str]
    metrics: RetrainerMetrics
    files: FileMemo
    failing: dict[str, str]
    reference_cache: dict[int, Any]
    queue_retrain: Callable[[str], bool]
    _event: Callable[..., None]

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
        inspected = [r for r in reports.values() if r.kind == "inspections"]
        if any(r.stored for r in inspected):
            summary["inspections"] = sum(r.stored for r in inspected)
            summary["audit_samples"] = sum(r.audit_samples for r in inspected)
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
        queued job is stored (:class:`.retrainer_schedule.RetrainQueue`)."""
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


def _log(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    log_event(log, event, level=level, **fields)
