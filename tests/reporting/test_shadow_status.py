"""A station's shadow trial as people read it: ``qcllp status`` (its JSON and its text) and
the report's summary, on the hand-built trial of tests/retraining/test_shadow_trial.py (both
engines): the figures worked out there, in the words the brief asks for."""

from __future__ import annotations

import json

from sqlalchemy import update

from qcllp.cli.render_status import status_text
from qcllp.reporting.plant_report import build_plant_report
from qcllp.reporting.status import plant_status
from qcllp.retraining.shadow_check import check_trial
from qcllp.store import Model
from tests.retraining.test_shadow_trial import build_trial, judged, more_inspections

PER = 1000 / 19  # the trial's 19 sticks
LOOK = 15 * 8  # its 8 would-be lock-outs looked at the bay, 15 each (5 % of good_cost 300)


def test_status_shows_the_trial_with_its_three_savings(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    result = plant_status(store, tiny_config)
    (furnace,) = [s for s in result["stations"] if s["station"] == "furnace"]
    trial = furnace["shadow_trial"]
    assert trial["model"] == shadow and trial["confirm"] == "auto"
    assert trial["figures"]["lockouts"] == 8 and trial["figures"]["inspected"] == 3
    assert trial["state"] == "wait: 3 of 25 charges counted"
    json.dumps(trial["figures"])  # JSON-ready as --json prints it
    line = trial["line"]
    assert line.startswith(f"shadow trial of model {shadow} since 2025-01-06 05:00 UTC: ")
    measured = PER * 8 * (100 * 2 / 3 - 300 / 3 - 15)
    assert f"measured {measured:+,.0f} [" in line and "EUR per 1,000 on 3 inspected" in line
    assert (
        f"bounded by the counts [{PER * (-1200 - LOOK):+,.0f}, {PER * (400 - LOOK):+,.0f}] EUR"
        in line
    )
    assert f"expected {PER * (100 * 6.5 - 300 * 1.5 - LOOK):+,.0f} EUR (model-based)" in line
    text = status_text(result)
    assert f"{line}; rule (auto): wait: 3 of 25 charges counted" in text
    (rolling,) = [s for s in result["stations"] if s["station"] == "rolling"]
    assert rolling["shadow_trial"] is None


def test_the_report_summary_names_the_trial(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    page = build_plant_report(store, tiny_config, tmp_path / "report.html").read_text()
    assert f"shadow trial (model {shadow})" in page
    assert (
        f"bounded by the counts [{PER * (-1200 - LOOK):+,.0f}, {PER * (400 - LOOK):+,.0f}] EUR"
        in page
    )
    assert "rule: wait: 3 of 25 charges counted" in page


def test_a_rejected_trial_is_among_the_decisions_and_no_longer_shown(store, tiny_config, tmp_path):
    shadow = build_trial(store, tiny_config, tmp_path)
    config = judged(tiny_config)
    more_inspections(store, config, tmp_path, "ok")
    assert check_trial(store, config, "furnace").outcome == "rejected"
    result = plant_status(store, config)
    latest = result["decisions"][0]
    assert (latest["model_id"], latest["outcome"]) == (shadow, "retired")
    assert latest["reason"].startswith("its lock-outs lose money: inspected precision 2/7")
    assert all(s["shadow_trial"] is None for s in result["stations"])


def test_status_says_what_the_active_models_training_left_out(store, tiny_config, tmp_path):
    """Charges held back for uninspected audit samples, and audits the model stopped: an
    operator reads them among the station's notes."""
    build_trial(store, tiny_config, tmp_path)
    metrics = {
        "threshold": 0.5,
        "held_back_charges": 3.0,
        "audits_declined": 1.0,
        "audit_inspected": 39.0,
        "audit_inspected_failing": 30.0,
    }
    with store.engine.begin() as conn:
        conn.execute(
            update(Model.__table__)
            .where(Model.station == "rolling", Model.status == "active")
            .values(metrics=metrics)
        )
    text = status_text(plant_status(store, tiny_config))
    assert (
        "its training held back 3 labeled charges: their audit samples await inspection "
        "(enter them: qcllp ingest inspections)" in text
    )
    assert "no audit samples: 30 of 39 inspected at the top of its ranking failed" in text
    (row,) = [line for line in text.splitlines() if "held back" in line]
    assert row.split()[0] == "rolling"  # a note of rolling's, not of the furnace
