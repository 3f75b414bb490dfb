"""The alert rules in deploy/prometheus/ are what Prometheus accepts and do what their unit
tests say: ``promtool check rules``, ``promtool check config`` (the example scrape config that
loads them) and ``promtool test rules`` (each alert fires on series that call for it and stays
quiet on their neighbours), run as real subprocesses as a person or CI would run them. A copy
with a threshold changed fails its tests, so they test something. Skips where promtool (Debian's
``prometheus`` package, installed by ``deploy/bootstrap.sh --test`` as root) is not installed;
the shape of the rules is checked everywhere."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERTS_TEST = PROMETHEUS / "alerts_test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found: install Debian's 'prometheus' package "
    "(deploy/bootstrap.sh --test does, as root)",
)
EXPECTED = {
    "ScorerDown",
    "ScorerLagging",
    "ScorerStalled",
    "ScorerWithoutModel",
    "LockoutsSuspended",
    "FlagsNotPublished",
    "FlagsNotReachingPlc",
    "RetrainerDown",
    "RetrainerNoLeader",
    "RetrainingFailing",
    "RetrainingStale",
    "DriftAlarm",
    "IntakeDown",
    "IntakeSilent",
    "BayDown",
}


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


@needs_promtool
def test_prometheus_accepts_the_rules_and_the_example_config():
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(EXPECTED)} rules found" in checked.stdout
    config = promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


@needs_promtool
def test_the_rules_pass_their_unit_tests():
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
def test_a_rule_with_another_threshold_fails_its_unit_tests(tmp_path):
    text = ALERTS.read_text()
    changed = text.replace("(qcllp_scorer_lag_seconds) > 60", "(qcllp_scorer_lag_seconds) > 50")
    assert changed != text
    (tmp_path / "alerts.yml").write_text(changed)
    shutil.copy(ALERTS_TEST, tmp_path)
    done = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert done.returncode != 0
    assert "alertname: ScorerLagging" in done.stdout + done.stderr


def test_every_alert_is_unit_tested_has_a_severity_and_says_what_to_do_first():
    alerts = {rule["alert"]: rule for rule in rules()}
    assert set(alerts) == EXPECTED
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == EXPECTED
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert set(rule["annotations"]) == {"summary", "description"}, name
        description = rule["annotations"]["description"]
        assert "qcllp status" in description or "journal" in description, name
