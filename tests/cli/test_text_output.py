"""What ``qcllp status``, ``qcllp models list`` and ``qcllp models show`` print for a person, on
a real plant database: tables under a header row with aligned columns, times in ISO 8601 with
their zone, ``-`` for what is missing and never a Python repr; their ``--json`` unchanged."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.plant.config import load_plant_config
from qcllp.reporting.status import plant_status
from qcllp.scoring.step import record_alarm, score_station
from qcllp.station.registry import get_model, list_models, promote
from qcllp.store import RETRAINER_JOBS, Store
from qcllp.store.events import QUEUED_PREFIX, record_event

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "plant_config" / "example.yaml"
STATIONS = ("rolling", "cooling")
REPRS = ("datetime.datetime(", "Timestamp(", "{'", "None")
A_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d[^\s,;)\]]*")
ZONED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")


def _schedule_jobs(store: Store) -> None:
    """Two jobs in the retraining daemon's APScheduler table, as the daemon stores them: a
    recurring ingest and a retraining queued for rolling."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    jobs = SQLAlchemyJobStore(engine=store.engine, tablename=RETRAINER_JOBS.name)
    scheduler = BackgroundScheduler(jobstores={"default": jobs}, timezone="UTC")
    scheduler.start(paused=True)
    soon = datetime.now(UTC) + timedelta(hours=1)
    scheduler.add_job(print, "interval", hours=1, id="ingest", next_run_time=soon)
    scheduler.add_job(print, "date", run_date=soon, id=f"{QUEUED_PREFIX}rolling")
    scheduler.shutdown(wait=False)


@pytest.fixture(scope="module")
def plant(history_plant, tmp_path_factory) -> str:
    """The history plant with two stations trained, promoted and scored, a promotion decision,
    a drift check, a job run, a queued retraining and an alarm; its database URL."""
    config = history_plant.config
    url = history_plant.copy_to(tmp_path_factory.mktemp("text_output"))
    with Store.open(url) as store:
        for station in STATIONS:
            model_id = history_plant.record_trained(store, config, station)
            promote(store, model_id)
            score_station(store, config, station)
            record_event(
                store, "promotion", "promoted", "better", station=station, model_id=model_id
            )
        record_event(store, "count_drift", "ok", "counts as expected", station="rolling")
        record_event(store, "job", "ok", "3 files", detail={"job": "ingest"})
        record_event(store, "drift_retrain", "queued", "count drift", station="rolling")
        record_alarm(store, "scorer", "cooling", "sink_failed", "disk full")
        record_alarm(store, "retrainer", None, "lease_lost", "another daemon leads")
        _schedule_jobs(store)
    return url


