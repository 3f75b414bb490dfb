"""The scorer service in-process when its database goes away and comes back: the step fails,
``/healthz`` says why, nothing is decided twice, and the next tick after the return catches up."""

from __future__ import annotations

import shutil
from pathlib import Path

from qcllp.scoring.flag_sink import claimed_sink
from qcllp.scoring.step import flags_frame
from qcllp.service.scorer import ScorerService
from qcllp.station.registry import promote
from qcllp.store import Store
from tests.support.plants import (
    fast_config,  # noqa: F401 (fixture)
    history_plant,  # noqa: F401 (fixture)
)


def _cooling_scorer(history_plant, tmp_path, **options) -> tuple[Store, ScorerService]:  # noqa: F811
    """A copy of the history plant with a promoted cooling model and its scorer (in-process)."""
    store = Store.open(history_plant.copy_to(tmp_path))
    promote(store, history_plant.record_trained(store, history_plant.config, "cooling"))
    return store, ScorerService(store, history_plant.config, "cooling", **options)


def _take_away(store: Store, database: Path) -> None:
    """The database file moved away: a new connection finds no plant tables."""
    store.engine.dispose()
    shutil.move(database, database.with_name("away.sqlite"))


def _bring_back(store: Store, database: Path) -> None:
    """The database file back where it was (the empty file a connection made meanwhile gone)."""
    store.engine.dispose()
    database.unlink(missing_ok=True)
    shutil.move(database.with_name("away.sqlite"), database)


def test_a_database_away_fails_the_step_visibly_and_the_scorer_catches_up_after(
    history_plant,  # noqa: F811
    tmp_path,
):
    database = tmp_path / "plant.sqlite"
    store, service = _cooling_scorer(history_plant, tmp_path)
    _take_away(store, database)
    assert service.tick() == 0
    status, body = service.state.health()
    assert status == 503 and any("last step failed" in p for p in body["problems"])
    assert "OperationalError" in body["problems"][-1]
    assert steps_completed(service) == 0  # what alert ScorerStalled watches stands still

    _bring_back(store, database)
    decided = service.tick()
    status, body = service.state.health()
    flags = flags_frame(store, "cooling")
    assert decided > 0 and len(flags) == decided
    assert status == 200 and body["model_id"] is not None and body["pending_sticks"] == 0
    assert service.tick() == 0  # nothing twice
    assert steps_completed(service) >= 1  # an idle look after it is no step
    store.close()


def steps_completed(service: ScorerService) -> float:
    """The scorer's ``qcllp_scorer_step_seconds_count``: the steps that completed."""
    registry = service.metrics.registry
    return registry.get_sample_value("qcllp_scorer_step_seconds_count", {"station": "cooling"})


def test_a_sink_claim_deferred_while_the_database_is_away_is_made_or_refused_after(
    history_plant,  # noqa: F811
    tmp_path,
):
    database = tmp_path / "plant.sqlite"
    sink = tmp_path / "flags-cooling.jsonl"
    store, service = _cooling_scorer(history_plant, tmp_path, sink=sink)
    _take_away(store, database)
    assert service.tick() == 0 and not service.sink_claimed
    _bring_back(store, database)
    decided = service.tick()
    assert decided > 0 and len(sink.read_text().splitlines()) == decided
    assert claimed_sink(store, "cooling") == str(sink)

    other = ScorerService(store, history_plant.config, "straightening", sink=sink)
    assert other.tick() == 0  # cooling's file: refused, the service stops with exit code 1
    assert other.stopping.is_set() and other.exit_code == 1
    assert claimed_sink(store, "straightening") is None
    store.close()
