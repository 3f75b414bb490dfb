"""The scorer service in-process when its database goes away and comes back: the step fails,
``/healthz`` says why, nothing is decided twice, and the next tick after the return catches up."""

from __future__ import annotations

import shutil

from qcllp.pipeline.flag_sink import claimed_sink
from qcllp.pipeline.registry import promote
from qcllp.pipeline.scoring import flags_frame
from qcllp.pipeline.train import train_station
from qcllp.service.scorer import ScorerService
from qcllp.store import Store
from tests.pipeline.conftest import (
    fast_config,  # noqa: F401 (fixture)
    history_plant,  # noqa: F401 (fixture)
)


def test_a_database_away_fails_the_step_visibly_and_the_scorer_catches_up_after(
    history_plant,  # noqa: F811
    tmp_path,
):
    url = history_plant.copy_to(tmp_path)
    database = tmp_path / "plant.sqlite"
    store = Store.open(url)
    promote(store, train_station(store, history_plant.config, "cooling").model_id)
    service = ScorerService(store, history_plant.config, "cooling")

    store.engine.dispose()
    shutil.move(database, tmp_path / "away.sqlite")  # a new connection finds no plant tables
    assert service.tick() == 0
    status, body = service.state.health()
    assert status == 503 and any("last step failed" in p for p in body["problems"])
    assert "OperationalError" in body["problems"][-1]

    store.engine.dispose()
    database.unlink(missing_ok=True)
    shutil.move(tmp_path / "away.sqlite", database)
    decided = service.tick()
    status, body = service.state.health()
    flags = flags_frame(store, "cooling")
    assert decided > 0 and len(flags) == decided
    assert status == 200 and body["model_id"] is not None and body["pending_sticks"] == 0
    assert service.tick() == 0  # nothing twice
    store.close()


def test_a_sink_claim_deferred_while_the_database_is_away_is_made_or_refused_after(
    history_plant,  # noqa: F811
    tmp_path,
):
    url = history_plant.copy_to(tmp_path)
    database = tmp_path / "plant.sqlite"
    store = Store.open(url)
    promote(store, train_station(store, history_plant.config, "cooling").model_id)
    sink = tmp_path / "flags-cooling.jsonl"
    service = ScorerService(store, history_plant.config, "cooling", sink=sink)
    store.engine.dispose()
    shutil.move(database, tmp_path / "away.sqlite")
    assert service.tick() == 0 and not service.sink_claimed
    store.engine.dispose()
    database.unlink(missing_ok=True)
    shutil.move(tmp_path / "away.sqlite", database)
    decided = service.tick()
    assert decided > 0 and len(sink.read_text().splitlines()) == decided
    assert claimed_sink(store, "cooling") == str(sink)

    other = ScorerService(store, history_plant.config, "straightening", sink=sink)
    assert other.tick() == 0  # cooling's file: refused, the service stops with exit code 1
    assert other.stopping.is_set() and other.exit_code == 1
    assert claimed_sink(store, "straightening") is None
    store.close()
