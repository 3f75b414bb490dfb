"""The station scorer's Prometheus metrics (:mod:`qcllp.service.scorer`): the sticks decided
and how long they take, the backlog, the lock-out guard, the inspections taken in
(:mod:`.scorer_inspections`), and the shadow model on trial with the audit samples drawn
(:mod:`qcllp.scoring.audits`). prometheus_client keeps them, in a registry of the service's
own, with the process's and the build's (:mod:`.build_metrics`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from qcllp.scoring.audits import AUDIT
from qcllp.scoring.step import DECISIONS, StepResult
from qcllp.service.build_metrics import register_process_and_build
from qcllp.service.scorer_inspections import InspectionMetrics

__all__ = ["ScorerMetrics"]


class ScorerMetrics:
    """The service's Prometheus metrics, in a registry of its own (prometheus_client: the
    text format, histograms and thread safety are the library's, not ours)."""

    def __init__(self, station: str):
        self.registry = CollectorRegistry()
        self.station = station
        # registered in this order: /metrics lists them so
        self._decision_metrics(station)
        self._backlog_metrics(station)
        self._guard_metrics(station)
        self._shadow_metrics(station)
        register_process_and_build(self.registry)

    def _decision_metrics(self, station: str) -> None:
        """The sticks decided, and how long a step and a stick's way to its flag take."""
        labels = {"station": station}
        self.decisions = Counter(
            "qcllp_scorer_sticks",
            "Sticks decided, by the decision the line got (lock_out, pass, inspect: an audit "
            "sample, unscorable).",
            ["station", "decision"],
            registry=self.registry,
        )
        for decision in DECISIONS:  # at 0 from the start: increase() misses a series' first
            self.decisions.labels(station=station, decision=decision)  # sample (lock-out rate)
        self.batch_seconds = Histogram(
            "qcllp_scorer_step_seconds",
            "Duration of one scoring step (one transaction).",
            ["station"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        ).labels(**labels)
        self.arrival_to_flag = Histogram(
            "qcllp_scorer_arrival_to_flag_seconds",
            "From the commit of the reading that completed a stick to its flag.",
            ["station"],
            registry=self.registry,
            buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
        ).labels(**labels)

    def _backlog_metrics(self, station: str) -> None:
        """The model in use, the work waiting and the steps that failed."""
        labels = {"station": station}
        self.model_id = Gauge(
            "qcllp_scorer_active_model_id",
            "Id of the model the scorer uses (0: none loaded).",
            ["station"],
            registry=self.registry,
        ).labels(**labels)
        self.lag = Gauge(
            "qcllp_scorer_lag_seconds",
            "Age of the oldest work waiting: a batch not taken in or a due stick.",
            ["station"],
            registry=self.registry,
        ).labels(**labels)
        self.pending = Gauge(
            "qcllp_scorer_pending_sticks",
            "Sticks seen at the station and not flagged yet.",
            ["station"],
            registry=self.registry,
        ).labels(**labels)
        for unknown in (self.lag, self.pending):  # not counted before the first step: not 0
            unknown.set(float("nan"))
        self.errors = Counter(
            "qcllp_scorer_step_errors",
            "Steps that failed (database away, ...); retried on the next tick.",
            ["station"],
            registry=self.registry,
        ).labels(**labels)

    def _guard_metrics(self, station: str) -> None:
        """The lock-out guard's state and the alarms raised."""
        labels = {"station": station}
        self.suspended = Gauge(
            "qcllp_scorer_lockouts_suspended",
            "1 while the lock-out guard holds the active model's lock-outs, else 0.",
            ["station"],
            registry=self.registry,
        ).labels(**labels)
        self.qc_excess = Gauge(
            "qcllp_scorer_qc_over_prediction",
            "The guard's CUSUM of the active model's over-prediction of final QC's counts "
            "(suspends above scorer.count_guard_interval; informative only for a model that "
            "locks out nothing).",
            ["station"],
            registry=self.registry,
        ).labels(**labels)
        self.inspections = InspectionMetrics(self.registry, station)
        self.alarms = Counter(
            "qcllp_scorer_alarms",
            "Alarms raised (model refused, sink truncated, ...).",
            ["station", "kind"],
            registry=self.registry,
        )

    def _shadow_metrics(self, station: str) -> None:
        """The shadow model on trial, its would-be decisions and the audit samples drawn."""
        labels = {"station": station}
        self.shadow_id = Gauge(
            "qcllp_scorer_shadow_model_id",
            "Id of the model on a shadow trial the scorer runs beside (or without) the active "
            "one (0: none).",
            ["station"],
            registry=self.registry,
        ).labels(**labels)
        self.shadow_decisions = Counter(
            "qcllp_scorer_shadow_sticks",
            "Sticks the shadow model decided (recorded in shadow_flags, never acted on), by "
            "its would-be decision (lock_out, pass, unscorable).",
            ["station", "decision"],
            registry=self.registry,
        )
        self.audits = Counter(
            "qcllp_scorer_audit_samples",
            "Sticks marked inspect (audit samples), by the model whose decision each samples "
            "(model: active, shadow).",
            ["station", "model"],
            registry=self.registry,
        )

    def count_step(self, result: StepResult) -> None:
        """Count a step's decisions: the line's, the shadow's and the audits drawn."""
        for decision, n in result.counts.items():
            if n:
                self.decisions.labels(station=self.station, decision=decision).inc(n)
        for decision, n in result.shadow_counts.items():
            if n:
                self.shadow_decisions.labels(station=self.station, decision=decision).inc(n)
        audits = result.counts.get(AUDIT, 0)
        if audits - result.shadow_audits:
            self.audits.labels(station=self.station, model="active").inc(
                audits - result.shadow_audits
            )
        if result.shadow_audits:
            self.audits.labels(station=self.station, model="shadow").inc(result.shadow_audits)
