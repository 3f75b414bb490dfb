"""The station scorer's metrics of inspections (:mod:`qcllp.scoring.inspection_guard`): the
active model's lock-outs inspected at the bay and audit samples taken in by this process, the
shortfall of their precision against break-even and the model's realized (inspected) saving
since its promotion. prometheus_client keeps them, in the scorer's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from qcllp.scoring.inspection_guard import InspectionIntake

__all__ = ["InspectionMetrics"]


class InspectionMetrics:
    """The inspections of the active model's sticks and its realized (inspected) saving."""

    def __init__(self, registry: CollectorRegistry, station: str):
        labels = {"station": station}
        self.station = station
        self.inspected = Counter(
            "qcllp_scorer_inspected_lockouts",
            "The active model's lock-outs inspected at the bay that this process took in, by "
            "result (fail: any defect type, good).",
            ["station", "result"],
            registry=registry,
        )
        self.audits = Counter(
            "qcllp_scorer_inspected_audits",
            "Audit samples of sticks the active model let pass that this process took in.",
            ["station"],
            registry=registry,
        ).labels(**labels)
        self.shortfall = Gauge(
            "qcllp_scorer_inspection_shortfall",
            "The guard's CUSUM of failing sticks the active model's inspected lock-outs fall "
            "short of break-even (suspends above scorer.inspection_guard_interval).",
            ["station"],
            registry=registry,
        ).labels(**labels)
        self.realized = Gauge(
            "qcllp_scorer_realized_saving",
            "Realized (inspected) saving of the active model since its promotion: fail_cost x "
            "lock-outs inspected failing - good_cost x inspected good - inspection_cost x all "
            "inspected.",
            ["station"],
            registry=registry,
        ).labels(**labels)

    def count(self, seen: InspectionIntake) -> None:
        """Count what a step took in."""
        if seen.fail or seen.good:
            self.inspected.labels(station=self.station, result="fail").inc(seen.fail)
            self.inspected.labels(station=self.station, result="good").inc(seen.good)
        if seen.audit:
            self.audits.inc(seen.audit)
