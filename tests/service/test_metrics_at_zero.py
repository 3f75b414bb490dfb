"""The counters the alerts and the dashboard take the ``increase()`` of are exported at 0 from
a service's start: a labelled child prometheus_client creates at its first ``inc()`` appears
with the value 1, and PromQL counts no increase in a series' first sample, so the first drift
alarm, failed job or lock-out since a start would go unseen."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from qcllp.scoring.step import DECISIONS
from qcllp.service.retrainer import RetrainerService
from qcllp.service.scorer_metrics import ScorerMetrics
from qcllp.store import Store


def exported(registry, name: str) -> dict[frozenset, float]:
    """The samples ``name`` of the registry's text exposition, by their labels."""
    text = generate_latest(registry).decode()
    return {
        frozenset(sample.labels.items()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_the_daemon_exports_every_job_s_failures_and_every_station_s_alarms_at_zero(
    tiny_config, tmp_path
):
    store = Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}")
    try:
        registry = RetrainerService(store, tiny_config).metrics.registry
    finally:
        store.close()
    jobs = exported(registry, "qcllp_retrainer_jobs_total")
    for job in ("ingest", "retrain", "shadow"):  # retention: not configured in the tiny plant
        for outcome in ("ok", "failed", "abandoned"):
            assert jobs.pop(frozenset({"job": job, "outcome": outcome}.items())) == 0
    assert jobs == {}
    for name in ("count_drift_alarms", "guard_retrains"):
        alarms = exported(registry, f"qcllp_retrainer_{name}_total")
        assert alarms == {frozenset({"station": s}.items()): 0 for s in ("furnace", "rolling")}


def test_the_scorer_exports_every_decision_at_zero():
    sticks = exported(ScorerMetrics("cooling").registry, "qcllp_scorer_sticks_total")
    expected = {frozenset({"station": "cooling", "decision": d}.items()): 0 for d in DECISIONS}
    assert sticks == expected
    assert {"lock_out", "pass", "inspect", "unscorable"} == set(DECISIONS)
