"""Leases in the plant database: who may do a piece of work alone, and until when.

Two kinds are used:

* ``retrainer`` -- held by the one retraining daemon that runs the plant's jobs; a second
  daemon started by mistake waits as a standby and takes over when the lease expires;
* ``train:<station>`` -- held while a station is trained, by the daemon or by ``qcllp train``,
  so that two trainings of one station never run at once.

A lease is a row ``(name, holder, expires_at)``. Taking it is one transaction: insert the row
if there is none, then take it over where it is ours or has expired (``UPDATE ... WHERE holder
= me OR expires_at < now``); whoever's update matched holds it. This works alike on SQLite
(the writer lock serializes the transaction) and PostgreSQL (the row lock does), needs no
advisory-lock session kept open for hours, and survives a ``kill -9``: the dead holder's
lease simply expires after its time to live. A holder renews while it works
(:class:`HeldLease`'s heartbeat thread); a holder that could not renew in time has lost the
lease and must not commit its work (:meth:`HeldLease.check`).

Why not PostgreSQL advisory locks (as the scorers use): they die with the connection, which
is right for a step of a second, but a training of many minutes would have to keep one
connection open through database restarts; and SQLite has none.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import SQLAlchemyError

from qcllp.store import Lease, Store, dialect_insert, stored_utc

__all__ = [
    "HeldLease",
    "LeaseBusy",
    "LeaseLost",
    "RETRAINER_LEASE",
    "acquire",
    "holder_id",
    "lease_holder",
    "release",
    "renew",
    "scorer_lock_key",
    "station_lease_name",
]

log = logging.getLogger(__name__)
_T = Lease.__table__
RETRAINER_LEASE = "retrainer"  # held by the plant's one working retraining daemon
BEAT_MAX_S = 10.0  # a held lease is renewed at least this often (one UPDATE)
RETRY_S = 2.0  # a failed renewal is tried again this soon (or at the next beat, if sooner)


class LeaseBusy(RuntimeError):
    """The lease is held by someone else (``holder``, until ``expires_at``)."""

    def __init__(self, name: str, holder: str, expires_at: datetime):
        self.name, self.holder, self.expires_at = name, holder, expires_at
        super().__init__(
            f"{_what(name)} is held by {holder} until {expires_at:%Y-%m-%d %H:%M:%S} UTC; "
            "wait for it to finish (or for the lease to expire if that process is gone)"
        )


class LeaseLost(RuntimeError):
    """A holder could not renew its lease in time: its work must not be committed."""


def _what(name: str) -> str:
    if name.startswith("train:"):
        return f"training of station {name.removeprefix('train:')!r}"
    return f"lease {name!r}"


def scorer_lock_key(station: str) -> int:
    """The PostgreSQL advisory-lock key of a station's scorer step: the scorers take it
    (:func:`qcllp.scoring.step.station_lock`), and so does a promotion, so that it never
    interleaves with a step's read and write of the station's lock-out guard."""
    digest = hashlib.sha256(f"qcllp-scorer:{station}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def station_lease_name(station: str) -> str:
    return f"train:{station}"


def holder_id() -> str:
    """``host:pid:random`` -- unique per process and readable in ``qcllp status``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _now() -> datetime:
    return datetime.now(UTC)


def acquire(store: Store, name: str, holder: str, ttl_s: float) -> bool:
    """Take (or extend) the lease for ``ttl_s`` seconds; ``False`` if another holds it."""
    now = _now()
    expires = now + timedelta(seconds=ttl_s)
    with store.writing() as conn:
        conn.execute(
            dialect_insert(conn, _T)
            .values(name=name, holder=holder, acquired_at=now, expires_at=expires)
            .on_conflict_do_nothing(index_elements=["name"])
        )
        row = conn.execute(
            select(_T.c.holder, _T.c.expires_at).where(_T.c.name == name).with_for_update()
        ).one()
        if row.holder == holder:
            values = {"expires_at": expires}
        elif stored_utc(row.expires_at) < now:  # the holder is gone: a new tenure
            values = {"holder": holder, "acquired_at": now, "expires_at": expires}
        else:
            return False
        conn.execute(update(_T).where(_T.c.name == name).values(**values))
    return True


