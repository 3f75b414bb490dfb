"""SQLite's writers served in turn: an OS file lock in front of the database's writer lock.

SQLite has one writer lock, and a writer that finds it taken does not queue for it: its busy
handler sleeps and retries, in steps that grow to 100 ms. With a handful of processes writing
many times a second -- the intake and one scorer per station, each committing several times
a second -- a writer can miss the lock's free moments again and again, and the line's flags
wait seconds for it. Measured with six processes each holding the lock 20 ms then pausing 0.1 s
(``benchmarks/bench_writer_queue.py``): the busy handler's wait had a p99 of 334 ms, the
queue's 2.6 ms.

So qcllp's SQLite write transactions (``Store.write``, ``Store.write_session``,
``Store.writing``; not the migrations when a store opens, nor APScheduler's own job store)
first take an exclusive ``flock`` on a file beside the database (``<database>-writers``): the
kernel wakes a waiter as soon as it is released, with no polling. It is not strictly first
come, first served (a writer arriving at that moment may take it first), but no writer sleeps
through the lock's free moments. The database's own lock stays the truth -- the queue only
orders who asks for it next -- so a writer that bypasses the queue (another program, an older
qcllp) is still safe, only not served in turn.

A waiter gives up after ``timeout_s`` (the busy timeout's 60 s; a writer outside the queue can
still hold SQLite's lock for a busy timeout after that) with SQLite's own "database is
locked" (as SQLAlchemy's ``OperationalError``, which callers already handle), so a process
stuck inside a transaction shows up as the error it always did rather than as a hang. The
blocking ``flock`` runs in a helper thread and the caller waits for it with a timeout: a
blocking ``flock`` cannot be interrupted, and the libraries that offer a file lock with a
timeout (``filelock``, ``portalocker``) poll for it, which is the problem this solves.

A turn is held by its own open file, so two threads of one process queue like two processes;
closing the file (done by the kernel when the process dies, ``kill -9`` included) ends the
turn, and a forked child closes the ones it inherited.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import OperationalError

__all__ = ["WriterQueue", "queue_path"]

log = logging.getLogger("qcllp.store")
_OPEN: set[int] = set()  # the queue files this process has open (held or waited for)


def _close_in_child() -> None:
    """A forked child gives up the turns it inherited (without exec a descriptor, and so its
    lock, would live on in the child after the parent ended the turn)."""
    for fd in list(_OPEN):
        _OPEN.discard(fd)
        os.close(fd)


os.register_at_fork(after_in_child=_close_in_child)


def queue_path(database: str | Path) -> Path:
    """The queue's file beside an SQLite database file (as ``-wal`` and ``-shm`` are)."""
    return Path(f"{database}-writers")


class WriterQueue:
    """The turns of the writers of the SQLite database file ``database`` (module docstring)."""

    def __init__(self, database: str | Path, timeout_s: float = 60.0):
        self.database = Path(database)
        self.path = queue_path(database)
        self.timeout_s = timeout_s
        self._warned = False

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the queue's turn for the body (the caller's write transaction). Without the
        queue's file (see :meth:`_open`) the body runs on SQLite's own lock alone."""
        fd = self._open()
        if fd is None:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._wait(fd)  # when it raises, it has closed fd or handed it to its helper
        except BaseException:
            _close(fd)
            raise
        try:
            yield
        finally:
            _close(fd)  # the turn ends with its file

    def _open(self) -> int | None:
        """The queue's file, opened for a turn (created with the database file's permission
        bits; a lock needs no write access). ``None`` when it cannot be: a folder that is not
        there is left to SQLite's own error, a file another user created and this one may not
        open is warned of once -- writing goes on, only not in turn."""
        try:
            mode = os.stat(self.database).st_mode & 0o666
        except OSError:
            mode = 0o600
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, mode)
        except PermissionError as exc:
            if not self._warned:
                self._warned = True
                log.warning("writers of %s not served in turn: %s", self.database, exc)
            return None
        except OSError:
            return None
        _OPEN.add(fd)
        return fd

    def _wait(self, fd: int) -> None:
        """Wait for the turn in a helper thread, at most ``timeout_s``. Past it, or when the
        wait is interrupted (Ctrl-C), the turn is abandoned -- the helper ends it the moment
        it comes -- and the error raised; a wait never leaves this process holding a turn."""
        waiter = _Waiter(fd)
        try:
            threading.Thread(target=waiter.run, name="qcllp-writer-queue", daemon=True).start()
        except BaseException:
            _close(fd)
            raise
        try:
            came = waiter.done.wait(self.timeout_s)
        except BaseException:
            if waiter.abandon():
                _close(fd)
            raise
        if not came and not waiter.abandon():
            raise self._locked(
                f"database is locked: no turn to write after {self.timeout_s:g} s (a writer "
                f"of this database, in another process or another thread, holds {self.path})"
            )
        if waiter.error is not None:
            _close(fd)
            raise self._locked(f"unable to lock {self.path}: {waiter.error}")

    @staticmethod
    def _locked(message: str) -> OperationalError:
        """SQLite's error as SQLAlchemy raises it (what callers of a write handle)."""
        return OperationalError("BEGIN IMMEDIATE", None, sqlite3.OperationalError(message))


class _Waiter:
    """One wait for a turn: a helper thread blocks in ``flock``; the caller waits for it, and
    whoever comes second -- the caller giving up, the helper getting the turn -- closes the
    file if the caller gave up."""

    def __init__(self, fd: int):
        self.fd = fd
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self._lock:
            if self._abandoned:
                _close(self.fd)
            self.done.set()

    def abandon(self) -> bool:
        """Give the wait up. ``True``: the helper had finished, the file is the caller's to
        close; ``False``: the helper will close it."""
        with self._lock:
            if self.done.is_set():
                return True
            self._abandoned = True
            return False


def _close(fd: int) -> None:
    _OPEN.discard(fd)
    os.close(fd)
