"""The station scorer's Prometheus metrics (:mod:`qcllp.service.scorer`): the sticks decided
and how long they take, the backlog, the lock-out guard, the inspections taken in
(:mod:`.scorer_inspections`), and the shadow model on trial with the audit samples drawn
(:mod:`qcllp.scoring.audits`). prometheus_client keeps them, in a registry of the service's
own, with the process's and the build's (:mod:`.build_metrics`).

The arrival-to-flag latencies, one per stick decided, go into a :class:`BulkHistogram`, which
takes a step's values at once. prometheus_client's :class:`~prometheus_client.Histogram`
observes one value per call (a lock, a search of the buckets and two increments in Python):
for a backlog's drain of 50,000 sticks that was 0.13 s, 4 % of the drain
(``benchmarks/bench_scorer.py`` backlog, issue 34). :class:`BulkHistogram` counts a whole
array per call in NumPy (``searchsorted`` and ``bincount``) and is read through the library's
own custom-collector interface (:class:`~prometheus_client.core.HistogramMetricFamily`), so
the text format, the bucket labels and the registry stay the library's. What it leaves out of
the library's histogram: the ``_created`` sample (no dashboard or alert of ours reads it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from qcllp.scoring.audits import AUDIT
from qcllp.scoring.step import DECISIONS, StepResult
from qcllp.service.build_metrics import register_process_and_build
from qcllp.service.scorer_inspections import InspectionMetrics

__all__ = ["BulkHistogram", "ScorerMetrics"]


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
        self.arrival_to_flag = BulkHistogram(  # a step's sticks at once
            "qcllp_scorer_arrival_to_flag_seconds",
            "From the commit of the reading that completed a stick to its flag.",
            labels,
            (0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
            self.registry,
        )

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


class BulkHistogram:
    """One labelled series of a histogram (cumulative ``le`` buckets, ``_sum``, ``_count``),
    observed an array at a time; registered in ``registry``. Thread safe: the service's
    HTTP thread reads it while the step's thread counts."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: Mapping[str, str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ):
        edges = [float(b) for b in buckets if b != float("inf")]
        if edges != sorted(edges) or len(set(edges)) != len(edges):
            raise ValueError(f"{name}: buckets must increase, got {list(buckets)}")
        self.name, self.documentation = name, documentation
        self._labels = dict(labels)
        self._edges = np.array(edges, dtype=np.float64)
        self._counts = np.zeros(len(edges) + 1, dtype=np.int64)  # per bucket; the last: +Inf
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, values: Sequence[float] | np.ndarray) -> None:
        """Count every value (seconds); as many ``Histogram.observe`` calls would."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if not len(v):
            return
        # bucket le=x holds the values <= x: the first edge >= the value
        counts = np.bincount(np.searchsorted(self._edges, v, side="left"),
                             minlength=len(self._counts))  # fmt: skip
        total = float(v.sum())
        with self._lock:
            self._counts += counts
            self._sum += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        """The histogram's samples, for the registry."""
        with self._lock:
            cumulative, total = np.cumsum(self._counts).tolist(), self._sum
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self._labels))
        bounds = [*(floatToGoString(e) for e in self._edges.tolist()), "+Inf"]
        family.add_metric(
            list(self._labels.values()), list(zip(bounds, cumulative, strict=True)), total
        )
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        """The family without samples: the registry checks names once, at registration."""
        yield HistogramMetricFamily(self.name, self.documentation, labels=list(self._labels))
