"""The scorer's pending sticks on both engines (PostgreSQL writes them in one statement over
arrays, SQLite one prepared statement run per stick): an arrival again moves a stick's last
arrival and due time but keeps its first arrival and its later-station sighting, a sighting
of a stick not arrived marks it, deciding a stick forgets it alone, and a stick still missing
a sensor is postponed to its own timeout, the others left as they were -- and decided on their
own statistics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from qcllp.features import build_station_features, features_of_sticks
from qcllp.ingest.measurements import ingest_measurements
from qcllp.plant.config import load_plant_config
from qcllp.plant.simulate import simulate_plant
from qcllp.scoring.decide import read_due
from qcllp.scoring.pending import (
    _upsert_pending,
    due_sticks,
    due_with_complete,
    forget_pending,
    postpone,
    take_in,
)
from qcllp.store import stored_utc
from tests.support.plants import ROOT

T0 = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


def _pending(store) -> dict[str, tuple]:
    rows = store.execute_sql(
        "SELECT stick_id, first_arrived_at, arrived_at, due_at, later_seen FROM scorer_pending "
        "ORDER BY stick_id"
    )

    def utc(t) -> datetime:  # noqa: ANN001 - SQLite gives text, PostgreSQL datetimes
        return stored_utc(pd.Timestamp(t).to_pydatetime())

    return {r[0]: (*(utc(t) for t in r[1:4]), bool(r[4])) for r in rows}


def test_arrivals_sightings_and_decisions_keep_each_pending_stick_right(store, tiny_config):
    st = tiny_config.stations[0]
    settle = timedelta(seconds=st.settle_s)
    t1, t2 = T0 + timedelta(seconds=5), T0 + timedelta(seconds=30)
    with store.write() as conn:
        first = {("C1", "S1"): (T0, t1), ("C1", "S2"): (T0, t1), ("C1", "S3"): (T0, t1)}
        _upsert_pending(conn, st, first, later={("C1", "S1")})
    with store.write() as conn:  # S1 again without a sighting; S2 seen at a later station
        _upsert_pending(conn, st, {("C1", "S1"): (t1, t2)}, later={("C1", "S2")})
    assert _pending(store) == {
        "S1": (T0, t2, t2 + settle, True),
        "S2": (T0, t1, t1 + settle, True),
        "S3": (T0, t1, t1 + settle, False),
    }
    with store.write() as conn:
        forget_pending(conn, st.name, pd.DataFrame({"charge_id": ["C1"], "stick_id": ["S2"]}))
        forget_pending(conn, st.name, pd.DataFrame({"charge_id": [], "stick_id": []}))
    assert sorted(_pending(store)) == ["S1", "S3"]


def test_due_sticks_are_those_seen_later_or_settled_oldest_first_with_their_times(
    store, tiny_config
):
    st = tiny_config.stations[0]
    settle = timedelta(seconds=st.settle_s)
    t1, t2 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)
    with store.write() as conn:
        arrived = {("C1", "S1"): (T0, t2), ("C1", "S2"): (T0, t1), ("C1", "S3"): (T0, t1)}
        _upsert_pending(conn, st, arrived, later={("C1", "S3")})
    with store.engine.connect() as conn:
        settled = due_sticks(conn, st.name, t1 + settle, 10, assume_complete=False)
        every = due_sticks(conn, st.name, T0, 10, assume_complete=True)
        empty = due_sticks(conn, "rolling", T0, 10, assume_complete=False)
    assert list(settled["stick_id"]) == ["S2", "S3"]  # S1 settles a second later
    assert list(every["stick_id"]) == ["S2", "S3", "S1"]  # by due time
    assert list(every["later_seen"]) == [False, True, False]
    assert list(every["arrived_at"]) == [t1, t1, t2]
    assert (every["first_arrived_at"] == T0).all() and empty.empty


def test_sticks_missing_a_sensor_wait_until_their_own_timeout(store, tiny_config):
    st = tiny_config.stations[0]
    settle, timeout = timedelta(seconds=st.settle_s), timedelta(seconds=st.timeout_s)
    t1, t2 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)
    with store.write() as conn:
        arrived = {("C1", "S1"): (T0, t1), ("C1", "S2"): (t1, t2), ("C1", "S3"): (T0, t2)}
        _upsert_pending(conn, st, arrived, later=set())
    with store.write() as conn:
        due = due_sticks(conn, st.name, t2 + settle, 10, assume_complete=False)
        waiting = due["stick_id"].isin(["S1", "S2"]).to_numpy()
        postpone(conn, st, due.loc[waiting], due["first_arrived_at"][waiting])
    assert _pending(store) == {
        "S1": (T0, t1, T0 + timeout, False),
        "S2": (t1, t2, t1 + timeout, False),
        "S3": (T0, t2, t2 + settle, False),
    }
    with store.engine.connect() as conn:
        assert list(due_sticks(conn, st.name, t2 + settle, 10, False)["stick_id"]) == ["S3"]


def test_sticks_decided_beside_postponed_ones_get_their_own_features(store, tmp_path):
    """A step whose due sticks are partly still missing a sensor (postponed, left out) decides
    the others on their own statistics: the features of the decided sticks, in the order
    decided, are those built from their readings."""
    config = load_plant_config(ROOT / "plant_config" / "example.yaml")
    plant = simulate_plant(config, 3, random_state=11, missing_rate=0.2)
    path = tmp_path / "readings.csv"
    plant.readings.to_csv(path, index=False)
    ingest_measurements(store, config, path)
    st = config.station("cooling")
    at = plant.readings.loc[plant.readings["station"] == st.name, ["charge_id", "stick_id"]]
    keys = list(at.drop_duplicates().itertuples(index=False, name=None))
    now = T0 + timedelta(seconds=st.settle_s + 1)  # settled, long before the timeout
    with store.write() as conn:
        _upsert_pending(conn, st, {key: (T0, T0) for key in keys}, later=set())
        due = due_sticks(conn, st.name, now, len(keys), assume_complete=False)
        decided = read_due(conn, config, st, due, now, assume_complete=False)
    assert 0 < len(decided.keys) < len(keys)  # some wait for a sensor, the others decided
    assert decided.scorable.all()  # the ones decided have every sensor
    base = decided.base
    assert decided.keys == list(zip(base["charge_id"], base["stick_id"], strict=True))
    raw = build_station_features(plant.readings, config, st.name)
    got = features_of_sticks(decided.stats, decided.keys, config, st.name,
                             imputation=raw.imputation).X  # fmt: skip
    want = raw.X.loc[pd.MultiIndex.from_tuples(decided.keys, names=raw.X.index.names)]
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9, atol=1e-12)


def _batch(store, config, readings: pd.DataFrame, path) -> datetime:  # noqa: ANN001
    """Ingest ``readings`` as one batch; its commit time (the arrival it gives its sticks)."""
    readings.to_csv(path, index=False)
    ingest_measurements(store, config, path)
    ((finished,),) = store.execute_sql(
        "SELECT finished_at FROM ingestion_batches ORDER BY commit_seq DESC LIMIT 1"
    )
    return stored_utc(pd.Timestamp(finished).to_pydatetime())


def _taken(store, config, st, since: int):  # noqa: ANN001, ANN202
    with store.write() as conn:
        return take_in(conn, config, st, since, 10_000)


def test_sticks_complete_at_intake_skip_the_pending_table_up_to_the_steps_bound(
    store, tiny_config, tmp_path
):
    """Sticks a step's batches bring to the station and a later one are decided from the
    intake (no pending row written, selected and deleted); beyond the step's bound they are
    parked, seen later, for the next step. A pending stick completed so is decided once,
    with its last arrival."""
    config, st = tiny_config, tiny_config.stations[0]
    plant = simulate_plant(config, 1, random_state=3)
    r = plant.readings
    sticks = sorted(r["stick_id"].unique())
    first, rest = sticks[:3], sticks[3:]
    here = r["station"] == st.name
    t1 = _batch(store, config, r[here & r["stick_id"].isin(first)], tmp_path / "b1.csv")
    one = _taken(store, config, st, 0)
    assert one.complete == {} and sorted(_pending(store)) == first
    t2 = _batch(store, config, r[~(here & r["stick_id"].isin(first))], tmp_path / "b2.csv")
    two = _taken(store, config, st, one.seq)
    charge = r["charge_id"].iloc[0]
    assert two.complete == {(charge, s): (t2, t2) for s in rest}  # in one batch with rolling
    assert sorted(_pending(store)) == first  # only the sticks that were waiting already
    assert all(later for *_, later in _pending(store).values())  # now seen at rolling
    bound = len(first) + 2
    with store.write() as conn:
        due = due_with_complete(conn, st, T0, bound, False, two.complete)
    assert list(due["stick_id"]) == first + rest[:2]  # the waiting first, then the intake's
    assert list(due["arrived_at"]) == [t1] * len(first) + [t2] * 2
    assert due["later_seen"].all()
    parked = _pending(store)
    assert sorted(parked) == sorted(first + rest[2:])
    assert all(parked[s][1] == t2 and parked[s][3] for s in rest[2:])
    with store.write() as conn:
        forget_pending(conn, st.name, due)
    assert sorted(_pending(store)) == rest[2:]  # the next step's: seen later, due at once


def test_a_pending_stick_completed_by_the_intake_is_decided_once_with_its_last_arrival(
    store, tiny_config, tmp_path
):
    config, st = tiny_config, tiny_config.stations[0]
    r = simulate_plant(config, 1, random_state=4).readings
    stick = sorted(r["stick_id"].unique())[0]
    mine = r[r["stick_id"] == stick]
    here = mine[mine["station"] == st.name]
    _batch(store, config, here.iloc[::2], tmp_path / "b1.csv")  # half its series here
    one = _taken(store, config, st, 0)
    t2 = _batch(store, config, pd.concat([here.iloc[1::2], mine[mine["station"] != st.name]]),
                tmp_path / "b2.csv")  # fmt: skip
    two = _taken(store, config, st, one.seq)
    key = (mine["charge_id"].iloc[0], stick)
    assert list(two.complete) == [key]
    settled = t2 + timedelta(seconds=st.settle_s + 1)
    for now in (T0, settled):  # its pending row not yet due, and due
        with store.write() as conn:
            due = due_with_complete(conn, st, now, 10, False, two.complete)
            conn.rollback()
        assert list(due["stick_id"]) == [stick]
        assert list(due["arrived_at"]) == [t2] and due["later_seen"].all()
