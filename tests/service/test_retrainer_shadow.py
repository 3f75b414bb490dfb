"""The daemon's shadow-then-active life cycle as the plant runs it: ``qcllp serve retrainer``
in a process of its own on a real SQLite file, fed through its watched folders (readings,
final QC's counts, inspections), killed with SIGKILL and taken over by a second daemon.

The station's first model that locks out goes on a shadow trial, not active (its candidate
left undecided by a daemon killed after training, as the start-up recovery finds it). An
operator then tries a model with a lower threshold in its place (``promote_shadow``, what
``qcllp models promote --shadow`` does). The scorer's would-be decisions of the later charges
are written as the scorer writes them (``shadow_flags``, one row per model and stick, from the
model's own probabilities); the would-be lock-outs are inspected and found failing, the
counts arrive, and the daemon's ``shadow`` job confirms the model: active, once, with its
event, even though the first daemon is killed right after the files are dropped.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import yaml
from sqlalchemy import insert

from qcllp.plant.config import load_plant_config
from qcllp.station.registry import get_model, promote_shadow
from qcllp.store import ShadowFlag
from qcllp.store.events import events, record_event
from tests.retraining.shadow_helpers import locking_candidate, probabilities, with_threshold
from tests.service.harness import wait_until
from tests.service.test_retrainer_process import STATION, make_plant, start_daemon  # noqa: F401

SHADOW = {
    "shadow_trials": True,
    "shadow_min_charges": 10,
    "shadow_min_audits": 10,
    "shadow_check_interval_s": 0.5,
}


def _shadow_plant(tmp_path, retrain_plant):
    """The daemon's test plant with shadow trials on and an inspections drop folder."""
    plant = make_plant(tmp_path, retrain_plant, history=True)
    raw = yaml.safe_load(plant.config_path.read_text())
    raw["retrainer"] |= SHADOW
    raw["connectors"]["inspections"] = {"path": "drop/inspections", "format": "csv"}
    (plant.drop / "inspections").mkdir()
    plant.config_path.write_text(yaml.safe_dump(raw))
    return plant, load_plant_config(plant.config_path)


def _drop(plant, sub: str, name: str, source=None, text: str | None = None) -> None:
    """A file into a watched folder, written under a temporary name and renamed."""
    partial = plant.drop / sub / f"{name}.part"
    if text is None:
        shutil.copy(source, partial)
    else:
        partial.write_text(text)
    partial.rename(plant.drop / sub / name)


def _score_in_shadow(store, config, model_id: int, charges: list[str]):
    """The scorer's shadow rows of these charges for the model; its would-be lock-outs."""
    threshold = get_model(store, model_id)["metrics"]["threshold"]
    scored = probabilities(store, config, STATION, model_id, charges)
    scored["decision"] = (scored["probability"] >= threshold).map({True: "lock_out", False: "pass"})
    rows = [
        {**r, "station": STATION, "model_id": model_id, "threshold": threshold,
         "scored_at": datetime.now(UTC)}
        for r in scored.to_dict(orient="records")
    ]  # fmt: skip
    with store.engine.begin() as conn:
        conn.execute(insert(ShadowFlag.__table__), rows)
    return scored[scored["decision"] == "lock_out"]


def _later_charges_in_shadow(plant, config, daemon, model_id: int, known: set):
    """The later charges' readings dropped and ingested, scored in shadow by the model, its
    would-be lock-outs inspected (all failing) and the counts dropped; the lock-outs."""
    later = plant.source.later("same")
    for path in sorted((later / "measurements").iterdir()):
        _drop(plant, "measurements", path.name, path)

    def ingested():
        with plant.store() as store:
            fresh = [c for c in store.read_charge_times().index if c not in known]
        return len(fresh) == 14 and fresh

    charges = wait_until(ingested, what="the later readings ingested", procs=[daemon])
    with plant.store() as store:
        lockouts = _score_in_shadow(store, config, model_id, charges)
    assert len(lockouts) >= 10, len(lockouts)
    inspected = "charge_id,stick_id,station,result\n" + "".join(
        f"{r.charge_id},{r.stick_id},{STATION},crack\n" for r in lockouts.itertuples()
    )
    _drop(plant, "inspections", "inspected.csv", text=inspected)
    for path in sorted((later / "defects").iterdir()):
        _drop(plant, "defects", path.name, path)
    return lockouts


def test_first_model_on_shadow_then_confirmed_by_its_inspected_lockouts(
    tmp_path,
    retrain_plant,
    start_daemon,  # noqa: F811 (the fixture imported above)
):
    plant, config = _shadow_plant(tmp_path, retrain_plant)
    with plant.store() as store:
        first = locking_candidate(store, config, STATION)
        record_event(store, "trained", "candidate", "trained", station=STATION, model_id=first)
        ceiling = get_model(store, first)["metrics"]["threshold"] - 1e-6
        second = with_threshold(store, config, first, ceiling)
    daemon = start_daemon(plant)
    daemon.leading()
    (decided,) = wait_until(
        lambda: [d for d in plant.decisions() if d["model_id"] == first],
        what="the first model decided",
        procs=[daemon],
    )
    assert decided["outcome"] == "shadow", decided
    assert "first model that locks out: on a shadow trial" in decided["reason"]
    trial = wait_until(
        lambda: daemon.body().get("shadow_trials", {}).get(STATION),
        what="/healthz listing the trial",
        procs=[daemon],
    )
    assert trial.startswith(f"model {first}: waiting: 0 of 10 charges counted"), trial
    with plant.store() as store:
        assert get_model(store, first)["status"] == "shadow"
        promote_shadow(store, second)  # the operator tries a lower threshold instead
        known = set(store.read_charge_times().index)
    lockouts = _later_charges_in_shadow(plant, config, daemon, second, known)
    daemon.kill9()  # whatever it had done, the next daemon finishes it, once
    successor = start_daemon(plant)
    successor.leading()
    with plant.store() as store:
        (confirmed,) = wait_until(
            lambda: events(store, ["confirmed"], station=STATION),
            what="the trial confirmed",
            procs=[successor],
        )
        assert confirmed["model_id"] == second and confirmed["outcome"] == "promoted"
        assert "its lock-outs pay" in confirmed["reason"]
        figures = confirmed["detail"]["figures"]
        assert figures["inspected"] == figures["inspected_failing"] == len(lockouts)
        assert figures["charges"] == 14
        assert get_model(store, second)["status"] == "active"
        assert get_model(store, first)["status"] == "retired"
    wait_until(
        lambda: STATION not in successor.body().get("shadow_trials", {"x": 1}),
        what="/healthz without the finished trial",
        procs=[successor],
    )
    assert successor.terminate() == 0
    with plant.store() as store:
        assert len(events(store, ["confirmed"], station=STATION)) == 1
