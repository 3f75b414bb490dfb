"""The retraining daemon's jobs in-process when the database goes away and comes back: the
attempt is retried with backoff, fails visibly (``/healthz`` 503 naming the error, a failed
job counted), stores nothing and forgets no file; after the return the next run ingests every
file, raises the drift alarm the new counts call for and queues the retraining."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from qcllp.plant.config import Connectors, FileConnector
from qcllp.service import retrainer
from qcllp.service.retrainer import RetrainerService
from qcllp.station.registry import list_models
from qcllp.store import IngestionBatch
from qcllp.store.events import events


def test_a_database_away_is_retried_reported_and_caught_up_after(
    retrain_plant, tmp_path, monkeypatch
):
    monkeypatch.setattr(retrainer, "_BACKOFF_S", (0.05, 0.1))
    store = retrain_plant.retrained_copy(tmp_path, "rolling")
    database = tmp_path / "plant.sqlite"
    config = retrain_plant.dropping("worse", tmp_path, stations=("rolling",))
    service = RetrainerService(store, config)
    queued: list[str] = []
    service.queue_retrain = lambda station: queued.append(station) or True

    store.engine.dispose()
    shutil.move(database, tmp_path / "away.sqlite")  # a new connection finds no plant tables
    service.run("ingest")
    status, body = service.state.health()
    assert status == 503 and "ingest: OperationalError" in body["problems"][0]
    assert service.metrics.jobs.labels(job="ingest", outcome="failed")._value.get() == 1
    assert "failed" in body["last_runs"]["ingest"]

    store.engine.dispose()
    database.unlink(missing_ok=True)
    shutil.move(tmp_path / "away.sqlite", database)
    service.run("ingest")
    status, body = service.state.health()
    assert status == 200, body
    assert store.count(IngestionBatch) == 2 + 2  # the history's two files and the two new ones
    assert queued == ["rolling"]  # defects at three times the rate: the count signal fired
    service.run("ingest")  # nothing new: nothing read again, nothing queued again
    assert store.count(IngestionBatch) == 4 and queued == ["rolling"]
    store.close()


@pytest.mark.slow
def test_a_retraining_while_the_database_is_away_fails_and_the_next_one_trains_every_station(
    retrain_plant, tmp_path, monkeypatch
):
    monkeypatch.setattr(retrainer, "_BACKOFF_S", (0.05,))
    store = retrain_plant.copy_to(tmp_path)
    database = tmp_path / "plant.sqlite"
    service = RetrainerService(store, retrain_plant.config)
    store.engine.dispose()
    shutil.move(database, tmp_path / "away.sqlite")
    service.run("retrain")
    status, body = service.state.health()
    assert status == 503 and body["problems"][0].startswith("last attempt failed: retrain:")
    store.engine.dispose()
    database.unlink(missing_ok=True)
    shutil.move(tmp_path / "away.sqlite", database)
    assert list_models(store) == []  # nothing was registered while it was away
    service.run("retrain")
    assert service.state.health()[0] == 200
    decided = {e["model_id"] for e in events(store, ["promotion"], limit=100)}
    models = list_models(store)
    assert {m["station"] for m in models} == set(retrain_plant.config.station_names)
    assert {m["id"] for m in models} == decided  # every candidate judged, none half-registered
    store.close()


def test_an_input_that_keeps_failing_is_one_error_and_one_event_until_it_recovers(
    retrain_plant, tmp_path, caplog
):
    store = retrain_plant.copy_to(tmp_path)
    drop = tmp_path / "drop"  # not there yet: the export share is not mounted
    config = replace(
        retrain_plant.config,
        connectors=Connectors(
            measurements=FileConnector(str(drop / "measurements"), pattern="*.csv")
        ),
        retrainer=replace(retrain_plant.config.retrainer, stations=("rolling",)),
    )
    service = RetrainerService(store, config)
    caplog.set_level("INFO", logger="qcllp.retrainer")

    def lines(event: str) -> int:
        return sum(f'"event": "{event}"' in r.getMessage() for r in caplog.records)

    def ingest_events() -> list[dict]:
        return [e for e in events(store, ["job"], limit=100) if e["detail"].get("job") == "ingest"]

    for _ in range(3):
        service.run("ingest")
    assert lines("ingest_failed") == 1 and len(ingest_events()) == 1
    assert service.metrics.inputs_failing._value.get() == 1
    shutil.copytree(retrain_plant.later("worse") / "measurements", drop / "measurements")
    service.run("ingest")
    assert lines("ingest_recovered") == 1 and lines("ingest_failed") == 1
    assert service.metrics.inputs_failing._value.get() == 0
    assert [e["outcome"] for e in ingest_events()] == ["ok", "failed"]  # newest first
    store.close()
