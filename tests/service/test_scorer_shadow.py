"""The scorer service with a shadow model: followed like the active model (in-process: a
corrupt shadow artifact is one alarm and no shadow, the active model scores on; a new shadow
is loaded, a promoted one dropped), and as the plant runs it (a real process with a shadow
model only, killed with SIGKILL while charges are ingested and restarted: every stick once in
``shadow_flags``, its audit samples once in the flags and once in the sink)."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pandas as pd
import pytest
import yaml

from qcllp.plant.config import load_plant_config
from qcllp.scoring.audits import audit_draw
from qcllp.scoring.step import flags_frame
from qcllp.service.scorer import ScorerService
from qcllp.station.registry import artifact_location, get_model, load_model, promote
from qcllp.store import Store
from qcllp.training.train import labeled_data, record_model
from tests.service.scorer_plant import (
    KILL_SEED,
    KILLS,
    STATION,
    Plant,
    assert_sink_holds_each_flag_once,
    make_plant,
    wait_until,
)
from tests.support.plants import (
    fast_config,  # noqa: F401 (fixture)
    history_plant,  # noqa: F401 (fixture)
    with_station,
)


def quarter_of_a_trial(config):  # noqa: ANN001, ANN201
    """The config with a quarter of a shadow's would-be lock-outs audited at cooling (a bay
    that takes a quarter): the draw then leaves some out."""
    return with_station(config, STATION, trial_audit_share=0.25)


def register_copy(store: Store, config, model_id: int, threshold: float) -> int:  # noqa: ANN001
    """A copy of model ``model_id`` with another threshold (a real artifact, a candidate)."""
    model = load_model(store, model_id).model
    copy = replace(model, threshold=threshold, metrics={**model.metrics, "threshold": threshold})
    return record_model(store, config, copy, labeled_data(store, config, STATION)).model_id


def shadow_keys(store: Store) -> pd.DataFrame:
    rows = store.execute_sql(
        "SELECT charge_id, stick_id, model_id, decision FROM shadow_flags WHERE station = 'cooling'"
    )
    return pd.DataFrame(rows, columns=["charge_id", "stick_id", "model_id", "decision"])


def alarms(store: Store) -> list[tuple[str, str]]:
    return [tuple(r) for r in store.execute_sql("SELECT kind, message FROM alarms")]


# ----------------------------------------------------------------------------- in-process
def test_a_corrupt_shadow_is_one_alarm_and_no_shadow_and_the_active_model_scores_on(
    history_plant,  # noqa: F811
    tmp_path,
):
    config = history_plant.config
    store = Store.open(history_plant.copy_to(tmp_path))
    active = history_plant.record_trained(store, config, STATION)
    promote(store, active)
    broken = register_copy(store, config, active, 0.0)
    promote(store, broken, shadow=True)
    path = artifact_location(store, get_model(store, broken))
    path.write_bytes(path.read_bytes()[:-10] + b"corrupted!")
    service = ScorerService(store, config, STATION)
    gauge = {"station": STATION}
    decided = service.tick()
    service.tick()  # refused once, not once per tick
    assert decided > 0 and len(flags_frame(store, STATION)) == decided
    assert (flags_frame(store, STATION)["model_id"] == active).all()
    assert shadow_keys(store).empty and service.shadow.model is None
    [(kind, message)] = alarms(store)
    assert kind == "shadow_refused" and message.startswith(f"shadow model {broken} refused: ")
    assert "\n" not in message
    status, body = service.state.health()
    assert status == 200 and body["status"] == "ok" and body["shadow_model_id"] is None
    assert service.metrics.registry.get_sample_value("qcllp_scorer_shadow_model_id", gauge) == 0

    good = register_copy(store, config, active, 0.0)
    promote(store, good, shadow=True)  # the corrupt one is retired
    service.tick()
    assert service.shadow.model.id == good and service.state.health()[1]["shadow_model_id"] == good
    assert service.metrics.registry.get_sample_value("qcllp_scorer_shadow_model_id", gauge) == good
    promote(store, good)  # the trial ends: the shadow is the active model now
    service.tick()
    assert service.model.id == good and service.shadow.model is None
    assert service.state.health()[1]["shadow_model_id"] is None
    assert len(alarms(store)) == 1
    store.close()


def test_a_shadow_alone_in_the_service_is_degraded_and_counts_its_decisions_and_audits(
    history_plant,  # noqa: F811
    tmp_path,
):
    config = quarter_of_a_trial(history_plant.config)
    store = Store.open(history_plant.copy_to(tmp_path))
    trained = history_plant.record_trained(store, config, STATION)
    eager = register_copy(store, config, trained, 0.0)
    promote(store, eager, shadow=True)
    service = ScorerService(store, config, STATION)
    service.tick()
    decided, flags = shadow_keys(store), flags_frame(store, STATION)
    assert len(decided) > len(flags) > 0 and (flags["decision"] == "inspect").all()
    status, body = service.state.health()
    assert status == 200 and body["status"] == "degraded", body
    assert body["model_id"] is None and body["shadow_model_id"] == eager
    assert body["problems"] == [
        f"no active model: shadow model {eager} decides alone, the line gets its audit samples only"
    ]
    value = service.metrics.registry.get_sample_value
    station = {"station": STATION}
    assert value("qcllp_scorer_shadow_model_id", station) == eager
    shadow_total = sum(
        value("qcllp_scorer_shadow_sticks_total", {**station, "decision": d}) or 0
        for d in ("lock_out", "pass", "unscorable")
    )
    assert shadow_total == len(decided)
    audits = value("qcllp_scorer_audit_samples_total", {**station, "model": "shadow"})
    assert audits == len(flags)
    assert value("qcllp_scorer_audit_samples_total", {**station, "model": "active"}) is None
    assert value("qcllp_scorer_sticks_total", {**station, "decision": "inspect"}) == len(flags)
    store.close()


# ----------------------------------------------------------------------------- a process
@pytest.fixture
def shadow_plant(tmp_path, history) -> Plant:
    """A SQLite plant with no active cooling model and a copy of the trained one that locks
    out every stick on a shadow trial (``model_b``); a quarter of its would-be lock-outs are
    audited (``trial_audit_share`` in the plant file)."""
    plant = make_plant(tmp_path, history, promote_first=False)
    raw = yaml.safe_load(plant.config_path.read_text())
    for station in raw["stations"]:
        if station["name"] == STATION:
            station["trial_audit_share"] = 0.25  # the scorer process reads the file
    plant.config_path.write_text(yaml.safe_dump(raw))
    plant.config = load_plant_config(plant.config_path)
    plant.model_b = register_copy(plant.store, plant.config, plant.model_a, 0.0)
    promote(plant.store, plant.model_b, shadow=True)
    yield plant
    plant.store.close()


@pytest.mark.slow  # about 2 s per kill and restart, on top of training the model
def test_a_shadow_alone_killed_mid_ingestion_records_each_stick_once_and_audits_once(
    shadow_plant,
    start_scorer,
):
    plant, rng = shadow_plant, random.Random(KILL_SEED)
    sink = plant.folder / "flags-cooling.jsonl"
    plant.feed(2)
    for _ in range(KILLS):
        scorer = start_scorer(plant, sink=sink)
        scorer.wait_up()
        plant.feed(rng.randint(2, 4))
        time.sleep(rng.uniform(0.0, 0.6))  # somewhere in taking in / deciding / writing
        assert scorer.proc.poll() is None, scorer.log()
        scorer.kill9()
        if rng.random() < 0.5:
            plant.feed(rng.randint(1, 2))  # arrives while the scorer is down
    final = start_scorer(plant, sink=sink)
    wait_until(
        lambda: len(shadow_keys(plant.store)) >= len(plant.expected),
        what="every fed stick decided by the shadow",
        procs=[final],
    )
    wait_until(lambda: final.body().get("pending_sticks") == 0, what="none pending", procs=[final])
    status, body = final.health()
    assert status == 200 and body["status"] == "degraded", body
    assert body["model_id"] is None and body["shadow_model_id"] == plant.model_b
    assert final.metric("qcllp_scorer_shadow_model_id") == plant.model_b
    assert final.terminate() == 0, final.log()

    decided = shadow_keys(plant.store)
    keys = list(zip(decided["charge_id"], decided["stick_id"], strict=True))
    assert len(keys) == len(set(keys)) and set(keys) == plant.expected
    assert (decided["model_id"] == plant.model_b).all()
    locks = decided[decided["decision"] == "lock_out"]
    drawn = audit_draw(STATION, locks["charge_id"], locks["stick_id"]) < 0.25
    expected = set(zip(locks["charge_id"][drawn], locks["stick_id"][drawn], strict=True))
    flags = plant.flags()
    assert plant.flagged() == expected and len(flags) == len(expected) > 0
    assert (flags["decision"] == "inspect").all() and (flags["model_id"] == plant.model_b).all()
    records = assert_sink_holds_each_flag_once(plant, sink)
    assert {r["decision"] for r in records} == {"inspect"}
