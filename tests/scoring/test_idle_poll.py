"""A scorer's poll looks without the writer lock: idle exactly when the full step would find
nothing to do, and the full step runs for every kind of work (qcllp.scoring.idle_poll)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pandas as pd
import pytest

from qcllp.ingest.inspections import ingest_inspections
from qcllp.scoring.idle_poll import idle_step
from qcllp.scoring.step import score_step
from qcllp.service.scorer import ScorerService
from qcllp.station.registry import load_model, promote
from qcllp.store import Store

STATION = "straightening"  # the last station: only the settle time completes a stick


@pytest.fixture
def line(history_plant, tmp_path):
    """A private SQLite copy of the plant with an active straightening model, the fresh
    charges' arrival time, the loaded model and the station's settle time."""
    store = Store.open(history_plant.copy_to(tmp_path))
    promote(store, history_plant.record_trained(store, history_plant.config, STATION))
    [(arrived,)] = store.execute_sql(
        "SELECT max(finished_at) FROM ingestion_batches WHERE kind = 'measurements'"
    )
    arrived = pd.Timestamp(arrived, tz="UTC").to_pydatetime()
    settle = timedelta(seconds=history_plant.config.station(STATION).settle_s)
    yield store, history_plant.config, arrived, settle, load_model(store, station=STATION)
    store.close()


def test_a_poll_is_idle_only_between_the_steps_that_have_work(line, tmp_path):
    store, config, arrived, settle, model = line
    early, late = arrived + settle / 2, arrived + settle + timedelta(seconds=1)
    assert idle_step(store, STATION, model, early) is None  # no checkpoint: the first step
    step = score_step(store, config, STATION, model, now=early, sink=tmp_path / "flags.jsonl")
    assert step.pending > 0 and step.scores.empty
    idle = idle_step(store, STATION, model, early)
    assert idle is not None and idle.scores.empty and not idle.more
    assert (idle.pending, idle.lag_s, idle.model_id) == (step.pending, step.lag_s, model.id)
    assert idle.guard == step.guard
    assert idle_step(store, STATION, model, late) is None  # the pending sticks are due
    assert idle_step(store, STATION, None, early) is None  # the checkpoint names the model
    done = score_step(store, config, STATION, model, now=late)
    assert len(done.scores) == step.pending and done.sink_lines == len(done.scores)
    idle = idle_step(store, STATION, model, late)
    assert idle is not None and idle.pending == 0 and idle.lag_s == 0


def test_due_sticks_are_work_only_for_a_station_with_a_model_to_decide_them(line):
    store, config, arrived, settle, model = line
    early, late = arrived + settle / 2, arrived + settle + timedelta(seconds=1)
    taken = score_step(store, config, STATION, None, now=early)  # no model: taken in only
    assert taken.pending > 0 and taken.scores.empty
    idle = idle_step(store, STATION, None, late)  # due, but a step would decide none
    assert idle is not None and idle.pending == taken.pending
    assert idle_step(store, STATION, None, late, shadow=model) is None  # a shadow decides them


def test_a_poll_sends_a_sink_that_is_behind_or_past_its_offset_to_the_full_step(line, tmp_path):
    store, config, arrived, settle, model = line
    now = arrived + settle + timedelta(seconds=1)
    sink = tmp_path / "flags.jsonl"
    score_step(store, config, STATION, model, now=now, sink=sink)
    assert idle_step(store, STATION, model, now) is not None
    committed = sink.read_bytes()
    sink.write_bytes(committed + b'{"flag_id": 99999, "stick')  # a killed step's lines
    assert idle_step(store, STATION, model, now) is None
    assert score_step(store, config, STATION, model, now=now).sink_lines == 0
    assert sink.read_bytes() == committed and idle_step(store, STATION, model, now)
    _write(store, f"UPDATE scorer_checkpoints SET sink_flag_id = 0 WHERE station = '{STATION}'")
    assert idle_step(store, STATION, model, now) is None  # flags above the sink's cursor


def test_a_poll_sends_a_new_batch_or_inspection_to_the_full_step(line, tmp_path):
    store, config, arrived, settle, model = line
    now = arrived + settle + timedelta(seconds=1)
    decided = score_step(store, config, STATION, model, now=now).scores
    assert idle_step(store, STATION, model, now) is not None
    charge, stick = decided.iloc[0][["charge_id", "stick_id"]]
    csv = tmp_path / "bay.csv"
    csv.write_text(f"station,charge_id,stick_id,result\n{STATION},{charge},{stick},ok\n")
    assert ingest_inspections(store, config, csv).stored == 1
    assert idle_step(store, STATION, model, now) is None  # a batch after the checkpoint
    step = score_step(store, config, STATION, model, now=now)
    assert step.batches_taken == 1 and step.guard.inspect_id > 0  # taken in by the guard
    assert idle_step(store, STATION, model, now) is not None
    _write(store, f"UPDATE lockout_guards SET inspect_id = 0 WHERE station = '{STATION}'")
    assert idle_step(store, STATION, model, now) is None  # an inspection not taken in


def test_a_poll_reads_while_another_connection_holds_the_writer_lock(line):
    store, config, arrived, settle, model = line
    now = arrived + settle + timedelta(seconds=1)
    score_step(store, config, STATION, model, now=now)
    looked = []
    with store.write():  # the intake's batch, say: BEGIN IMMEDIATE, held
        poll = threading.Thread(target=lambda: looked.append(idle_step(store, STATION, model, now)))
        poll.start()
        poll.join(timeout=10)  # a poll waiting for the lock waits the busy timeout (60 s)
        assert not poll.is_alive() and looked[0] is not None


def test_an_idle_sqlite_scorer_leaves_its_checkpoint_alone_between_full_steps(line):
    store, config, *_ = line
    service = ScorerService(store, config, STATION)
    service.tick()  # the first poll is a full step: it decides the due sticks
    query = f"SELECT commit_seq, updated_at FROM scorer_checkpoints WHERE station = '{STATION}'"
    [first] = store.execute_sql(query)
    assert service.tick() == 0 and service.tick() == 0
    assert store.execute_sql(query) == [first]  # idle polls: no write
    service._full_step_at -= 60  # the last full step long ago: the next poll steps
    assert service.tick() == 0
    [(seq, updated_at)] = store.execute_sql(query)
    assert seq == first[0] and updated_at > first[1]


def _write(store: Store, sql: str) -> None:
    """One statement of the test's own, committed (what the repair would put right)."""
    with store.write() as conn:
        conn.exec_driver_sql(sql)
