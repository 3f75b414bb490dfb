"""The station's sink file for the line's PLC/MES gateway, with real scorer processes, real
files, a real full disk (a small tmpfs) and real signals.

* a step that fails part-way into a new sink (disk full) or is killed between its append and
  its commit leaves, after the restart, exactly one complete line per flag;
* a sink belongs to one station, and a station has one sink: a scorer given another
  station's file or a second file of its own station refuses to start, naming the owner;
  ``qcllp sink move`` moves a station's flags to another file, each flag in one of the two;
* ``qcllp score`` delivers its flags to the station's sink;
* SIGTERM stops a scorer draining a backlog after the step it is in.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from qcllp.plant.config import load_plant_config
from tests.service.forked import run_qcllp
from tests.service.harness import ServiceProcess
from tests.service.scorer_plant import (
    ROOT,
    STATION,
    Plant,
    Scorer,
    all_flagged,
    assert_one_flag_per_fed_stick,
    assert_sink_holds_each_flag_once,
    sink_records,
    wait_until,
)

OTHER_STATION = "straightening"


def cli(plant: Plant, *args: str) -> subprocess.CompletedProcess:
    """``qcllp --config ... --db ... <args>`` in a process of its own."""
    command = ["--config", str(plant.config_path), "--db", plant.url, *args]
    return run_qcllp(command, cwd=plant.folder)


def refused(scorer: ServiceProcess, timeout: float = 30.0) -> str:
    """The scorer exits 1 without starting; its one line of output."""
    try:
        code = scorer.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the scorer started:\n{scorer.log()}") from None
    lines = scorer.log().strip().splitlines()
    assert code == 1, scorer.log()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# ----------------------------------------------------------------------------- 5. disk full
@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 64 KiB tmpfs (a real file system that fills up; root only), unmounted after."""
    mount = tmp_path / "gateway"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)])
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_in_the_first_step_into_a_new_sink_leaves_no_torn_or_repeated_line(
    plant, start_scorer, small_disk
):
    sink = small_disk / "flags-cooling.jsonl"
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (56 * 1024))  # 8 KiB left: the step's ~18 KB do not fit
    fed = plant.feed(6)
    assert len(fed) * 200 > 8 * 1024
    scorer = start_scorer(plant, sink=sink)
    wait_until(
        lambda: "No space left" in str(scorer.body().get("problems")),
        what="a step failing on the full disk",
        procs=[scorer],
    )
    assert plant.flags().empty  # nothing of the failed step committed
    # each retry cuts back to the claimed offset what the failed append left, and fails again
    ballast.unlink()  # space freed: the next tick goes on
    wait_until(lambda: all_flagged(plant), what="every stick flagged", procs=[scorer])
    assert scorer.terminate() == 0, scorer.log()
    assert_one_flag_per_fed_stick(plant)
    records = assert_sink_holds_each_flag_once(plant, sink)  # no torn line, none twice
    assert len(records) == len(fed)


# ----------------------------------------------------------------------------- 5. kill -9
class HeldScorer(Scorer):
    """A scorer whose first append of lines stops before the commit (``sink_hold``)."""

    def __init__(self, plant: Plant, *, sink: Path, marker: Path):
        self.marker = marker
        serve_args = ["scorer", "--station", STATION, "--sink", str(sink)]
        super(Scorer, self).__init__(
            ["--config", str(plant.config_path), "--db", plant.url],
            serve_args,
            folder=plant.folder,
            name="held-scorer",
            module="tests.service.sink_hold",
            env={"QCLLP_TEST_HOLD_MARKER": str(marker), "PYTHONPATH": str(ROOT)},
        )


@pytest.mark.parametrize("case", ["new sink", "moved sink"])
def test_kill_9_between_the_first_append_to_a_sink_and_its_commit_repeats_no_flag(
    plant, start_scorer, case
):
    sink = plant.folder / "flags-cooling.jsonl"
    if case == "moved sink":  # the station wrote to another file before
        old = plant.folder / "old-flags-cooling.jsonl"
        first = start_scorer(plant, sink=old)
        plant.feed(2)
        wait_until(lambda: all_flagged(plant), what="the first feed flagged", procs=[first])
        assert first.terminate() == 0
        moved = cli(plant, "sink", "move", "--station", STATION, "--to", str(sink))
        assert moved.returncode == 0, moved.stderr
    before = len(plant.flags())
    plant.feed(4)
    held = HeldScorer(plant, sink=sink, marker=plant.folder / "held")
    try:
        wait_until(held.marker.exists, what="the append before the commit", procs=[held])
        assert sink.stat().st_size == int(held.marker.read_text()) > 0
        assert len(plant.flags()) == before  # appended, not committed
        held.kill9()
    finally:
        held.stop_if_running()
    again = start_scorer(plant, sink=sink)
    wait_until(lambda: all_flagged(plant), what="every stick flagged", procs=[again])
    assert again.terminate() == 0, again.log()
    assert_one_flag_per_fed_stick(plant)
    if case == "new sink":
        assert len(assert_sink_holds_each_flag_once(plant, sink)) == len(plant.expected)
    else:  # each flag in exactly one of the two files, the later ones in the new one
        old_records, records = sink_records(old), sink_records(sink)
        keys = [(r["charge_id"], r["stick_id"]) for r in old_records + records]
        assert len(keys) == len(set(keys)) == len(plant.expected)
        assert set(keys) == plant.flagged() and len(old_records) == before


