"""What the MQTT intake tells the people on call: ``/healthz`` state and Prometheus metrics."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from qcllp.ingest.report import IngestReport
from qcllp.service.build_metrics import register_process_and_build

__all__ = ["IntakeMetrics", "IntakeState"]


@dataclass
class IntakeState:
    """What ``/healthz`` reports; written by the intake's threads, read by the HTTP thread."""

    broker: str
    connected: bool = False
    standby: bool = False
    waiting: int = 0  # messages received and not yet stored
    last_stored_at: datetime | None = None
    last_error: str | None = None  # the last store failed (database away, disk full)
    broker_problem: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def health(self) -> tuple[int, dict[str, Any]]:
        """503 (``unhealthy``) while the broker is away or storing fails; 200 ``standby``
        while another intake holds the plant's lease; else 200 ``ok``."""
        with self.lock:
            problems = []
            if self.standby:
                status = "standby"
            else:
                if not self.connected:
                    problems.append(self.broker_problem or f"not connected to {self.broker}")
                if self.last_error:
                    problems.append(f"storing failed: {self.last_error}")
                status = "unhealthy" if problems else "ok"
            body = {
                "service": "intake",
                "status": status,
                "problems": problems,
                "broker": self.broker,
                "connected": self.connected,
                "waiting_messages": self.waiting,
                "last_stored_at": self.last_stored_at.isoformat() if self.last_stored_at else None,
            }
        return (503 if status == "unhealthy" else 200), body


class IntakeMetrics:
    """The intake's own registry (``/metrics``): messages in, readings stored, batches."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        register_process_and_build(self.registry)
        r = self.registry
        self.messages = Counter(
            "qcllp_intake_messages_total", "MQTT messages received.", registry=r
        )
        self.readings = Counter(
            "qcllp_intake_readings_total",
            "Readings (and malformed messages) taken in, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "qcllp_intake_batch_seconds", "Seconds to store one batch of messages.", registry=r
        )
        self.errors = Counter(
            "qcllp_intake_store_errors_total", "Batches that could not be stored (retried).",
            registry=r,
        )  # fmt: skip
        self.last_stored = Gauge(
            "qcllp_intake_last_stored_timestamp_seconds",
            "Unix time of the last batch stored (the start, before the first).",
            registry=r,
        )
        self.last_stored.set(datetime.now(UTC).timestamp())  # silence counts from the start
        self.connected = Gauge(
            "qcllp_intake_connected", "1 while connected to the broker.", registry=r
        )
        self.waiting = Gauge(
            "qcllp_intake_waiting_messages", "Messages received, not yet stored.", registry=r
        )

    def count(self, report: IngestReport) -> None:
        """A stored batch's readings by outcome."""
        self.readings.labels(outcome="stored").inc(report.stored)
        self.readings.labels(outcome="duplicate").inc(report.duplicates)
        self.readings.labels(outcome="quarantined").inc(sum(report.quarantined.values()))
        self.last_stored.set(datetime.now(UTC).timestamp())
