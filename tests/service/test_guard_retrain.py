"""The retraining daemon answers a scorer's suspension of lock-outs and a count-drift alarm: it
queues a retraining of that station, once per suspension, also across a restart of the daemon,
and a retraining that was wanted but never ran is queued again when the daemon starts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from qcllp.reporting.status import plant_status
from qcllp.retraining.retrain import retrain_station
from qcllp.service import retrainer
from qcllp.service.retrainer import RetrainerService
from qcllp.station.registry import active_model, promote
from qcllp.store import LockoutGuard
from qcllp.store.events import events, record_event


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
    service.queue_retrain = lambda station: queued.append(station) or True
    service.run("ingest")
    assert queued == []  # nothing suspended

    suspend(store, "rolling", model_id, datetime(2026, 11, 20, 8, tzinfo=UTC))
    stopping = RetrainerService(store, config)  # its queue refuses: the daemon is stopping
    stopping.run("ingest")
    assert events(store, ["guard_retrain"]) == []  # not answered: the next start answers it
    service.run("ingest")
    assert queued == ["rolling"]
    (event,) = events(store, ["guard_retrain"])
    assert event["station"] == "rolling" and event["model_id"] == model_id
    assert event["reason"].startswith("retraining queued: lock-out suspended at rolling")
    assert service.metrics.guard_retrains.labels(station="rolling")._value.get() == 1

    service.run("ingest")  # the same suspension: not again
    restarted = RetrainerService(store, config)
    restarted.queue_retrain = lambda station: queued.append(station) or True
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


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_queued_retraining_survives_a_daemon_stopped_before_it_ran(retrain_plant, tmp_path):
    """The queued one-off job is a row of the stored job table, not a memory entry: a daemon
    that stops with it pending (its scheduler never resumed here) finds it due at its restart,
    beside the configured jobs, and queuing a station twice leaves one job. The scheduler's
    last pass after a plain shutdown took the due job as started and ended its thread with an
    error (the warning this test turns into a failure)."""
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    first = retrainer._scheduler(store, config)
    first.start(paused=True)
    retrainer._reconcile_jobs(first, config)
    queue = retrainer._RetrainQueue(first)
    assert queue.put("rolling") and queue.put("rolling")
    queue.close()  # as the daemon stops: no job is added any more
    assert not queue.put("cooling")
    retrainer._shutdown(first, wait=False)

    again = retrainer._scheduler(store, config)
    again.start(paused=True)
    try:
        retrainer._reconcile_jobs(again, config)  # at start: the config's jobs; kept the queued
        ids = sorted(job.id for job in again.get_jobs())
        assert ids == ["ingest", "queued-retrain-rolling", "retrain", "shadow"]
        job = again.get_job("queued-retrain-rolling")
        assert job.args == ("retrain", ["rolling"], True)
        assert job.next_run_time <= datetime.now(UTC)  # due: it runs as the scheduler resumes
    finally:
        retrainer._shutdown(again, wait=False)
        store.close()


def test_a_wanted_retraining_that_never_ran_is_queued_again_at_start(retrain_plant, tmp_path):
    """A count-drift alarm raised while the daemon stopped (its queue refuses), and a
    suspension's job handed to a worker just before a kill (stored, then gone, no training):
    both leave an event no retraining answered, and the next start queues the station -- into
    the stored job table -- until a retraining of that station is recorded."""
    store = retrain_plant.retrained_copy(tmp_path, "rolling")
    config = retrain_plant.dropping("worse", tmp_path, stations=("rolling", "cooling"))
    stopping = RetrainerService(store, config)  # its queue refuses: the daemon is stopping
    stopping.run("ingest")  # defects at three times the rate: the count signal fires
    (wanted,) = events(store, ["drift_retrain"])
    assert (wanted["station"], wanted["outcome"]) == ("rolling", "wanted")
    assert stopping.metrics.drift_alarms.labels(station="rolling")._value.get() == 1

    scheduler = retrainer._scheduler(store, config)
    scheduler.start(paused=True)
    try:
        retrainer._reconcile_jobs(scheduler, config)
        started = RetrainerService(store, config)
        started.queue_retrain = retrainer._RetrainQueue(scheduler).put
        assert started.requeue_unanswered() == ["rolling"]
        job = scheduler.get_job("queued-retrain-rolling")
        assert job.args == ("retrain", ["rolling"], True)
        listed = {j["job"]: j for j in plant_status(store, config)["retrainer"]["jobs"]}
        assert "retraining wanted: count drift of model" in listed["queued-retrain-rolling"]["why"]
        assert listed["retrain"]["why"] is None
    finally:
        retrainer._shutdown(scheduler, wait=False)

    outcome = retrain_station(store, config, "rolling", force=True)  # what that job runs
    assert outcome.outcome in {"promoted", "kept"}, outcome
    queued: list[str] = []
    answered = RetrainerService(store, config)
    answered.queue_retrain = lambda station: queued.append(station) or True
    assert answered.requeue_unanswered() == [] and queued == []

    suspend(store, "rolling", active_model(store, "rolling")["id"], datetime.now(UTC))
    answered.run("ingest")  # the suspension's job is stored; a kill then loses it in a worker
    assert queued == ["rolling"] and len(events(store, ["guard_retrain"])) == 1
    restarted = RetrainerService(store, config)
    restarted.queue_retrain = lambda station: queued.append(station) or True
    assert restarted.requeue_unanswered() == ["rolling"]
    assert restarted.requeue_unanswered() == ["rolling"]  # until a retraining answers it
    assert retrain_station(store, config, "rolling", force=True).outcome in {"promoted", "kept"}
    assert restarted.requeue_unanswered() == []  # answered
    store.close()


def test_a_want_is_answered_by_a_retraining_that_saw_it_not_by_one_that_ends_after_it(
    retrain_plant, tmp_path
):
    """An alarm written while the station's training runs (that training read the charges
    before it): the training ends after the want but does not answer it. A forced retraining
    that skips for too few labeled charges does answer it (nothing more to do)."""
    store = retrain_plant.copy_to(tmp_path)
    config = retrain_plant.config
    service = RetrainerService(store, config)
    queued: list[str] = []
    service.queue_retrain = lambda station: queued.append(station) or True

    said: list[str] = []

    def alarm_midway(message: str) -> None:  # the training's first progress line
        if not said:
            said.append(message)
            record_event(store, "drift_retrain", "wanted", "alarm midway", station="rolling")

    midway = retrain_station(store, config, "rolling", progress=alarm_midway)
    assert midway.outcome == "promoted"
    (trained,) = events(store, ["trained"], station="rolling")
    (wanted,) = events(store, ["drift_retrain"], station="rolling")
    assert trained["id"] > wanted["id"] and "answers" not in trained["detail"]
    assert service.requeue_unanswered() == ["rolling"]

    too_few = replace(config, retrainer=replace(config.retrainer, min_holdout_charges=10_000))
    skipped = retrain_station(store, too_few, "rolling", force=True)
    assert skipped.outcome == "skipped" and "too few" in skipped.reason
    assert service.requeue_unanswered() == [] and queued == ["rolling"]
    store.close()
