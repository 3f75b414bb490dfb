"""The sink's rotation under ``kill -9``: a scorer process whose sink rotates every few flags
(``scorer.sink_max_bytes`` of about ten lines, steps of 40 sticks), killed at random moments
while charges arrive. In the end the rotated files and the current one hold every flag of the
database exactly once, in flag order, and no ``sink_truncated`` alarm was raised (a rotation
is not a truncation)."""

from __future__ import annotations

import json
import random
import time

import pytest

from qcllp.scoring.flag_sink import FlagSink
from tests.service.scorer_plant import (
    Plant,
    all_flagged,
    make_plant,
    wait_until,
)

KILLS = 5


@pytest.fixture
def rotating_plant(tmp_path, history) -> Plant:
    def rotating(raw: dict) -> None:
        raw["scorer"]["sink_max_bytes"] = 3_000
        raw["scorer"]["max_batch_sticks"] = 40  # small steps: a rotation every step or two

    built = make_plant(tmp_path, history, edit=rotating)
    yield built
    built.store.close()


@pytest.mark.slow
def test_a_rotating_sink_killed_at_random_moments_holds_each_flag_once_in_order(
    rotating_plant,
    start_scorer,
):
    plant, rng = rotating_plant, random.Random(20261127)
    sink = FlagSink(plant.folder / "flags-cooling.jsonl")
    plant.feed(3)
    for _ in range(KILLS):
        scorer = start_scorer(plant, sink=sink.path)
        scorer.wait_up()
        plant.feed(rng.randint(2, 4))
        time.sleep(rng.uniform(0.0, 0.8))
        scorer.kill9()
    final = start_scorer(plant, sink=sink.path)
    final.wait_stepped()  # its SIGTERM handler in place: the sticks may all be flagged already
    wait_until(lambda: all_flagged(plant), what="every fed stick flagged", procs=[final])
    assert final.terminate() == 0, final.log()
    files = [*sink.rotated(), sink.path]
    assert len(files) > 5
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    flags = plant.flags()
    assert [(r["charge_id"], r["stick_id"]) for r in records] == list(
        zip(flags["charge_id"], flags["stick_id"], strict=True)
    )
    assert "sink_truncated" not in set(plant.alarms()["kind"])
