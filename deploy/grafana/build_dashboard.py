"""Writes qcllp.json, the Grafana dashboard of qcllp's services, from the panels below.

    python deploy/grafana/build_dashboard.py   # after changing a panel; commit both files

The dashboard's JSON repeats a screen of Grafana's boilerplate per panel; here a panel is its
title, what it tells the person on call, its PromQL, its unit and its width (the kinds of
panel in dashboard_panels.py), so a review reads what the dashboard shows.
tests/deploy/test_grafana_dashboard.py checks that qcllp.json is what this writes,
tests/deploy/test_metric_names.py that every metric it reads is exported.

The data source is a template variable (``${datasource}``), not an import-time input: the
same file works imported by hand and provisioned from disk. The scrape jobs are those of
deploy/prometheus/prometheus.yml (qcllp-scorer, qcllp-retrainer; the daemon's own ``job``
label arrives as ``exported_job``). Standard library only: it runs with any Python >= 3.10.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).with_name("qcllp.json")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path

from dashboard_panels import (  # noqa: E402
    DS,
    HEIGHT,
    bars,
    stat,
    states,
    table,
    target,
    timeseries,
)

AT = 'station=~"$station"'  # the stations picked in the dashboard's station variable
STICKS = f"qcllp_scorer_sticks_total{{{AT}}}"
SERVICES = 'job=~"qcllp-.*"'


# -- the station scorers: are the flags on time, what they decide, is the guard holding ------
_FLAGGED = (  # % AT: the stations picked
    "sum by (station, le) (rate(qcllp_scorer_arrival_to_flag_seconds_bucket{%s}[$__rate_interval]))"
)
STATIONS = [
    timeseries(
        "Lag",
        "Age of the oldest work waiting at the station: a batch not taken in or a stick due. "
        "Above 60 s (scorer.max_lag_s) for 5 minutes: alert ScorerLagging.",
        [target(f"max by (station) (qcllp_scorer_lag_seconds{{{AT}}})", "{{station}}")],
        "s",
        w=12,
        limit=60,
    ),
    timeseries(
        "Sticks decided per minute, by decision",
        "lock_out, pass, inspect (an audit sample) and unscorable (a sensor missing): the "
        "flags the line gets.",
        [
            target(
                f"60 * sum by (station, decision) (rate({STICKS}[$__rate_interval]))",
                "{{station}} {{decision}}",
            )
        ],
        "short",
        w=12,
    ),
    timeseries(
        "Lock-out rate",
        "The last hour's lock_out decisions over all the sticks decided, per station.",
        [
            target(
                "sum by (station) (increase(qcllp_scorer_sticks_total"
                f'{{{AT}, decision="lock_out"}}[1h]))\n'
                f"/ sum by (station) (increase({STICKS}[1h]))",
                "{{station}}",
            )
        ],
        "percentunit",
        w=8,
    ),
    states(
        "Lock-outs suspended",
        "Red while the lock-out guard holds the active model's lock-outs (alert "
        "LockoutsSuspended; qcllp status says which rule tripped).",
        [target(f"max by (station) (qcllp_scorer_lockouts_suspended{{{AT}}})", "{{station}}")],
        {0: ("locking out", "green"), 1: ("suspended", "red")},
        w=8,
    ),
    timeseries(
        "Scoring steps per minute: completed and failed",
        "Steps that completed (an idle scorer completes one every few seconds; none for 6 "
        "minutes: alert ScorerStalled) and steps that failed (the database away, ...), each "
        "retried at the next tick; the journal's step_failed lines say why.",
        [
            target(
                "60 * sum by (station) "
                f"(rate(qcllp_scorer_step_seconds_count{{{AT}}}[$__rate_interval]))",
                "{{station}} completed",
            ),
            target(
                "60 * sum by (station) "
                f"(rate(qcllp_scorer_step_errors_total{{{AT}}}[$__rate_interval]))",
                "{{station}} failed",
            ),
        ],
        "short",
        w=8,
    ),
    timeseries(
        "Arrival to flag",
        "From the commit of the reading that completed a stick to its flag: the median and "
        "the 99th percentile.",
        [
            target(f"histogram_quantile(0.5, {_FLAGGED % AT})", "{{station}} p50"),
            target(f"histogram_quantile(0.99, {_FLAGGED % AT})", "{{station}} p99"),
        ],
        "s",
        w=8,
    ),
    timeseries(
        "Sticks waiting",
        "Sticks seen at the station and not flagged yet (most wait for the station to "
        "complete them).",
        [target(f"sum by (station) (qcllp_scorer_pending_sticks{{{AT}}})", "{{station}}")],
        "short",
        w=8,
    ),
    stat(
        "Model deciding",
        "The id of the model each station's scorer decides with; 0 (red): none, so the "
        "station locks out nothing (for 30 minutes while sticks wait: alert "
        "ScorerWithoutModel). qcllp models list shows them.",
        [target(f"max by (station) (qcllp_scorer_active_model_id{{{AT}}})", "{{station}}")],
        w=8,
        red_below=1,
    ),
]

# -- the retraining daemon: do its jobs run, what did it find and decide ---------------------
DAEMON = [
    timeseries(
        "Job runs per hour, by outcome",
        "The daemon's job runs (ingest, retrain, shadow, retention): ok, failed (after its "
        "retries: alert RetrainingFailing) or abandoned (the daemon stopping).",
        [
            target(
                "sum by (exported_job, outcome) (increase(qcllp_retrainer_jobs_total[1h]))",
                "{{exported_job}} {{outcome}}",
            )
        ],
        "short",
        w=12,
    ),
    timeseries(
        "Time since a job last succeeded",
        "Per job, the freshest success of any daemon. Ingestion over an hour, retraining over "
        "27 hours, shadow trials over 3: alert RetrainingStale.",
        [
            target(
                "time() - max by (exported_job) (qcllp_retrainer_last_success_timestamp_seconds)",
                "{{exported_job}}",
            )
        ],
        "s",
        w=12,
    ),
    timeseries(
        "Drift alarms and guard retrainings per hour",
        "Count-drift alarms raised (alert DriftAlarm) and retrainings queued because a scorer "
        "suspended the lock-outs; each queues a retraining of the station.",
        [
            target(
                f"sum by (station) (increase(qcllp_retrainer_count_drift_alarms_total{{{AT}}}"
                "[1h]))",
                "{{station}} drift alarm",
            ),
            target(
                f"sum by (station) (increase(qcllp_retrainer_guard_retrains_total{{{AT}}}[1h]))",
                "{{station}} guard retraining",
            ),
        ],
        "short",
        w=8,
    ),
    bars(
        "Retrainings in the time range, by outcome",
        "Per station: promoted, shadow (a trial started), kept (the active model stays), "
        "skipped, failed.",
        [
            target(
                "sum by (station, outcome) "
                f"(increase(qcllp_retrainer_station_retrains_total{{{AT}}}[$__range]))",
                "{{station}} {{outcome}}",
                instant=True,
            )
        ],
        w=8,
    ),
    stat(
        "Leader and inputs",
        "Daemons holding the plant's lease (1 is right; 0 for 10 minutes: alert "
        "RetrainerNoLeader) and inputs whose last ingestion failed (qcllp status names them).",
        [
            target("sum(qcllp_retrainer_leader)", "leading"),
            target("max(qcllp_retrainer_inputs_failing)", "inputs failing"),
        ],
        w=8,
    ),
]

# -- the line's connections: readings in over MQTT, flags out to the broker and the PLC -------
_CONNECTED = {0: ("away", "red"), 1: ("connected", "green")}
LINE = [
    timeseries(
        "Readings in over MQTT per second, by outcome",
        "What the intake (qcllp serve intake) took in: stored, duplicate (a redelivery), "
        "quarantined (with its reason in the quarantine table).",
        [
            target(
                "sum by (outcome) (rate(qcllp_intake_readings_total[$__rate_interval]))",
                "{{outcome}}",
            )
        ],
        "short",
        w=8,
    ),
    timeseries(
        "Intake: time since a batch was stored, messages waiting",
        "Seconds since the intake last stored a batch (over 5 minutes for 5 minutes: alert "
        "IntakeSilent, expected while the line stands still) and the messages received but "
        "not yet stored.",
        [
            target("time() - max(qcllp_intake_last_stored_timestamp_seconds)", "since stored"),
            target("max(qcllp_intake_waiting_messages)", "messages waiting"),
        ],
        "short",
        w=8,
    ),
    states(
        "Intake connected to the broker",
        "Red while the intake has no session with the broker (it retries; /healthz names the "
        "broker's reason).",
        [target("max(qcllp_intake_connected)", "intake")],
        _CONNECTED,
        w=8,
    ),
    timeseries(
        "Flags out: published to the broker and accepted by the PLC, per minute",
        "Flags the broker acknowledged (MQTT) and the PLC accepted (OPC UA), per station.",
        [
            target(
                "60 * sum by (station) "
                f"(rate(qcllp_scorer_flags_published_total{{{AT}}}[$__rate_interval]))",
                "{{station}} MQTT",
            ),
            target(
                "60 * sum by (station) "
                f"(rate(qcllp_scorer_plc_flags_delivered_total{{{AT}}}[$__rate_interval]))",
                "{{station}} PLC",
            ),
        ],
        "short",
        w=8,
    ),
    timeseries(
        "Flags not yet delivered",
        "Flags handed to the broker and not acknowledged, and flags decided and not yet "
        "accepted by the PLC (waiting for it for 2 minutes: alert FlagsNotReachingPlc).",
        [
            target(f"max by (station) (qcllp_scorer_flags_in_flight{{{AT}}})", "{{station}} MQTT"),
            target(f"max by (station) (qcllp_scorer_plc_flags_waiting{{{AT}}})", "{{station}} PLC"),
        ],
        "short",
        w=8,
    ),
    states(
        "Scorers connected to the broker and the PLC",
        "Red while a scorer has no session with the broker (for 2 minutes: alert "
        "FlagsNotPublished) or the PLC; its flags wait in the database and go out once it is "
        "back.",
        [
            target(f"max by (station) (qcllp_scorer_mqtt_connected{{{AT}}})", "{{station}} MQTT"),
            target(f"max by (station) (qcllp_scorer_plc_connected{{{AT}}})", "{{station}} PLC"),
        ],
        _CONNECTED,
        w=8,
    ),
    timeseries(
        "Lock-out bay: taps per hour, by what became of them",
        "stored; same (the stick's result was there already); refused (another tablet "
        "recorded another result first); invalid. Nothing stored while sticks are locked out: "
        "is the bay page up (alert BayDown) and used?",
        [
            target(
                "sum by (outcome) (increase(qcllp_bay_results_total[1h]))",
                "{{outcome}}",
            )
        ],
        "short",
        w=24,
    ),
]

# -- the processes: up, built from what, how much CPU and memory ------------------------------
PROCESSES = [
    states(
        "Up",
        "Each scraped qcllp service: red while Prometheus cannot reach it (alerts ScorerDown, "
        "RetrainerDown, IntakeDown after 2 minutes, BayDown after 5).",
        [target(f"up{{{SERVICES}}}", "{{job}} {{instance}}")],
        {0: ("down", "red"), 1: ("up", "green")},
        w=12,
    ),
    table(
        "Versions",
        "The qcllp version and the Python each service runs.",
        [
            target(
                f"max by (job, instance, version, python) (qcllp_build_info{{{SERVICES}}})",
                instant=True,
                table=True,
            )
        ],
        w=12,
    ),
    timeseries(
        "CPU",
        "CPU time per second of each service's process (1 = one core busy).",
        [
            target(
                f"rate(process_cpu_seconds_total{{{SERVICES}}}[$__rate_interval])",
                "{{job}} {{instance}}",
            )
        ],
        "percentunit",
        w=12,
    ),
    timeseries(
        "Resident memory",
        "Resident memory of each service's process.",
        [target(f"process_resident_memory_bytes{{{SERVICES}}}", "{{job}} {{instance}}")],
        "bytes",
        w=12,
    ),
]

ROWS = [
    ("Stations ($station)", STATIONS),
    ("Retraining daemon", DAEMON),
    ("The line's connections", LINE),
    ("Processes", PROCESSES),
]


def layout(rows: list[tuple[str, list[dict]]]) -> list[dict]:
    """The panels in Grafana's grid: each row's title bar, then its panels left to right,
    wrapping at 24 units; ids in order."""
    panels: list[dict] = []
    y = 0
    for title, members in rows:
        panels.append({"type": "row", "title": title, "collapsed": False, "panels": []})
        panels[-1]["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
        y, x = y + 1, 0
        for panel in members:
            width = panel["gridPos"]["w"]
            if x + width > 24:
                y, x = y + HEIGHT, 0
            panels.append({**panel, "gridPos": {"h": HEIGHT, "w": width, "x": x, "y": y}})
            x += width
        y += HEIGHT
    return [{"id": n, **panel} for n, panel in enumerate(panels, start=1)]


def variables() -> list[dict]:
    """The data source (any Prometheus) and the stations shown (those a scorer reports)."""
    stations = "label_values(qcllp_scorer_lag_seconds, station)"
    datasource = {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "options": [],
    }
    station = {
        "type": "query",
        "name": "station",
        "label": "Station",
        "datasource": DS,
        "query": {"query": stations, "refId": "stations"},
        "definition": stations,
        "includeAll": True,
        "multi": True,
        "refresh": 2,  # the stations again when the time range changes
        "sort": 1,
        "hide": 0,
        "current": {"text": ["All"], "value": ["$__all"]},
        "options": [],
    }
    return [datasource, station]


def dashboard() -> dict:
    """The whole dashboard, as Grafana 10/11 exports it (schema version 39)."""
    return {
        "title": "qcllp: stations and retraining",
        "uid": "qcllp",
        "description": "qcllp's station scorers, retraining daemon and their processes "
        "(docs/operations.md, 'Dashboard and alerts'). Made by deploy/grafana/build_dashboard.py.",
        "tags": ["qcllp"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": variables()},
        "panels": layout(ROWS),
    }


def render() -> str:
    """The dashboard as the text of qcllp.json."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
