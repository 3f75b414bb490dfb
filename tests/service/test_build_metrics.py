"""Both services' ``/metrics`` carry the process (CPU, memory) and the build
(``qcllp_build_info``) besides their own metrics: their registries are their own, so
prometheus_client's global process collector never reaches them."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from qcllp.service.build_metrics import qcllp_version
from qcllp.service.retrainer_health import RetrainerMetrics
from qcllp.service.scorer_metrics import ScorerMetrics

SERVICES = {
    "scorer": lambda: ScorerMetrics("cooling").registry,
    "retrainer": lambda: RetrainerMetrics().registry,
}


def samples(registry) -> dict[str, list]:
    """Every sample of the registry's text exposition (what Prometheus scrapes), by name."""
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="the process collector reads /proc"
)
@pytest.mark.parametrize("service", SERVICES)
def test_the_service_exposes_its_process_cpu_and_memory(service):
    found = samples(SERVICES[service]())
    assert found["process_cpu_seconds_total"][0].value >= 0
    assert found["process_resident_memory_bytes"][0].value > 1_000_000  # a Python process
    assert "process_start_time_seconds" in found


@pytest.mark.parametrize("service", SERVICES)
def test_the_service_exposes_its_build(service):
    (build,) = samples(SERVICES[service]())["qcllp_build_info"]
    assert build.value == 1
    assert build.labels == {"version": qcllp_version(), "python": platform.python_version()}


def test_the_version_is_the_installed_one_else_the_package_s(monkeypatch):
    import qcllp

    assert qcllp_version() == importlib.metadata.version("qcllp")

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert qcllp_version() == qcllp.__version__
