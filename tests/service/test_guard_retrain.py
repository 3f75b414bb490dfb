"""The retraining daemon answers a scorer's suspension of lock-outs: it queues a retraining of
that station, once per suspension, also across a restart of the daemon."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from qcllp.pipeline.events import events
from qcllp.pipeline.registry import active_model, promote
from qcllp.pipeline.retrain import retrain_station
from qcllp.service.retrainer import RetrainerService
from qcllp.store import LockoutGuard


def suspend(store, station: str, model_id: int, at: datetime) -> None:
    """The row a station scorer writes when its lock-out guard trips."""
    with store.engine.begin() as conn:
        conn.execute(
            LockoutGuard.__table__.insert().values(
                station=station,
                model_id=model_id,
                decided=900,
                locked=80,
                suspended_at=at,
                reason=f"lock-out suspended at {station}: final QC found fewer failures",
            )
        )


def test_a_suspended_model_queues_one_retraining_per_suspension(retrain_plant, tmp_path):
    store = retrain_plant.copy_to(tmp_path)
    config = replace(
        retrain_plant.config,
        retrainer=replace(retrain_plant.config.retrainer, stations=("rolling", "cooling")),
    )
    assert retrain_station(store, config, "rolling").outcome == "promoted"
    model_id = active_model(store, "rolling")["id"]
    service = RetrainerService(store, config)
    queued: list[str] = []
    service.queue_retrain = queued.append
    service.run("ingest")
    assert queued == []  # nothing suspended

    suspend(store, "rolling", model_id, datetime(2026, 11, 20, 8, tzinfo=UTC))
    service.run("ingest")
    assert queued == ["rolling"]
    (event,) = events(store, ["guard_retrain"])
    assert event["station"] == "rolling" and event["model_id"] == model_id
    assert event["reason"].startswith("retraining queued: lock-out suspended at rolling")
    assert service.metrics.guard_retrains.labels(station="rolling")._value.get() == 1

    service.run("ingest")  # the same suspension: not again
    restarted = RetrainerService(store, config)
    restarted.queue_retrain = queued.append
    restarted.run("ingest")  # nor after a restart
    assert queued == ["rolling"]

    # the operator lifts it (promotes the model again); it trips again later: a new retraining
    promote(store, model_id)
    restarted.run("ingest")
    assert queued == ["rolling"]
    suspend(store, "rolling", model_id, datetime(2026, 11, 20, 8, tzinfo=UTC) + timedelta(days=3))
    restarted.run("ingest")
    assert queued == ["rolling", "rolling"]
    assert len(events(store, ["guard_retrain"])) == 2
    store.close()