# ----------------------------------------------------------------------------- 6. ownership
def test_a_sink_another_station_writes_to_is_refused_naming_that_station(plant, start_scorer):
    sink = plant.folder / "flags.jsonl"
    cooling = start_scorer(plant, sink=sink)
    cooling.wait_stepped()
    other = ServiceProcess(
        ["--config", str(plant.config_path), "--db", plant.url],
        ["scorer", "--station", OTHER_STATION, "--sink", str(sink)],
        folder=plant.folder,
        name="straightening-scorer",
    )
    try:
        line = refused(other)
    finally:
        other.stop_if_running()
    assert str(sink) in line and f"belongs to station {STATION}" in line, line
    moved = cli(plant, "sink", "move", "--station", OTHER_STATION, "--to", str(sink))
    assert moved.returncode == 1 and moved.stdout == "", moved
    assert moved.stderr.count("\n") == 1 and f"belongs to station {STATION}" in moved.stderr

    fed = plant.feed(3)  # cooling's scorer went on undisturbed
    wait_until(lambda: fed <= plant.flagged(), what="the feed flagged", procs=[cooling])
    assert cooling.terminate() == 0
    assert_sink_holds_each_flag_once(plant, sink)


def test_a_second_file_for_one_station_is_refused_until_the_sink_is_moved(plant, start_scorer):
    sink, elsewhere = plant.folder / "flags-cooling.jsonl", plant.folder / "b" / "flags.jsonl"
    first = start_scorer(plant, sink=sink)
    first.wait_stepped()
    line = refused(start_scorer(plant, sink=elsewhere))
    assert f"writes its flags to {sink}, not {elsewhere}" in line
    assert f"qcllp sink move --station {STATION} --to {elsewhere}" in line
    early = plant.feed(2)
    wait_until(lambda: early <= plant.flagged(), what="the first feed flagged", procs=[first])

    moved = cli(plant, "sink", "move", "--station", STATION, "--to", str(elsewhere))
    assert moved.returncode == 0 and str(elsewhere) in moved.stdout, moved
    late = plant.feed(3)  # the running scorer follows the move at its next step
    wait_until(lambda: late <= plant.flagged(), what="the second feed flagged", procs=[first])
    assert first.terminate() == 0
    refused_old = refused(start_scorer(plant, sink=sink))
    assert f"writes its flags to {elsewhere}" in refused_old
    in_old = {(r["charge_id"], r["stick_id"]) for r in map(json.loads, sink.open())}
    in_new = {(r["charge_id"], r["stick_id"]) for r in map(json.loads, elsewhere.open())}
    assert in_old == early and in_new == late  # each flag in exactly one of the two
    assert_one_flag_per_fed_stick(plant)


# ----------------------------------------------------------------------------- 7. qcllp score
def test_qcllp_score_delivers_its_flags_to_the_stations_sink(plant, start_scorer):
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    early = plant.feed(2)
    wait_until(lambda: early <= plant.flagged(), what="the service's flags", procs=[scorer])
    assert scorer.terminate() == 0
    late = plant.feed(3)
    scored = cli(plant, "score", "--station", STATION)  # no --sink: the station's own
    assert scored.returncode == 0, scored.stderr
    assert f"{len(late)} flags written, {len(late)} lines appended to {sink}" in scored.stdout
    assert_one_flag_per_fed_stick(plant)
    assert len(assert_sink_holds_each_flag_once(plant, sink)) == len(early | late)


def test_qcllp_score_says_plainly_when_a_station_has_no_sink_and_its_first_sink_gets_them(
    plant, start_scorer
):
    fed = plant.feed(2)
    scored = cli(plant, "score", "--station", STATION)
    assert scored.returncode == 0, scored.stderr
    assert f"{STATION} has no sink: the flags are in the database only" in scored.stdout
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    scorer.wait_stepped()
    wait_until(lambda: sink.exists() and sink.stat().st_size > 0, what="the flags delivered")
    assert scorer.terminate() == 0
    assert len(assert_sink_holds_each_flag_once(plant, sink)) == len(fed)


# ----------------------------------------------------------------------------- 8. SIGTERM
def test_sigterm_stops_a_scorer_draining_a_backlog_after_its_current_step(plant, start_scorer):
    original = plant.config_path.read_text()
    raw = yaml.safe_load(original)
    raw["scorer"]["max_batch_sticks"] = 1  # one stick per step: hundreds of steps
    plant.config_path.write_text(yaml.safe_dump(raw))
    plant.config = load_plant_config(plant.config_path)
    for _ in range(4):
        plant.feed(10)  # ~480 sticks waiting before the scorer starts
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    wait_until(
        lambda: sum(e["event"] == "step" for e in scorer.events()) >= 20,
        what="the backlog being drained",
        procs=[scorer],
    )
    sent = time.monotonic()
    assert scorer.terminate(timeout=60) == 0, scorer.log()
    took = time.monotonic() - sent
    left = len(plant.expected) - len(plant.flagged())
    assert took < 3.0, f"{took:.1f} s from SIGTERM to exit"
    assert left > 100, f"the backlog was drained ({left} left): SIGTERM waited for it"
    events = [e["event"] for e in scorer.events()]
    after = events[events.index("stopping") + 1 :]
    assert after[-1] == "stopped" and after.count("step") <= 1, after  # the one it was in
    assert_sink_holds_each_flag_once(plant, sink)

    plant.config_path.write_text(original)  # the restart drains the rest in ordinary steps
    plant.config = load_plant_config(plant.config_path)
    again = start_scorer(plant, sink=sink)
    wait_until(lambda: all_flagged(plant), what="the rest after a restart", procs=[again])
    assert again.terminate() == 0, again.log()
    assert_one_flag_per_fed_stick(plant)
    assert len(assert_sink_holds_each_flag_once(plant, sink)) == len(plant.expected)
