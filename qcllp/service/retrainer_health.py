"""What the retraining daemon reports: its Prometheus metrics and its ``/healthz`` state.

Written by the daemon's job threads (:mod:`.retrainer`), read by the HTTP thread
(:mod:`.http`): the metrics in a registry of their own (prometheus_client), the state under
its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from qcllp.service.build_metrics import register_process_and_build
from qcllp.store.leases import HeldLease

__all__ = ["JOB_OUTCOMES", "RetrainerMetrics", "RetrainerState"]

JOB_OUTCOMES = ("ok", "failed", "abandoned")  # qcllp_retrainer_jobs_total's outcome label


class RetrainerMetrics:
    """Prometheus metrics of the daemon, in a registry of its own, with the process's and the
    build's (:mod:`.build_metrics`)."""

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
            "Station retrainings by outcome (promoted, shadow, kept, skipped, failed).",
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
        register_process_and_build(self.registry)

    def start_at_zero(self, stations: Iterable[str], jobs: Iterable[str]) -> None:
        """Export the counters the alerts watch at 0 from the start, for every job and
        station. A labelled child appears at its first ``inc()`` with the value 1, and PromQL's
        ``increase()`` counts nothing in a series' first sample: the daemon's first failed job
        or drift alarm since it started would raise no alert."""
        for job in jobs:
            for outcome in JOB_OUTCOMES:
                self.jobs.labels(job=job, outcome=outcome)
        for station in stations:
            self.drift_alarms.labels(station=station)
            self.guard_retrains.labels(station=station)


@dataclass
class RetrainerState:
    """What ``/healthz`` reports; written by the job threads, read by the HTTP thread."""

    holder: str
    standby: bool = True
    running: str | None = None
    last_error: str | None = None
    last_runs: dict[str, str] = field(default_factory=dict)
    lease: HeldLease | None = None  # while leading: its renewal failures make it unhealthy
    shadow_trials: dict[str, str] = field(default_factory=dict)  # station -> its trial's state
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
                "shadow_trials": dict(self.shadow_trials),
            }
        return (200 if not problems else 503), body
