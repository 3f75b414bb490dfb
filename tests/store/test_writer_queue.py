"""SQLite's writers in turn (:mod:`qcllp.store.writer_queue`), with real processes: a writer
waits for another process's turn and goes as soon as it ends, a ``kill -9`` ends a turn, a
turn not given within the timeout is SQLite's "database is locked", naming the queue's file,
and neither an interrupted wait nor a forked child leaves a turn held."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from qcllp.scoring.flag_writes import insert_alarm
from qcllp.store import Alarm, Store
from qcllp.store.writer_queue import WriterQueue, queue_path

# a writer in another process: it takes its turn, says so, and ends it when told (a line on
# stdin) -- or never, when it is killed
HOLDER = """
import sys
from qcllp.store import Store
from qcllp.scoring.flag_writes import insert_alarm
store = Store.open(sys.argv[1])
with store.writing() as conn:
    insert_alarm(conn, "test", None, "holder", "first")
    print("held", flush=True)
    sys.stdin.readline()
print("done", flush=True)
"""


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "plant.sqlite"
    Store.open(f"sqlite:///{path}").close()
    return path


def _holder(db):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, f"sqlite:///{db}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def _write_in_thread(store: Store) -> tuple[threading.Thread, dict]:
    """A write of this process in a thread: when it was done, and any error."""
    done: dict = {}

    def write():
        try:
            with store.write() as conn:
                insert_alarm(conn, "test", None, "waiter", "second")
            done["at"] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            done["error"] = exc

    thread = threading.Thread(target=write)
    thread.start()
    return thread, done


def _alarm_order(store: Store) -> list[str]:
    a = Alarm.__table__
    with store.engine.connect() as conn:
        return list(conn.execute(select(a.c.kind).order_by(a.c.id)).scalars())


def test_a_writer_waits_for_another_process_turn_and_goes_when_it_ends(db):
    store = Store.open(f"sqlite:///{db}")
    holder = _holder(db)
    try:
        thread, done = _write_in_thread(store)
        time.sleep(0.5)
        assert not done, "wrote while another process held its turn"
        ended = time.monotonic()
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "done"
        thread.join(10)
        assert "error" not in done
        assert done["at"] - ended < 2.0
    finally:
        holder.kill()
        holder.wait()
    assert _alarm_order(store) == ["holder", "waiter"]
    mode = stat.S_IMODE(os.stat(queue_path(db)).st_mode)
    assert mode & 0o077 == 0, f"the queue's file is open to others: {oct(mode)}"
    store.close()


def test_a_killed_writer_ends_its_turn(db):
    store = Store.open(f"sqlite:///{db}")
    holder = _holder(db)
    thread, done = _write_in_thread(store)
    time.sleep(0.3)
    assert not done
    killed = time.monotonic()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    thread.join(10)
    assert "error" not in done
    assert done["at"] - killed < 2.0
    assert _alarm_order(store) == ["waiter"]  # the killed writer's transaction is gone
    store.close()


def test_no_turn_within_the_timeout_is_database_is_locked_and_leaves_no_waiter(db):
    holder = _holder(db)
    queue = WriterQueue(db, timeout_s=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(OperationalError, match="database is locked") as caught, queue.turn():
            pass
        assert time.monotonic() - started < 2.0
        assert str(queue_path(db)) in str(caught.value)
    finally:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the abandoned waiter gets the turn and gives it back
        if not any(t.name == "qcllp-writer-queue" for t in threading.enumerate()):
            break
        time.sleep(0.05)
    assert not any(t.name == "qcllp-writer-queue" for t in threading.enumerate())
    started = time.monotonic()
    with WriterQueue(db, timeout_s=0.3).turn():
        assert time.monotonic() - started < 0.2


def test_every_write_of_the_store_counts_with_the_queue(db):
    store = Store.open(f"sqlite:///{db}")
    with store.writing() as conn:
        insert_alarm(conn, "test", None, "a", "one")
    with store.write_session() as session:
        session.execute(select(func.count()).select_from(Alarm.__table__))
    assert queue_path(db).exists()
    store._writers.timeout_s = 0.2  # not the minute a service waits
    with (
        WriterQueue(db, timeout_s=0.2).turn(),
        pytest.raises(OperationalError, match="database is locked"),
        store.write(),
    ):
        pass
    store.close()


class _Interrupted(Exception):
    pass


def test_an_interrupted_wait_leaves_no_turn_held(db):
    holder = _holder(db)
    previous = signal.signal(signal.SIGUSR1, lambda *_: (_ for _ in ()).throw(_Interrupted()))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(_Interrupted), WriterQueue(db, timeout_s=30).turn():
            pass
    finally:
        signal.signal(signal.SIGUSR1, previous)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(10)
    started = time.monotonic()
    with WriterQueue(db, timeout_s=2).turn():  # the abandoned helper gave the turn back
        assert time.monotonic() - started < 1.0


def test_a_forked_child_does_not_keep_the_parents_turn(db):
    queue = WriterQueue(db, timeout_s=1)
    with queue.turn():
        child = os.fork()
        if child == 0:  # the child lives on, as a worker would
            time.sleep(1.5)
            os._exit(0)
    try:
        started = time.monotonic()
        with WriterQueue(db, timeout_s=1).turn():
            assert time.monotonic() - started < 0.5
    finally:
        os.waitpid(child, 0)


def test_a_queue_file_that_cannot_be_opened_leaves_writes_to_sqlites_lock(db):
    queue_path(db).mkdir()  # what open() refuses even to root
    store = Store.open(f"sqlite:///{db}")
    with store.writing() as conn:
        insert_alarm(conn, "test", None, "unqueued", "written")
    assert _alarm_order(store) == ["unqueued"]
    store.close()
