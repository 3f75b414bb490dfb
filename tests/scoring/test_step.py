"""Scoring at a station: the active model decides for the sticks still on the line, one flag
per stick on SQLite and PostgreSQL alike, with the features built as at training time."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

from qcllp.features import station_features
from qcllp.scoring.flag_sink import SinkError, claim_sink, claimed_sink
from qcllp.scoring.step import FlagSink, flags_frame, score_file, score_station, score_step
from qcllp.station.registry import load_model, promote
from qcllp.store import Flag, Store, stored_utc
from qcllp.store.kept_stats import rebuild_series_stats
from tests.support.plants import FRESH_CHARGES


@pytest.fixture
def scored_plant(store, history_plant, tmp_path):
    """``store`` (both engines) with the history and fresh charges and an active cooling model.

    The config is placed in ``tmp_path``: a server database keeps its model files beside it."""
    config = replace(history_plant.config, path=tmp_path / "plant.yaml")
    history_plant.ingest_into(store, config)
    model_id = history_plant.record_trained(store, config, "cooling")
    promote(store, model_id)
    return store, config, model_id


def test_each_stick_still_on_the_line_is_flagged_once_with_the_models_decision(
    scored_plant, history_plant
):
    store, config, model_id = scored_plant
    first = score_station(store, config, "cooling")
    again = score_station(store, config, "cooling")
    scored = set(first.scores["charge_id"])
    assert first.flags_written == len(first.scores) > 0
    assert again.flags_written == 0 and again.scores.empty
    # the fresh charges only: labeled charges have left the line
    assert scored == set(history_plant.fresh.truth["charge_id"].astype(str))
    assert len(scored) == FRESH_CHARGES
    flags = flags_frame(store, "cooling")
    assert len(flags) == len(first.scores) and (flags["model_id"] == model_id).all()
    model = load_model(store, model_id).model
    X = station_features(
        store, config, "cooling", charge_ids=sorted(scored), imputation=model.imputation
    ).X
    expected = model.failure_probability(X)
    got = flags.set_index(["charge_id", "stick_id"]).loc[X.index, "probability"].to_numpy()
    np.testing.assert_allclose(got, expected)


def test_each_sink_line_is_its_flag_as_read_through_the_orm(scored_plant, tmp_path):
    """The sink reads the flags through the driver (SQLite's times as text): each line is
    still the flag's record from SQLAlchemy's row, a whole second's time without a fraction."""
    store, config, _ = scored_plant
    now = datetime(2026, 11, 28, 6, 0, 0, tzinfo=UTC)
    sink = FlagSink(tmp_path / "flags.jsonl")
    done = score_step(store, config, "cooling", load_model(store, station="cooling"), now=now,
                      assume_complete=True, sink=sink)  # fmt: skip
    f = Flag.__table__
    with store.engine.connect() as conn:
        rows = conn.execute(select(f).where(f.c.station == "cooling").order_by(f.c.id)).all()

    def line(row) -> str:  # noqa: ANN001
        record = {c: getattr(row, c) for c in ("station", "charge_id", "stick_id", "decision",
                  "probability", "threshold", "model_id", "reason")}  # fmt: skip
        record["arrived_at"] = stored_utc(row.arrived_at).isoformat()
        record["scored_at"] = stored_utc(row.scored_at).isoformat()
        return json.dumps(record, separators=(",", ":"))

    lines = sink.path.read_text().splitlines()
    assert len(lines) == len(rows) == done.flags_written > 0
    assert lines == [line(row) for row in rows]
    assert all(json.loads(x)["scored_at"] == "2026-11-28T06:00:00+00:00" for x in lines)


def test_a_file_is_scored_with_the_same_model_and_writes_no_flags(scored_plant, history_plant):
    store, config, _ = scored_plant
    files = sorted((history_plant.folder / "fresh" / "measurements").iterdir())
    result = score_file(store, config, "cooling", files[0])
    assert len(result.scores) > 0 and result.flags_written == 0
    assert flags_frame(store, "cooling").empty


@pytest.fixture
def straightening(history_plant, tmp_path):
    """A private copy of the plant with an active straightening model (the last station: only
    the settle time completes a stick there) and the fresh charges' arrival time."""
    url = history_plant.copy_to(tmp_path)
    store = Store.open(url)
    promote(store, history_plant.record_trained(store, history_plant.config, "straightening"))
    [(arrived,)] = store.execute_sql(
        "SELECT max(finished_at) FROM ingestion_batches WHERE kind = 'measurements'"
    )
    yield store, history_plant.config, pd.Timestamp(arrived, tz="UTC").to_pydatetime()
    store.close()


def test_a_stick_is_decided_only_once_the_station_has_settled(straightening):
    store, config, arrived = straightening
    loaded = load_model(store, station="straightening")
    settle = config.station("straightening").settle_s
    early = score_step(
        store, config, "straightening", loaded, now=arrived + timedelta(seconds=settle / 2)
    )
    assert early.scores.empty and early.pending > 0
    settled = score_step(
        store, config, "straightening", loaded, now=arrived + timedelta(seconds=settle + 1)
    )
    assert len(settled.scores) == early.pending and settled.pending == 0
    assert set(settled.scores["decision"]) <= {"lock_out", "pass"}


def test_a_stick_missing_a_sensor_waits_for_the_timeout_and_is_unscorable_naming_it(
    straightening,
):
    store, config, arrived = straightening
    [(charge, stick)] = store.execute_sql(
        "SELECT charge_id, stick_id FROM series WHERE station = 'straightening' "
        "AND charge_id NOT IN (SELECT charge_id FROM charges WHERE n_sticks IS NOT NULL) "
        "ORDER BY charge_id, stick_id LIMIT 1"
    )
    series = (
        "SELECT id FROM series WHERE station = 'straightening' "
        f"AND charge_id = '{charge}' AND stick_id = '{stick}' AND sensor = 'deflection'"
    )
    with store.engine.begin() as conn:  # as if its deflection had never been measured
        conn.exec_driver_sql(f"DELETE FROM readings WHERE series_id IN ({series})")
        rebuild_series_stats(conn, [("straightening", charge, stick)])
    loaded = load_model(store, station="straightening")
    st = config.station("straightening")
    settled = score_step(
        store, config, "straightening", loaded, now=arrived + timedelta(seconds=st.settle_s + 1)
    )
    decided = set(zip(settled.scores["charge_id"], settled.scores["stick_id"], strict=True))
    assert (charge, stick) not in decided
    assert settled.pending == 1  # waits for its deflection reading
    late = score_step(
        store, config, "straightening", loaded, now=arrived + timedelta(seconds=st.timeout_s + 1)
    )
    [row] = late.scores.itertuples()
    assert (row.charge_id, row.stick_id, row.decision) == (charge, stick, "unscorable")
    assert "deflection" in row.reason and np.isnan(row.probability)
    flag = (
        flags_frame(store, "straightening")
        .set_index(["charge_id", "stick_id"])
        .loc[(charge, stick)]
    )
    assert flag["decision"] == "unscorable" and "deflection" in flag["reason"]


def test_the_sink_drops_what_an_uncommitted_step_wrote_and_reports_a_shortened_file(tmp_path):
    sink = FlagSink(tmp_path / "flags.jsonl")
    assert sink.prepare(0) == (0, None)
    committed = sink.append(['{"a":1}', '{"b":2}'])
    sink.append(['{"uncommitted":3}'])  # a step that died before its commit
    assert sink.prepare(committed) == (committed, None)
    assert sink.path.read_text().splitlines() == ['{"a":1}', '{"b":2}']
    offset, problem = sink.prepare(committed + 100)
    assert offset == committed and "rotated or truncated" in problem


def test_a_sink_moved_to_a_file_with_foreign_lines_appends_after_them_and_never_cuts_them(
    straightening, tmp_path
):
    store, config, arrived = straightening
    loaded = load_model(store, station="straightening")
    first = FlagSink(tmp_path / "first.jsonl")
    score_step(store, config, "straightening", loaded, now=arrived, sink=first)  # nothing due
    second = tmp_path / "second.jsonl"
    second.write_text('{"written by":"the gateway"}\n')
    claim_sink(store, "straightening", second, move=True)
    done = score_step(store, config, "straightening", loaded, now=arrived + timedelta(hours=1))
    lines = second.read_text().splitlines()
    assert lines[0] == '{"written by":"the gateway"}' and len(lines) == 1 + done.flags_written > 1
    assert first.path.read_bytes() == b""


def test_a_sink_is_one_stations_and_a_station_has_one_sink_until_moved(store, tmp_path):
    sink, other = tmp_path / "flags.jsonl", tmp_path / "other.jsonl"
    claim = claim_sink(store, "cooling", sink)
    assert (claim.path, claim.offset, claim.flag_id) == (str(sink.resolve()), 0, 0)
    assert claim_sink(store, "cooling", tmp_path / "." / "flags.jsonl").path == claim.path
    with pytest.raises(SinkError, match=f"sink {sink} belongs to station cooling"):
        claim_sink(store, "straightening", sink)
    with pytest.raises(SinkError, match=f"station cooling writes its flags to {sink}, not"):
        claim_sink(store, "cooling", other)
    assert claimed_sink(store, "cooling") == str(sink)
    sink.write_text('{"uncommitted":1}\n')  # beyond the committed offset 0
    other.write_text('{"the gateway":1}\n')
    moved = claim_sink(store, "cooling", other, move=True)
    assert moved.previous == str(sink) and moved.offset == other.stat().st_size
    assert sink.read_bytes() == b""  # the old file cut back to its committed flags
    assert claim_sink(store, "straightening", sink).path == str(sink)  # free again


def test_a_file_ending_in_a_partial_line_is_refused_as_a_sink(store, tmp_path):
    sink = tmp_path / "flags.jsonl"
    sink.write_bytes(b'{"a":1}\n{"b":')
    with pytest.raises(SinkError, match=f"sink {sink} ends in a partial line"):
        claim_sink(store, "cooling", sink)
    assert claimed_sink(store, "cooling") is None


def test_a_sink_locked_by_another_process_fails_the_step_naming_it_and_commits_nothing(
    straightening, tmp_path
):
    store, config, arrived = straightening
    loaded = load_model(store, station="straightening")
    sink = tmp_path / "flags.jsonl"
    claim_sink(store, "straightening", sink)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_FLOCK, str(sink)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(SinkError, match=f"sink {sink} is locked by another process"):
            score_step(store, config, "straightening", loaded, now=arrived + timedelta(hours=1))
        assert flags_frame(store, "straightening").empty and sink.read_bytes() == b""
    finally:
        holder.kill()
        holder.wait()
    done = score_step(store, config, "straightening", loaded, now=arrived + timedelta(hours=1))
    assert done.sink_lines == done.flags_written == len(sink.read_text().splitlines()) > 0


_HOLD_FLOCK = """
import fcntl, sys, time
fh = open(sys.argv[1], "ab")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


def test_a_step_pauses_the_garbage_collector_and_leaves_it_as_it_was(scored_plant, monkeypatch):
    """The cyclic collector is off while a step decides (``collector_paused``, around every
    step), back on after, after an error too; left off when it was off."""
    import gc

    import qcllp.scoring.step as step_module
    from qcllp.scoring.step import collector_paused

    store, config, _ = scored_plant
    seen, decide = [], step_module.decide_and_write

    def deciding(*args, **kwargs):  # noqa: ANN202 - the step's own
        seen.append(gc.isenabled())
        return decide(*args, **kwargs)

    monkeypatch.setattr(step_module, "decide_and_write", deciding)
    done = score_step(store, config, "cooling", load_model(store, station="cooling"),
                      assume_complete=True)  # fmt: skip
    assert len(done.scores) > 0 and seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a step that fails")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
