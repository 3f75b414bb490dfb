"""The tables the services keep their own state in, on the plant schema's ``Base``
(:mod:`qcllp.store.schema`, which imports this module so that ``Base.metadata`` holds them).

* ``scorer_checkpoints`` each scorer's position and sink offset, ``scorer_pending`` the sticks
  a scorer has seen arrive but not yet flagged (waiting for the station to complete),
  ``lockout_guards`` the guards' state, ``alarms`` what an operator must look at,
  ``flag_deliveries`` how far a station's flags reached MQTT and the PLC (OPC UA).
* The retraining daemon keeps its schedule in ``retrainer_jobs`` -- APScheduler's own
  ``SQLAlchemyJobStore`` table, declared here with exactly the library's columns so that the
  migrations create it and the schema test covers it -- its leases (who may train what, until
  when) in ``leases`` and every decision it takes in ``retrainer_events``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    Unicode,
)
from sqlalchemy.orm import Mapped, mapped_column

from qcllp.store.schema import ID, TS, Base

__all__ = [
    "RETRAINER_JOBS",
    "Alarm",
    "FlagDelivery",
    "Lease",
    "LockoutGuard",
    "RetrainerEvent",
    "ScorerCheckpoint",
    "ScorerPending",
]


class ScorerCheckpoint(Base):
    """Where a station scorer stands: the last batch ``commit_seq`` it has taken in, its sink
    file (claimed before the first append), the byte offset up to which that file holds
    committed flags, the highest flag id in it (the delivery cursor), and the model it scores
    with (:mod:`qcllp.scoring.flag_sink`)."""

    __tablename__ = "scorer_checkpoints"

    station: Mapped[str] = mapped_column(ID, primary_key=True)
    commit_seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    sink_path: Mapped[str | None] = mapped_column(Text)
    sink_offset: Mapped[int] = mapped_column(BigInteger, nullable=False)
    sink_flag_id: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    model_id: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class FlagDelivery(Base):
    """How far a station's flags reached a channel other than the sink (``mqtt``, ``opcua``:
    one row each): the highest flag id the channel acknowledged with every flag before it (the
    delivery cursor). The flags table is the outbox: a flag is committed with its step, and a
    publisher moves this cursor only after the channel acknowledged
    (:mod:`qcllp.scoring.flag_outbox`)."""

    __tablename__ = "flag_deliveries"

    station: Mapped[str] = mapped_column(ID, primary_key=True)
    channel: Mapped[str] = mapped_column(String(32), primary_key=True)
    flag_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class ScorerPending(Base):
    """A stick seen at a station but not flagged yet: due for a completeness check at
    ``due_at``, at once when ``later_seen`` (it has readings at a later station)."""

    __tablename__ = "scorer_pending"
    __table_args__ = (Index("ix_scorer_pending_station_due", "station", "due_at"),)

    station: Mapped[str] = mapped_column(ID, primary_key=True)
    charge_id: Mapped[str] = mapped_column(ID, primary_key=True)
    stick_id: Mapped[str] = mapped_column(ID, primary_key=True)
    first_arrived_at: Mapped[datetime] = mapped_column(TS, nullable=False)
    arrived_at: Mapped[datetime] = mapped_column(TS, nullable=False)
    due_at: Mapped[datetime] = mapped_column(TS, nullable=False)
    later_seen: Mapped[bool] = mapped_column(Boolean, nullable=False)


class LockoutGuard(Base):
    """The scorer's lock-out guard of one model at one station: sticks it decided and locked
    out, its recent excess of lock-outs (CUSUM, :mod:`qcllp.station.guard_bounds`), final QC's
    word on it (``count_*``: charges compared, failures predicted among the sticks that reached
    QC and failures reported, charges that could not be compared (the latest with its reason),
    and the CUSUM of the over-prediction; :mod:`qcllp.scoring.count_guard`), the inspections
    of its lock-outs (``inspect_*``: the highest inspection id taken in, lock-outs inspected
    failing and good, and the CUSUM of their shortfall in precision), and since when its
    lock-outs are suspended (the plant is not the one it learned;
    :mod:`qcllp.scoring.share_guard`)."""

    __tablename__ = "lockout_guards"

    station: Mapped[str] = mapped_column(ID, primary_key=True)
    model_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    decided: Mapped[int] = mapped_column(BigInteger, nullable=False)
    locked: Mapped[int] = mapped_column(BigInteger, nullable=False)
    suspended_at: Mapped[datetime | None] = mapped_column(TS)
    reason: Mapped[str | None] = mapped_column(Text)
    excess: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    count_charges: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    count_skipped: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    count_predicted: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    count_observed: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    count_excess: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    count_skip_reason: Mapped[str | None] = mapped_column(Text)
    inspect_id: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    inspect_fail: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    inspect_good: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    inspect_excess: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")


class Alarm(Base):
    """Something an operator must look at (a model refused, a sink file cut short, ...)."""

    __tablename__ = "alarms"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(64), nullable=False)
    station: Mapped[str | None] = mapped_column(ID)
    kind: Mapped[str] = mapped_column(String(64), nullable=False)
    message: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class Lease(Base):
    """Who may do a piece of work alone, until when: ``retrainer`` (the daemon that runs the
    plant's jobs) and ``train:<station>`` (whoever trains that station, daemon or ``qcllp
    train``). A holder renews ``expires_at`` while it works; a lease past it is free, so a
    holder that was killed blocks nobody for longer than its time to live
    (:mod:`qcllp.store.leases`)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), nullable=False)
    acquired_at: Mapped[datetime] = mapped_column(TS, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class RetrainerEvent(Base):
    """One thing the retraining daemon did or decided: a job run, a model trained, a promotion
    or its refusal (``reason``), a drift check; ``detail`` holds the figures behind it."""

    __tablename__ = "retrainer_events"
    __table_args__ = (Index("ix_retrainer_events_kind_station", "kind", "station"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(TS, nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    station: Mapped[str | None] = mapped_column(ID)
    model_id: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(32), nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    detail: Mapped[dict] = mapped_column(JSON, nullable=False)


RETRAINER_JOBS = Table(
    "retrainer_jobs",
    Base.metadata,
    # apscheduler.jobstores.sqlalchemy.SQLAlchemyJobStore's table, column for column
    Column("id", Unicode(191), primary_key=True),
    Column("next_run_time", Float(25), index=True),
    Column("job_state", LargeBinary, nullable=False),
)
