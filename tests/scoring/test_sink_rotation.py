"""The sink file rotates by itself: once its committed flags fill ``scorer.sink_max_bytes`` it
is moved aside as ``<file>.<id of its last flag>`` and a new one started, every flag in exactly
one file, no alarm; a step that died between the rename and its commit is recognized by that
name at the next step, and nothing is cut that was committed."""

from __future__ import annotations

import json
from dataclasses import replace

from qcllp.scoring.flag_sink import FlagSink
from qcllp.scoring.step import flags_frame, score_step
from qcllp.station.registry import load_model, promote
from qcllp.store import Alarm

LINES = [json.dumps({"flag": i}) for i in range(40)]


def test_a_full_sink_is_moved_aside_under_its_last_flag_and_an_empty_one_started(tmp_path):
    sink = FlagSink(tmp_path / "flags.jsonl")
    committed = sink.append(LINES[:10])
    assert sink.prepare(committed, 10, max_bytes=committed + 1) == (committed, None)  # not full
    assert sink.prepare(committed, 10, max_bytes=committed) == (0, None)
    assert sink.rotated() == [tmp_path / "flags.jsonl.10"]
    assert (tmp_path / "flags.jsonl.10").read_text().splitlines() == LINES[:10]
    assert sink.path.read_bytes() == b""


def test_a_rotation_a_dead_step_did_not_commit_is_finished_without_an_alarm(tmp_path):
    sink = FlagSink(tmp_path / "flags.jsonl")
    committed = sink.append(LINES[:10])
    sink.append(['{"uncommitted": 1}'])  # the step that rotates died twice over
    assert sink.prepare(committed, 10, max_bytes=1) == (0, None)
    sink.append(LINES[10:12])  # ... appended to the new file, and died before its commit
    # the next step still has the old checkpoint: it finds the rotated file under its cursor
    assert sink.prepare(committed, 10, max_bytes=1) == (0, None)
    assert sink.path.read_bytes() == b""
    assert (tmp_path / "flags.jsonl.10").read_text().splitlines() == LINES[:10]


def test_only_the_newest_rotated_files_are_kept(tmp_path):
    sink = FlagSink(tmp_path / "flags.jsonl")
    offset, cursor = 0, 0
    for start in range(0, 40, 5):
        offset, _ = sink.prepare(offset, cursor, max_bytes=1, keep=3)
        offset, cursor = sink.append(LINES[start : start + 5]), start + 5
    assert [p.name for p in sink.rotated()] == [f"flags.jsonl.{n}" for n in (25, 30, 35)]


def test_a_scorer_rotating_every_few_flags_delivers_each_flag_once_in_order(
    store, history_plant, tmp_path
):
    config = replace(history_plant.config, path=tmp_path / "plant.yaml")
    config = replace(config, scorer=replace(config.scorer, sink_max_bytes=2_000))
    history_plant.ingest_into(store, config)
    promote(store, history_plant.record_trained(store, config, "cooling"))
    loaded = load_model(store, station="cooling")
    sink = FlagSink(tmp_path / "flags-cooling.jsonl")
    written, steps, given = 0, 0, sink.path
    while True:  # as the service: small steps until nothing more is due
        step = score_step(store, config, "cooling", loaded, sink=given, max_sticks=7,
                          assume_complete=True)  # fmt: skip
        written, steps, given = written + step.flags_written, steps + 1, None
        if not (step.more or step.batches_taken):
            break
    assert written > 30 and steps > 5
    files = [*sink.rotated(), sink.path]
    assert len(files) > 3
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    flags = flags_frame(store, "cooling")
    assert [(x["charge_id"], x["stick_id"]) for x in lines] == list(
        zip(flags["charge_id"], flags["stick_id"], strict=True)
    )
    with store.engine.connect() as conn:
        assert conn.execute(Alarm.__table__.select()).first() is None
