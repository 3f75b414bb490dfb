"""The PromQL of deploy/: the alert rules' expressions and the Grafana dashboard's queries, as
the tests of tests/deploy read them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "qcllp.json"


def alert_expressions() -> list[str]:
    """Every rule's ``expr`` in alerts.yml."""
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    """Every panel query's ``expr`` and the template variables' queries of qcllp.json."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    variables = [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries + variables
