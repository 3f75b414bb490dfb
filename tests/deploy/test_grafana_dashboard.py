"""deploy/grafana/qcllp.json is what deploy/grafana/build_dashboard.py writes (the script is
what a review reads, the JSON what Grafana loads), a dashboard Grafana takes (schema 39, one
data source variable every panel uses, a station variable, panels on the grid without
overlap) and shows what the person on call needs; every query is PromQL that Prometheus's own
parser accepts (``promtool check rules`` on the queries as recording rules; skips without
promtool). The metrics they read: tests/deploy/test_metric_names.py."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.deploy.expressions import DASHBOARD, DEPLOY, dashboard_expressions

SCRIPT = DEPLOY / "grafana" / "build_dashboard.py"
DS = {"type": "prometheus", "uid": "${datasource}"}
PROMTOOL = shutil.which("promtool")


def built() -> str:
    """What the script writes, from this checkout's script."""
    spec = importlib.util.spec_from_file_location("build_dashboard", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render()


def board() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_the_json_is_what_the_script_writes():
    assert DASHBOARD.read_text(encoding="utf-8") == built(), (
        "run: python deploy/grafana/build_dashboard.py (and commit qcllp.json)"
    )


def test_grafana_gets_its_schema_a_data_source_variable_and_the_stations():
    dashboard = board()
    assert dashboard["schemaVersion"] == 39 and dashboard["uid"] == "qcllp"
    datasource, station = dashboard["templating"]["list"]
    assert (datasource["type"], datasource["name"], datasource["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    assert station["name"] == "station" and station["datasource"] == DS
    assert re.fullmatch(r"label_values\(qcllp_\w+, station\)", station["definition"])
    assert station["query"]["query"] == station["definition"]


def test_every_panel_queries_the_data_source_variable_and_sits_on_the_grid_alone():
    panels = board()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        columns = range(pos["x"], pos["x"] + pos["w"])
        cells = {(x, y) for x in columns for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DS, panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        assert all(t["datasource"] == DS and t["expr"] for t in panel["targets"])


def test_it_shows_what_the_person_on_call_looks_for():
    exprs = "\n".join(dashboard_expressions())
    for wanted in [
        "qcllp_scorer_lag_seconds",
        'decision="lock_out"',  # the lock-out rate
        "qcllp_scorer_lockouts_suspended",
        "qcllp_scorer_active_model_id",  # no model: the station locks out nothing
        "histogram_quantile(0.99, sum by (station, le) "
        "(rate(qcllp_scorer_arrival_to_flag_seconds_bucket",
        "qcllp_scorer_step_errors_total",
        "qcllp_retrainer_jobs_total",
        "qcllp_retrainer_last_success_timestamp_seconds",
        "qcllp_retrainer_count_drift_alarms_total",
        "qcllp_retrainer_station_retrains_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "qcllp_build_info",
    ]:
        assert wanted in exprs
    scorer_panels = [p for p in board()["panels"] if "qcllp_scorer" in json.dumps(p)]
    assert scorer_panels and all(
        '"$station"' in t["expr"] for p in scorer_panels for t in p["targets"]
    )


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: install Debian's 'prometheus'")
def test_every_query_is_promql_prometheus_parses(tmp_path):
    """Grafana's variables replaced by what it would put there; each query a recording rule."""
    grafana = {"$__rate_interval": "1m", "$__range": "6h", "$station": ".*"}
    queries = [t for t in dashboard_expressions() if not t.startswith("label_values(")]
    rules = []
    for n, query in enumerate(queries):
        for variable, value in grafana.items():
            query = query.replace(variable, value)
        assert "$" not in query, query
        rules.append({"record": f"dashboard:query_{n}", "expr": query})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(queries)} rules found" in done.stdout
