"""Every metric the alert rules and the Grafana dashboard read is one the services export,
under the name a scrape gives it (a counter's ``_total``, a histogram's ``_bucket``, ...): a
renamed metric, or a gauge queried as a counter, would leave an alert that can never fire or
an empty panel, and nothing would say so.

The names come from the services' registries, built as the services build them (no process
started): the scorer's (with its MQTT publisher's and its PLC writer's), the daemon's and the
MQTT intake's.
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from qcllp.service.bay.metrics import BayMetrics
from qcllp.service.mqtt.flag_publisher import PublisherMetrics
from qcllp.service.mqtt.intake_health import IntakeMetrics
from qcllp.service.opcua.flag_writer import PlcMetrics
from qcllp.service.retrainer_health import RetrainerMetrics
from qcllp.service.scorer_metrics import ScorerMetrics
from tests.deploy.expressions import alert_expressions, dashboard_expressions

# the sample names a metric family of each type has in the text format Prometheus scrapes
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}
METRIC_NAME = re.compile(r"\b(?:qcllp|process)_[a-z_]+\b")


def exported_names(*registries: CollectorRegistry) -> set[str]:
    """The sample names the registries' families expose, whether or not a labelled family has
    a sample yet."""
    return {
        family.name + suffix
        for registry in registries
        for family in registry.collect()
        for suffix in SUFFIXES[family.type]
    }


def services_names() -> set[str]:
    scorer = ScorerMetrics("cooling")
    PublisherMetrics(scorer.registry, "cooling")
    PlcMetrics(scorer.registry, "cooling")
    return exported_names(
        scorer.registry, RetrainerMetrics().registry, IntakeMetrics().registry,
        BayMetrics().registry,
    )  # fmt: skip


def unknown_names(expressions: list[str]) -> set[str]:
    used = {name for expr in expressions for name in METRIC_NAME.findall(expr)}
    assert used, "the expressions read qcllp's metrics"
    return used - services_names()


def test_the_alert_rules_read_only_metrics_the_services_export():
    assert unknown_names(alert_expressions()) == set()


def test_the_dashboard_reads_only_metrics_the_services_export():
    assert unknown_names(dashboard_expressions()) == set()


def test_a_name_the_services_do_not_export_is_caught():
    names = services_names()
    assert {"qcllp_scorer_lag_seconds", "qcllp_scorer_sticks_total"} <= names
    assert {"qcllp_build_info", "process_cpu_seconds_total"} <= names
    assert "qcllp_scorer_arrival_to_flag_seconds_bucket" in names
    wrong = ["qcllp_scorer_lag_seconds_total > 1", "rate(qcllp_scorer_sticks[5m])"]
    assert unknown_names(wrong) == {"qcllp_scorer_lag_seconds_total", "qcllp_scorer_sticks"}
