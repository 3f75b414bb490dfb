"""SQLite's writers served in turn: an OS file lock in front of the database's writer lock.

SQLite has one writer lock, and a writer that finds it taken does not queue for it: its busy
handler sleeps and retries, in steps that grow to 100 ms. With a handful of processes writing
many times a second -- the intake and one scorer per station, each committing several times
a second -- a writer can miss the lock's free moments again and again, and the line's flags
wait seconds for it. Measured with six processes each holding the lock 20 ms ten times a
second (``benchmarks/bench_writer_queue.py``): the busy handler's wait has a p99 of about
430 ms, a kernel file lock's about 5 ms.

So every SQLite write transaction of qcllp (``Store.write``, ``Store.write_session``,
``Store.writing``) first takes an exclusive ``flock`` on a file beside the database
(``<database>-writers``): the kernel wakes its waiters as soon as it is released, with no
polling. The database's own lock stays the truth -- the queue only orders who asks for it
next -- so a writer that bypasses the queue (another program, an older qcllp) is still safe,
only not served in turn.

A waiter gives up after ``timeout_s`` (the busy timeout's 60 s) with SQLite's own "database is
locked" (as SQLAlchemy's ``OperationalError``, which callers already handle), so a process
stuck inside a transaction shows up as the error it always did rather than as a hang. The
blocking ``flock`` runs in a helper thread and the caller waits for it with a timeout: a
blocking ``flock`` cannot be interrupted, and the libraries that offer a file lock with a
timeout (``filelock``, ``portalocker``) poll for it, which is the problem this solves.

A turn is held by its own open file, so two threads of one process queue like two processes;
closing the file (done by the kernel when the process dies, ``kill -9`` included) ends the
turn. A process forked while it holds a turn shares that file: qcllp forks no worker inside a
write transaction.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import OperationalError

__all__ = ["WriterQueue", "queue_path"]


def queue_path(database: str | Path) -> Path:
    """The queue's file beside an SQLite database file (as ``-wal`` and ``-shm`` are)."""
    return Path(f"{database}-writers")


class WriterQueue:
    """The turns of one SQLite database's writers (module docstring)."""

    def __init__(self, path: str | Path, timeout_s: float = 60.0):
        self.path = Path(path)
        self.timeout_s = timeout_s

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the queue's turn for the body (the caller's write transaction)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # the database's folder gone or not writable: as SQLite says it
            why = sqlite3.OperationalError(f"unable to open database file: {exc}")
            raise OperationalError("BEGIN IMMEDIATE", None, why) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._wait(fd)  # on a timeout the helper thread closes fd once it gets the turn
        except BaseException:
            os.close(fd)
            raise
        try:
            yield
        finally:
            os.close(fd)  # the turn ends with its file

    def _wait(self, fd: int) -> None:
        """Wait for the turn in a helper thread, at most ``timeout_s``; past it, the turn is
        abandoned (the helper closes ``fd`` when it comes) and SQLite's error is raised."""
        got, lock = threading.Event(), threading.Lock()
        abandoned = False

        def wait() -> None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with lock:
                if abandoned:
                    os.close(fd)
                else:
                    got.set()

        threading.Thread(target=wait, name="qcllp-writer-queue", daemon=True).start()
        if got.wait(self.timeout_s):
            return
        with lock:
            if got.is_set():
                return
            abandoned = True
        why = sqlite3.OperationalError(
            f"database is locked: no turn to write after {self.timeout_s:g} s "
            f"(another process holds {self.path})"
        )
        raise OperationalError("BEGIN IMMEDIATE", None, why)
