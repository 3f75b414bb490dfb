"""Store: schema creation and migration, read helpers' dtypes, refusal of unknown databases."""

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.exc import OperationalError

from qcllp.store import (
    Alarm,
    Charge,
    DefectCount,
    DefectCountConflict,
    Reading,
    Series,
    Stick,
    Store,
    StoreError,
)
from qcllp.store.migrate import HEAD, current_revision, head_revision
from qcllp.store.partitions import ensure_partitions


def test_open_creates_schema_at_head_and_reopening_keeps_data(store_url):
    store = Store.open(store_url)
    assert current_revision(store.engine) == head_revision()
    with store.session() as session:
        session.add(Charge(charge_id="c1", first_seen_us=0))
    store.close()
    again = Store.open(store_url)
    assert again.count(Charge) == 1
    again.close()


def test_the_head_named_in_the_code_is_the_newest_migration_script():
    assert head_revision() == HEAD


def test_a_database_at_head_opens_without_importing_alembic(tmp_path):
    """What keeps ``qcllp models list`` quick: Alembic is imported only to migrate."""
    url = f"sqlite:///{tmp_path / 'p.sqlite'}"
    Store.open(url).close()
    code = (
        "import sys; from qcllp.store import Store; "
        f"Store.open({url!r}, create=False).close(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_open_without_create_refuses_a_missing_sqlite_file(tmp_path):
    with pytest.raises(StoreError, match="no plant database"):
        Store.open(f"sqlite:///{tmp_path / 'typo.sqlite'}", create=False)


def test_open_refuses_a_database_from_a_newer_qcllp(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.sqlite'}"
    store = Store.open(url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    store.close()
    with pytest.raises(StoreError, match="9999"):
        Store.open(url)


def test_read_helpers_return_the_documented_dtypes(store):
    with store.engine.begin() as conn:
        conn.execute(
            insert(Series.__table__),
            [
                {"id": 1, "station": "rolling", "charge_id": "c1", "stick_id": "s1",
                 "sensor": "force"},
                {"id": 2, "station": "furnace", "charge_id": "c2", "stick_id": "s9",
                 "sensor": "oxygen"},
            ],
        )  # fmt: skip
        ensure_partitions(conn, np.array([1_700_000_000_000_000]))  # PostgreSQL: its month
        conn.execute(
            insert(Reading.__table__),
            [
                {"series_id": 1, "ts_us": 1_700_000_000_000_000, "value": 5000.0, "batch_id": 1},
                {"series_id": 2, "ts_us": 1_700_000_001_000_000, "value": 2.5, "batch_id": 1},
            ],
        )
        stick = {"charge_id": "c1", "stick_id": "s1", "first_seen_us": 1_700_000_000_000_000}
        conn.execute(insert(Stick.__table__), [stick])
    readings = store.read_readings()
    assert list(readings.columns) == ["charge_id", "stick_id", "station", "timestamp", "sensor",
                                      "value"]  # fmt: skip
    assert str(readings["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert readings["value"].dtype == "float64"
    # ordered by station first: furnace before rolling
    assert readings["station"].tolist() == ["furnace", "rolling"]
    assert readings["timestamp"].iloc[1] == pd.Timestamp("2023-11-14 22:13:20", tz="UTC")
    assert store.read_readings(stations=["rolling"])["charge_id"].tolist() == ["c1"]
    assert store.read_readings(charge_ids=["c2"])["sensor"].tolist() == ["oxygen"]
    assert store.read_readings(charge_ids=[]).empty
    sticks = store.read_sticks()
    assert sticks.iloc[0].tolist()[:2] == ["c1", "s1"]
    assert str(sticks["first_seen"].dtype) == "datetime64[ns, UTC]"


def test_read_defect_counts_leaves_out_conflicted_and_incomplete_charges(store):
    with store.session() as session:
        for charge, n in (("c1", 20), ("c2", 30), ("c3", 10)):
            session.add(Charge(charge_id=charge, n_sticks=n))
        session.flush()
        for charge, crack, bend in (("c1", 1, 2), ("c2", 3, 4)):
            session.add(DefectCount(charge_id=charge, defect_type="crack", count=crack))
            session.add(DefectCount(charge_id=charge, defect_type="bend", count=bend))
        session.add(DefectCount(charge_id="c3", defect_type="crack", count=1))
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO ingestion_batches (kind, source, status, started_at, rows_read, "
            "rows_stored, rows_duplicate, rows_quarantined) VALUES "
            "('defect_counts', 'x', 'done', CURRENT_TIMESTAMP, 0, 0, 0, 0)"
        )
        batch_id = conn.exec_driver_sql("SELECT max(id) FROM ingestion_batches").scalar()
        conn.execute(
            insert(DefectCountConflict.__table__),
            [{"charge_id": "c2", "batch_id": batch_id, "n_sticks": 30, "counts": {"crack": 9},
              "detail": "x", "created_at": pd.Timestamp.now(tz="UTC").to_pydatetime()}],
        )  # fmt: skip
    counts = store.read_defect_counts(["crack", "bend"])
    assert counts.index.tolist() == ["c1"]
    assert list(counts.columns) == ["n_sticks", "crack", "bend"]
    assert counts.loc["c1"].tolist() == [20, 1, 2]
    assert (counts.dtypes == "int64").all()


def _alarm(text: str) -> dict:
    return {"source": "test", "kind": "test", "message": text, "created_at": datetime.now(UTC)}


def _write_alarm(store: Store, text: str) -> None:
    with store.session() as session:
        session.execute(insert(Alarm), [_alarm(text)])


@pytest.mark.parametrize("session_kind", ["session", "write_session"])
def test_a_read_then_write_transaction_survives_a_commit_in_between(tmp_path, session_kind):
    """WAL SQLite: a plain BEGIN reads a snapshot, and a write after another connection's
    commit fails at once ("database is locked"); write_session takes the lock first, so the
    other writer waits instead (what a promotion during live scoring needs)."""
    store = Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}")
    _write_alarm(store, "before")
    reading = threading.Event()

    def other_writer() -> None:
        reading.wait()
        _write_alarm(store, "in between")

    other = threading.Thread(target=other_writer, daemon=True)
    other.start()

    def read_then_write() -> None:
        with getattr(store, session_kind)() as session:
            session.scalar(select(func.count()).select_from(Alarm))  # the snapshot
            reading.set()
            time.sleep(0.5)  # the other connection commits now (or waits for our lock)
            session.execute(insert(Alarm), [_alarm("after the read")])

    if session_kind == "session":
        with pytest.raises(OperationalError, match="database is locked"):
            read_then_write()
    else:
        read_then_write()
    other.join(timeout=10)
    with store.session() as session:
        messages = set(session.scalars(select(Alarm.message)))
    wrote = {"after the read"} if session_kind == "write_session" else set()
    assert messages == {"before", "in between"} | wrote
    store.close()