def qcllp(url: str, *args: str) -> str:
    """The CLI's standard output for ``args`` on the plant (exit code 0)."""
    result = CliRunner().invoke(main, ["--config", str(EXAMPLE), "--db", url, *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def assert_readable(text: str) -> None:
    """No repr, no ``None``, and every time ISO 8601 with its zone."""
    for repr_ in REPRS:
        assert repr_ not in text, (repr_, text)
    times = A_TIME.findall(text)
    assert times, text
    for time in times:
        assert ZONED.match(time), (time, text)


def header_and_rows(text: str, first: str) -> tuple[str, list[str]]:
    """The table whose header row starts with ``first``: its header and its rows."""
    block = next(b for b in text.split("\n\n") if b.startswith(first))
    header, *rows = block.splitlines()
    return header, rows


def test_status_prints_tables_under_headers_with_zoned_times(plant):
    text = qcllp(plant, "status")
    assert_readable(text)
    header, rows = header_and_rows(text, "station ")
    assert header.split()[:5] == ["station", "model", "scorer", "batches", "behind"]
    assert [row.split()[0] for row in rows] == ["furnace", "rolling", "cooling", "straightening"]
    flags = header.index("flags")
    assert all(row[flags:].startswith(("pass", "lock", "-")) for row in rows), rows
    furnace = rows[0].split()
    assert furnace[1:5] == ["-", "-", "-", "0"]  # no model, no scorer, nothing pending
    jobs, queued = header_and_rows(text, "job ")[1]
    assert jobs.startswith("ingest ") and queued.startswith(f"{QUEUED_PREFIX}rolling ")
    assert "ok: 3 files" in jobs and "count drift" in queued
    decisions = header_and_rows(text, "decided at ")[1]
    assert len(decisions) == 2 and all(" promoted  better" in row for row in decisions)
    alarms = header_and_rows(text, "alarm at ")[1]
    assert any(" -  " in row and "another daemon leads" in row for row in alarms), alarms
    notes = next(b for b in text.split("\n\n") if b.split("\n")[0].split() == ["station", "note"])
    assert re.search(r"^rolling +count_drift ok: counts as expected$", notes, re.M), notes
    assert re.search(r"^cooling +lock-out guard: \d+ of \d+ sticks locked out", notes, re.M)


def test_models_list_is_a_table_with_a_header_and_aligned_columns(plant):
    text = qcllp(plant, "models", "list")
    assert_readable(text)
    header, *rows = text.strip().splitlines()
    assert header.split() == [
        "id",
        "station",
        "method",
        "target",
        "status",
        "charges",
        "bag",
        "error",
        "created",
        "at",
    ]
    assert [row.split()[1] for row in rows] == list(reversed(STATIONS))
    for row in rows:
        assert row.index(row.split()[1]) == header.index("station"), (header, row)
        assert ZONED.search(row).start() == header.index("created at"), (header, row)


def test_models_show_prints_its_metrics_and_params_as_blocks_not_dicts(plant):
    text = qcllp(plant, "models", "show", "1")
    assert_readable(text)
    lines = text.splitlines()
    assert lines[lines.index("metrics") + 1].startswith("  ")
    assert any(re.fullmatch(r"  bag_error +0\.\d+", line) for line in lines), text
    assert re.search(r"^promoted_at +\d{4}-\d\d-\d\dT[\d:]+\+00:00$", text, re.M), text
    assert re.search(r"^features +\d+: ", text, re.M), text


def test_the_json_of_status_and_the_registry_is_what_the_flows_return(plant):
    with Store.open(plant) as store:
        models, model = list_models(store), get_model(store, 1)
        status = plant_status(store, load_plant_config(EXAMPLE))
    as_json = lambda value: json.loads(json.dumps(value, default=str))  # noqa: E731
    assert json.loads(qcllp(plant, "--json", "models", "list")) == as_json(models)
    assert json.loads(qcllp(plant, "--json", "models", "show", "1")) == as_json(model)
    printed = json.loads(qcllp(plant, "--json", "status"))
    for station in printed["stations"] + status["stations"]:
        station.pop("model_age_h")  # hours since promotion: moves between the two reads
    assert printed == as_json(status)


@pytest.mark.parametrize(
    ("value", "spec", "printed"),
    [
        (None, None, "-"),
        (float("nan"), ".3f", "-"),
        (datetime(2026, 11, 26, 14, 5, 0, 123456), None, "2026-11-26T14:05:00+00:00"),
        (
            datetime(2026, 11, 26, 15, 5, tzinfo=timezone(timedelta(hours=1))),
            None,
            "2026-11-26T14:05:00+00:00",
        ),
        (0.13671696, None, "0.1367"),
        (500000.0, None, "500000"),
        (-12.4, "+.0f", "-12"),
        ({"pass": 3, "lock": 1}, None, "pass 3, lock 1"),
        ({}, None, "-"),
        (True, None, "yes"),
    ],
)
def test_one_value_is_printed_by_one_rule(value, spec, printed):
    from qcllp.cli import render

    assert render.text(value, spec) == printed


def test_a_saving_that_stands_on_the_training_charges_says_so_wherever_it_is_shown(plant, tmp_path):
    """A model whose held-out refits all declined states its in-sample figure
    (:func:`qcllp.station.lockout_rule.held_out_saving`); ``qcllp status``, the report's
    summary and ``qcllp train`` mark it."""
    import shutil

    from sqlalchemy import select, update

    from qcllp.cli.render import IN_SAMPLE_NOTE, trained_line
    from qcllp.reporting.plant_report import build_plant_report
    from qcllp.store import Model
    from qcllp.training.registering import TrainingResult

    url = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    shutil.copy(plant.removeprefix("sqlite:///"), tmp_path / "plant.sqlite")
    config = load_plant_config(EXAMPLE)
    with Store.open(url) as store, store.engine.begin() as conn:
        row = conn.execute(select(Model.id, Model.metrics).where(Model.station == "rolling")).one()
        metrics = {
            **row.metrics,
            "lockout_declined": 0.0,
            "expected_saving_per_1000": 420.0,
            "saving_low_per_1000": 120.0,
            "saving_high_per_1000": 720.0,
            "saving_in_sample": 1.0,
        }
        conn.execute(update(Model).where(Model.id == row.id).values(metrics=metrics))
    _, rows = header_and_rows(qcllp(url, "status"), "station ")
    (rolling,) = [r for r in rows if r.startswith("rolling ")]
    assert "[+120, +720] in-sample" in rolling, rolling
    with Store.open(url) as store:
        page = build_plant_report(store, config, tmp_path / "report.html").read_text()
    assert "+420 [+120, +720] EUR (in-sample: no held-out figure)" in page
    result = TrainingResult(
        row.id, "rolling", "em-llp", "defective", {}, metrics, 120, 6000, Path("m"), None
    )
    assert "did not see" not in trained_line(result)
    for week, said in ((None, ""), (25.0, " for a week of 25 charges")):
        m = {k: v for k, v in metrics.items() if k != "saving_period_charges"}
        m |= {} if week is None else {"saving_period_charges": week}
        result = replace(result, metrics=m)
        assert f"(90 % interval +120 to +720{said}, {IN_SAMPLE_NOTE})" in trained_line(result)
