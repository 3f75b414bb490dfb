"""The bay page's ``/metrics``: what the people on call need to see that the bay works.

The inspections are how the lock-out guard (:mod:`qcllp.scoring.inspection_guard`) and the
shadow trials learn whether lock-outs pay; a bay page that is down, or whose taps are refused,
starves them without any other service noticing. So the page counts what becomes of each tap
(``qcllp_bay_results_total{outcome}``: ``stored``, ``same`` -- the stick's result was there
already --, ``refused`` -- another result was there --, ``invalid``), the requests it refused
(``qcllp_bay_requests_refused_total{status}``: 401 no session, 403 cross-site or a wrong
anti-forgery token) and the logins (``qcllp_bay_logins_total{outcome}``), besides the process
and build metrics every service has (:mod:`qcllp.service.build_metrics`). Prometheus scrapes
it as job ``qcllp-bay`` (``deploy/prometheus/prometheus.yml``; alert ``BayDown``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from qcllp.service.build_metrics import register_process_and_build

__all__ = ["BayMetrics"]

OUTCOMES = ("stored", "same", "refused", "invalid")


class BayMetrics:
    """The bay page's registry and counters (module docstring), each series at 0 from the
    start so that a rate of refusals reads 0, not nothing."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        register_process_and_build(self.registry)
        r = self.registry
        self.results = Counter(
            "qcllp_bay_results_total", "Taps on a result, by what became of them.",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.refused = Counter(
            "qcllp_bay_requests_refused_total",
            "Requests refused: 401 without a session, 403 cross-site or a wrong anti-forgery "
            "token.", ["status"], registry=r,
        )  # fmt: skip
        self.logins = Counter(
            "qcllp_bay_logins_total", "Logins, by outcome (ok, wrong token).", ["outcome"],
            registry=r,
        )  # fmt: skip
        for outcome in OUTCOMES:
            self.results.labels(outcome=outcome)
        for status in ("401", "403"):
            self.refused.labels(status=status)
        for outcome in ("ok", "wrong"):
            self.logins.labels(outcome=outcome)
