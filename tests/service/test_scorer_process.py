"""The station scorer as the plant runs it: ``qcllp serve scorer`` in a process of its own.

Every test starts real processes (``python -m qcllp.cli ... serve scorer``) against a real
database file (SQLite, PostgreSQL where noted), feeds fresh charges by in-process ingestion
while the service runs, talks HTTP to its ``/healthz`` and ``/metrics`` on 127.0.0.1 and stops
it with real signals (``SIGKILL``, ``SIGTERM``, ``SIGSTOP``/``SIGCONT``). The plant and its
fixtures: :mod:`tests.service.scorer_plant`.

The kill test sends 5 SIGKILLs in the default run and ``QCLLP_SCORER_KILLS`` (default 20, the
issue's minimum) in the slow run CI makes (``pytest -m slow``; each kill costs a restart of
about a second), at moments drawn from a seeded generator (``QCLLP_SCORER_KILL_SEED``, default
20260105).
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from qcllp.cli import main
from qcllp.station.registry import artifact_location, get_model, promote
from tests.service.scorer_plant import (
    KILL_SEED,
    KILLS,
    LATER_STATION,
    STATION,
    UNCOMMITTED_LINE,
    all_flagged,
    assert_one_flag_per_fed_stick,
    assert_sink_holds_each_flag_once,
    make_plant,
    paused,
    report_no_failures,
    start_locking_every_stick,
    wait_until,
)


@pytest.mark.parametrize(
    "n_kills", [pytest.param(5, id="5"), pytest.param(KILLS, id="full", marks=pytest.mark.slow)]
)
def test_kill_9_at_random_moments_loses_no_flag_and_writes_none_twice(
    plant, start_scorer, capsys, n_kills
):
    rng = random.Random(KILL_SEED)
    sink = plant.folder / "flags-cooling.jsonl"
    plant.feed(3)  # waiting before the first start
    kills = torn = outstanding = 0
    left = 0  # sink size when the last scorer was started
    for round_ in range(n_kills):
        scorer = start_scorer(plant, sink=sink)
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.1, 2.5))  # during start-up or its first steps
        else:
            scorer.wait_up()
            plant.feed(rng.randint(2, 4))
            time.sleep(rng.uniform(0.0, 0.6))  # somewhere in taking in / deciding / writing
        assert scorer.proc.poll() is None, scorer.log()
        scorer.kill9()
        kills += 1
        outstanding += plant.flagged() != plant.expected
        size = sink.stat().st_size if sink.exists() else 0
        if size > plant.checkpoint_offset() and size != left:
            torn += 1  # killed between the sink's fsync and the commit
        if round_ == 1:  # as if killed in the middle of writing a line
            with open(sink, "ab") as fh:
                fh.write(b'{"station":"cooling","charge_id":"CH0000')
        if round_ == 2:  # as if killed after writing whole lines, before the commit
            lines = sink.read_bytes().splitlines(keepends=True) if sink.exists() else []
            with open(sink, "ab") as fh:
                fh.write(lines[-1] if lines else UNCOMMITTED_LINE)
        if rng.random() < 0.5:
            plant.feed(rng.randint(1, 3))  # arrives while the scorer is down
        left = sink.stat().st_size if sink.exists() else 0
    final = start_scorer(plant, sink=sink)
    final.wait_stepped()  # it cuts what the last kill left in the sink even with nothing to do
    wait_until(lambda: all_flagged(plant), what="every fed stick flagged", procs=[final])
    assert final.terminate() == 0, final.log()

    assert kills == n_kills >= 1
    assert_one_flag_per_fed_stick(plant)
    records = assert_sink_holds_each_flag_once(plant, sink)
    assert len(records) == len(plant.expected) > 0
    with capsys.disabled():
        print(
            f"\n[kill -9] seed {KILL_SEED}: {kills} kills, {outstanding} with sticks not yet "
            f"flagged, {torn} between sink write and commit; {len(records)} flags, "
            f"{plant.feeds} feeds"
        )


# ----------------------------------------------------------------------------- 2. two scorers
def test_two_scorers_for_one_station_decide_each_stick_once_into_one_shared_sink(
    store_url, tmp_path, history, start_scorer
):
    plant = make_plant(tmp_path, history, url=store_url)
    try:
        sink = tmp_path / "flags-cooling.jsonl"
        first, second = start_scorer(plant, sink=sink), start_scorer(plant, sink=sink)
        first.wait_up()
        second.wait_up()
        for n in (3, 2, 4):
            plant.feed(n)
            time.sleep(0.25)
        wait_until(lambda: all_flagged(plant), what="every stick flagged", procs=[first, second])

        # each stick was decided by exactly one of the two (the lock serializes the steps);
        # the counters move just after the commit, hence the wait
        def decided() -> list[float]:
            return [s.metric("qcllp_scorer_sticks_total") for s in (first, second)]

        wait_until(
            lambda: sum(decided()) >= len(plant.expected),
            what="the decisions counted",
            procs=[first, second],
            timeout=10,
        )
        time.sleep(0.5)  # a few more ticks: nothing is decided again
        assert sum(decided()) == len(plant.expected), decided()
        assert first.terminate() == 0, first.log()
        assert second.terminate() == 0, second.log()

        assert_one_flag_per_fed_stick(plant)
        records = assert_sink_holds_each_flag_once(plant, sink)
        assert len(records) == len(plant.expected)
    finally:
        plant.store.close()


# ----------------------------------------------------------------------------- 3. promotion
def test_a_promotion_is_picked_up_live_and_later_sticks_carry_the_new_model(plant_ab, start_scorer):
    plant = plant_ab
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    before = plant.feed(3)
    wait_until(lambda: before <= plant.flagged(), what="the first feed flagged", procs=[scorer])
    assert scorer.body()["model_id"] == plant.model_a

    promote(plant.store, plant.model_b)
    wait_until(
        lambda: scorer.body().get("model_id") == plant.model_b,
        what="the promoted model loaded",
        procs=[scorer],
        timeout=20,
    )
    after = plant.feed(3)
    wait_until(lambda: all_flagged(plant), what="the second feed flagged", procs=[scorer])

    assert scorer.proc.poll() is None  # the same process, no restart
    assert scorer.metric("qcllp_scorer_active_model_id") == plant.model_b
    flags = plant.flags().set_index(["charge_id", "stick_id"])
    assert (flags.loc[sorted(before), "model_id"] == plant.model_a).all()
    assert (flags.loc[sorted(after), "model_id"] == plant.model_b).all()
    loaded = [e for e in scorer.events() if e["event"] == "model_loaded"]
    assert [(e["model_id"], e["previous"]) for e in loaded] == [
        (plant.model_a, None),
        (plant.model_b, plant.model_a),
    ]
    assert scorer.terminate() == 0
    assert_sink_holds_each_flag_once(plant, sink)


# ----------------------------------------------------------------------------- 4. corrupt model
def test_a_corrupt_artifact_is_refused_with_an_alarm_and_the_last_good_model_keeps_scoring(
    plant_ab, start_scorer
):
    plant = plant_ab
    scorer = start_scorer(plant)
    before = plant.feed(2)
    wait_until(lambda: before <= plant.flagged(), what="the first feed flagged", procs=[scorer])

    artifact = artifact_location(plant.store, get_model(plant.store, plant.model_b))
    with paused(plant, scorer):  # so it cannot load model B before its file is damaged
        promote(plant.store, plant.model_b)  # verifies the (still intact) file
        data = bytearray(artifact.read_bytes())
        data[len(data) // 2] ^= 0xFF
        artifact.write_bytes(bytes(data))
    after = plant.feed(2)
    wait_until(lambda: all_flagged(plant), what="the second feed flagged", procs=[scorer])
    time.sleep(0.6)  # a few more ticks: the refusal is alarmed once, not once per tick

    flags = plant.flags()
    assert (flags["model_id"] == plant.model_a).all() and len(flags) == len(before | after)
    alarms = plant.alarms()
    refused = alarms[alarms["kind"] == "model_refused"]
    assert len(refused) == 1, alarms
    assert refused["station"].iloc[0] == STATION
    assert f"model {plant.model_b} refused" in refused["message"].iloc[0]
    assert scorer.metric("qcllp_scorer_alarms_total", kind="model_refused") == 1
    assert scorer.metric("qcllp_scorer_active_model_id") == plant.model_a
    status, body = scorer.health()
    assert status == 200 and body["model_id"] == plant.model_a
    assert any(a.startswith("model_refused") for a in body["alarms"])
    assert scorer.terminate() == 0


# ----------------------------------------------------------------------------- 5. unscorable
def test_a_stick_missing_a_sensor_is_unscorable_and_the_reason_names_the_sensor(
    tmp_path, history, start_scorer
):
    timeout_s = 3.0
    plant = make_plant(tmp_path, history, timeout_s=timeout_s)
    chosen: dict[str, tuple[str, str]] = {}

    def edit(readings: pd.DataFrame) -> pd.DataFrame:
        charge = sorted(readings["charge_id"].unique())[0]
        sticks = sorted(readings.loc[readings["charge_id"] == charge, "stick_id"].unique())
        later_seen, waits, settles = ((charge, s) for s in sticks[:3])
        chosen.update(later_seen=later_seen, waits=waits, settles=settles)
        key = list(zip(readings["charge_id"], readings["stick_id"], strict=True))
        stick = pd.Series(key, index=readings.index)
        at, sensor = readings["station"], readings["sensor"]
        drop = (
            ((stick == later_seen) & (at == STATION) & (sensor == "cooling_rate"))
            # missing water_flow and never seen later: complete only at the timeout
            | ((stick == waits) & (at == STATION) & (sensor == "water_flow"))
            | ((stick == waits) & (at == LATER_STATION))
            # every cooling sensor, not seen later: complete after settle_s
            | ((stick == settles) & (at == LATER_STATION))
        )
        return readings[~drop.to_numpy()]

    sink = tmp_path / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    try:
        fed_at = time.monotonic()
        plant.feed(2, edit=edit)
        others = plant.expected - {chosen["waits"]}
        wait_until(lambda: others <= plant.flagged(), what="the sticks but one", procs=[scorer])
        if time.monotonic() - fed_at < timeout_s - 1.0:  # (only if this machine kept up)
            assert chosen["waits"] not in plant.flagged(), "decided before its timeout"
        wait_until(lambda: all_flagged(plant), what="the timed-out stick", procs=[scorer])
        assert scorer.terminate() == 0

        flags = plant.flags().set_index(["charge_id", "stick_id"])
        row = flags.loc[chosen["later_seen"]]
        assert row["decision"] == "unscorable" and np.isnan(row["probability"])
        assert row["reason"] == f"no reading from sensor(s) cooling_rate at {STATION}"
        row = flags.loc[chosen["waits"]]
        assert row["decision"] == "unscorable"
        assert row["reason"] == f"no reading from sensor(s) water_flow at {STATION}"
        waited = (row["scored_at"] - row["arrived_at"]).total_seconds()
        assert waited >= timeout_s, waited
        row = flags.loc[chosen["settles"]]
        assert row["decision"] in ("pass", "lock_out") and 0.0 <= row["probability"] <= 1.0
        rest = flags.drop(index=[chosen["later_seen"], chosen["waits"]])
        assert (rest["decision"] != "unscorable").all() and rest["reason"].isna().all()
        assert_one_flag_per_fed_stick(plant)
        records = assert_sink_holds_each_flag_once(plant, sink)
        records = {(r["charge_id"], r["stick_id"]): r for r in records}
        assert "cooling_rate" in records[chosen["later_seen"]]["reason"]
        assert records[chosen["waits"]]["decision"] == "unscorable"
    finally:
        plant.store.close()


# ----------------------------------------------------------------------------- 6. endpoint
def test_healthz_is_503_without_a_model_and_200_with_its_id_once_one_is_promoted(
    tmp_path, history, start_scorer
):
    plant = make_plant(tmp_path, history, promote_first=False)
    try:
        scorer = start_scorer(plant)
        status, body = scorer.wait_up()
        assert status == 503, body
        assert body["status"] == "unhealthy" and body["model_id"] is None
        assert "no model loaded" in body["problems"]
        fed = plant.feed(2)
        # taken in and kept, not decided, while no model is active
        wait_until(
            lambda: scorer.body().get("pending_sticks") == len(fed),
            what="the sticks taken in",
            procs=[scorer],
        )
        assert scorer.health()[0] == 503 and plant.flagged() == set()
        assert scorer.metric("qcllp_scorer_active_model_id") == 0
        assert scorer.metric("qcllp_scorer_pending_sticks") == len(fed)

        promote(plant.store, plant.model_a)
        status, body = wait_until(
            lambda: (h := scorer.health()) is not None and h[0] == 200 and h,
            what="200 after the promotion",
            procs=[scorer],
        )
        assert body["status"] == "ok" and body["problems"] == []
        assert body["model_id"] == plant.model_a and body["station"] == STATION
        wait_until(lambda: all_flagged(plant), what="the waiting sticks flagged", procs=[scorer])
        assert scorer.metric("qcllp_scorer_active_model_id") == plant.model_a
        wait_until(  # the counters move just after the step's commit
            lambda: scorer.metric("qcllp_scorer_sticks_total") >= len(fed),
            what="the decisions counted",
            procs=[scorer],
            timeout=10,
        )
        assert scorer.metric("qcllp_scorer_sticks_total") == len(fed)
        assert scorer.metric("qcllp_scorer_step_seconds_count") > 0
        assert scorer.metric("qcllp_scorer_arrival_to_flag_seconds_count") == len(fed)
        wait_until(
            lambda: scorer.body().get("pending_sticks") == 0,
            what="nothing pending",
            procs=[scorer],
        )
        assert scorer.get("/nope")[0] == 404
        assert scorer.terminate() == 0
    finally:
        plant.store.close()


def test_a_start_behind_a_backlog_says_starting_not_0_pending_until_its_first_step(
    plant, start_scorer
):
    """Between its model's load and its first step, a scorer has not counted the sticks
    waiting: ``/healthz`` says so (503 ``starting``, ``pending_sticks`` and ``lag_s`` null)
    rather than ``ok`` with 0 pending. The test holds SQLite's writer lock, so the first step
    waits as long as the test looks."""
    fed = plant.feed(2)  # waiting before the start
    holder = sqlite3.connect(make_url(plant.url).database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        scorer = start_scorer(plant)
        wait_until(
            lambda: (h := scorer.health()) is not None and h[1]["model_id"] is not None,
            what="the model loaded",
            procs=[scorer],
        )
        time.sleep(0.5)  # a poll or two: still no step while the lock is held
        status, body = scorer.health()
        assert status == 503 and body["status"] == "starting", body
        assert body["model_id"] == plant.model_a
        assert body["pending_sticks"] is None and body["lag_s"] is None, body
        assert body["last_step_at"] is None and len(body["problems"]) == 1
        assert body["problems"][0].startswith("starting: no step yet")
        for gauge in ("qcllp_scorer_pending_sticks", "qcllp_scorer_lag_seconds"):
            assert math.isnan(scorer.metric(gauge)), gauge  # unknown, not 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_until(lambda: all_flagged(plant), what="the backlog flagged", procs=[scorer])
    status, body = wait_until(
        lambda: (h := scorer.health()) is not None and h[0] == 200 and h,
        what="200 after the first steps",
        procs=[scorer],
    )
    assert body["status"] == "ok" and body["problems"] == [] and body["pending_sticks"] == 0
    assert body["last_step_at"] is not None and body["lag_s"] is not None
    assert scorer.metric("qcllp_scorer_pending_sticks") == 0
    assert plant.flagged() == fed
    assert scorer.terminate() == 0, scorer.log()


# ----------------------------------------------------------------------------- 7. SIGTERM
def test_sigterm_exits_0_with_flags_and_sink_consistent_and_a_restart_goes_on(plant, start_scorer):
    sink = plant.folder / "flags-cooling.jsonl"
    scorer = start_scorer(plant, sink=sink)
    scorer.wait_stepped()
    plant.feed(6)
    time.sleep(0.25)  # likely in the middle of taking the feed in or deciding it
    assert scorer.terminate() == 0, scorer.log()
    events = [e["event"] for e in scorer.events()]
    assert events[-1] == "stopped" and "stopping" in events, events
    assert_sink_holds_each_flag_once(plant, sink)
    assert plant.flagged() <= plant.expected

    plant.feed(2)
    again = start_scorer(plant, sink=sink)
    wait_until(lambda: all_flagged(plant), what="the rest flagged after a restart", procs=[again])
    assert again.terminate() == 0, again.log()
    assert_one_flag_per_fed_stick(plant)
    assert_sink_holds_each_flag_once(plant, sink)

    # what `qcllp status` tells the operator (in-process: the CLI's own tests start it)
    args = ["--config", str(plant.config_path), "--db", plant.url, "--json", "status"]
    status = CliRunner().invoke(main, args)
    assert status.exit_code == 0, status.output
    cooling = {s["station"]: s for s in json.loads(status.stdout)["stations"]}[STATION]
    assert cooling["scorer_model"] == cooling["active_model"] == plant.model_a
    assert cooling["batches_behind"] == 0 and cooling["pending_sticks"] == 0
    assert sum(cooling["flags"].values()) == len(plant.expected)


def test_final_qc_counts_that_the_model_over_predicted_suspend_its_lockouts_live(
    plant, start_scorer
):
    scorer, fed = start_locking_every_stick(plant, start_scorer)
    assert scorer.metric("qcllp_scorer_lockouts_suspended") == 0
    report_no_failures(plant, fed)

    wait_until(
        lambda: scorer.metric("qcllp_scorer_lockouts_suspended") == 1,
        what="the lock-outs suspended",
        procs=[scorer],
    )
    assert scorer.metric("qcllp_scorer_qc_over_prediction") > 0.05
    assert scorer.metric("qcllp_scorer_alarms_total", kind="lockout_suspended") == 1
    reason = scorer.body()["lockouts_suspended"]
    assert reason.startswith(f"lock-out suspended at {STATION}: final QC found fewer failures")
    alarms = plant.alarms()
    assert list(alarms["kind"]) == ["lockout_suspended"] and alarms["message"][0] == reason
    logged = [e for e in scorer.events() if e["event"] == "alarm"]
    assert [e["kind"] for e in logged] == ["lockout_suspended"]
    assert scorer.terminate() == 0, scorer.log()