def renew(store: Store, name: str, holder: str, ttl_s: float) -> bool:
    """Extend a lease we hold; ``False`` if it is no longer ours (expired and taken)."""
    expires = _now() + timedelta(seconds=ttl_s)
    with store.writing() as conn:
        return (
            conn.execute(
                update(_T)
                .where(_T.c.name == name, _T.c.holder == holder)
                .values(expires_at=expires)
            ).rowcount
            == 1
        )


def release(store: Store, name: str, holder: str) -> None:
    """Give the lease up (nothing happens if it is not ours any more)."""
    with store.writing() as conn:
        conn.execute(delete(_T).where(_T.c.name == name, _T.c.holder == holder))


def lease_holder(store: Store, name: str) -> tuple[str, datetime] | None:
    """Who holds the lease and until when, or ``None`` (free or expired)."""
    with store.engine.connect() as conn:
        row = conn.execute(select(_T.c.holder, _T.c.expires_at).where(_T.c.name == name)).first()
    if row is None:
        return None
    expires = stored_utc(row.expires_at)
    return None if expires < _now() else (row.holder, expires)


@dataclass
class HeldLease:
    """A lease held while a piece of work runs, renewed by a heartbeat thread every third of
    its time to live (at most :data:`BEAT_MAX_S`). Use as a context manager::

        with HeldLease.take(store, station_lease_name("rolling"), ttl_s=120) as lease:
            ...              # long work
            lease.check()    # before committing: raises LeaseLost if it was lost
    """

    store: Store
    name: str
    holder: str
    ttl_s: float

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread: threading.Thread | None = None
        # why renewing fails (the database away) and since when; None while renewals succeed
        self.failing: tuple[str, datetime] | None = None

    @classmethod
    def take(cls, store: Store, name: str, *, ttl_s: float, holder: str | None = None) -> HeldLease:
        """Acquire now or raise :class:`LeaseBusy`; the heartbeat starts with ``with``."""
        holder = holder or holder_id()
        if not acquire(store, name, holder, ttl_s):
            held = lease_holder(store, name)
            who, until = held if held is not None else ("another process", _now())
            raise LeaseBusy(name, who, until)
        return cls(store, name, holder, ttl_s)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless the lease is still ours (renewed just now)."""
        if self._lost.is_set() or not renew(self.store, self.name, self.holder, self.ttl_s):
            self._lost.set()
            raise LeaseLost(f"{_what(self.name)}: the lease was lost; nothing was committed")

    def _beat(self) -> None:
        """Renew every third of the time to live, at least every :data:`BEAT_MAX_S` (a
        database that went away shows in :attr:`failing` within seconds, not a third of a
        two-minute lease); after a failure every :data:`RETRY_S` until a renewal succeeds,
        so that :attr:`failing` clears soon after the database is back. A failure is logged
        when it starts, not at every retry."""
        beat = min(self.ttl_s / 3, BEAT_MAX_S)
        wait = beat
        while not self._stop.wait(wait):
            try:
                renewed = renew(self.store, self.name, self.holder, self.ttl_s)
            except SQLAlchemyError as exc:
                reason = str(getattr(exc, "orig", exc)).strip().splitlines() or [""]
                if self.failing is None:
                    log.warning("could not renew lease %s; retrying", self.name, exc_info=True)
                since = self.failing[1] if self.failing else _now()
                self.failing = (f"{type(exc).__name__}: {reason[0][:300]}", since)
                wait = min(beat, RETRY_S)
                continue
            if not renewed:
                self._lost.set()
                log.error("lease %s lost (taken over after it expired)", self.name)
                return
            if self.failing is not None:
                log.warning("lease %s renewed again", self.name)
            self.failing, wait = None, beat

    def __enter__(self) -> HeldLease:
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            release(self.store, self.name, self.holder)
        except SQLAlchemyError:  # it expires by itself
            log.warning("could not release lease %s; it expires by itself", self.name)
