"""The plant database schema: SQLAlchemy 2.0 typed models, one class per table.

Why it looks the way it does:

* ``readings`` is the big table (millions of rows per week), so it holds numbers only:
  ``(series_id, ts_us, value, batch_id)``. The strings of the natural key live once per time
  series in ``series`` (station, charge, stick, sensor; unique), which the readings of that
  series (typically 10-100) share. The natural key of a reading,
  ``(station, charge_id, stick_id, sensor, timestamp)``, is therefore enforced by two keys:
  ``series``' unique constraint and ``readings``' primary key ``(series_id, ts_us)``;
  ingestion relies on them to store nothing twice (``INSERT ... ON CONFLICT DO NOTHING``).
  Why not five string columns in ``readings``: measured on the 2-core reference machine, the
  SQLite insert of a 7-column text-keyed row cost ~10 us, over the whole 100k readings/s
  budget; the 4-number row is a fraction of that and the table is 3x smaller. On SQLite the
  table is ``WITHOUT ROWID`` so that the key is the only B-tree written per row.
* Timestamps of readings are stored as integer microseconds since the Unix epoch, UTC
  (``ts_us``): identical on SQLite and PostgreSQL, exact under equality (the natural key must
  compare exactly), and cheap to bulk insert; so are the ``first_seen_us`` columns of charges
  and sticks (kept with ``min()`` upserts). Microseconds are PostgreSQL's own resolution;
  finer input is truncated. Bookkeeping timestamps (batches, models) are ordinary
  timezone-aware ``DateTime`` columns.
* No foreign keys on ``readings``: a per-row FK check would halve bulk-insert throughput; the
  ingester writes the ``charges``/``sticks`` rows in the same transaction instead.
* ``models`` and ``flags`` are not used by ingestion; they are here so that the model registry
  and the station scorers find their tables in every migrated plant database.
* The station scorers read only what arrived since their checkpoint. ``commit_seq`` numbers
  finished ingestion batches in *commit* order (batch ids are taken before the writer lock,
  so two batches may commit in the other order); ``batch_sticks`` lists, per batch, the
  (station, charge, stick) that got new readings -- one row per stick and station, a few
  percent of the readings -- so a poll never scans ``readings``. ``scorer_pending`` holds the
  sticks a scorer has seen arrive but not yet flagged (waiting for the station to complete),
  ``scorer_checkpoints`` each scorer's position and sink offset, ``alarms`` what an operator
  must look at.
* The tables the services keep their own state in (scorer checkpoints and pending sticks,
  guards, alarms, leases, the daemon's schedule and events, delivery cursors) are in
  :mod:`qcllp.store.schema_services`, on the same ``Base``.

Every change to these models needs a new migration in ``qcllp/store/migrations/versions``;
``tests/store/test_migrations.py`` fails when models and migrations disagree.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "Charge",
    "Stick",
    "Reading",
    "Series",
    "DefectCount",
    "DefectCountConflict",
    "IngestionBatch",
    "QuarantineRow",
    "Watermark",
    "Model",
    "Flag",
    "Inspection",
    "BatchStick",
]

ID = String(128)  # charge, stick, station, sensor and defect-type names
TS = DateTime(timezone=True)


class Base(DeclarativeBase):
    """Declarative base of all qcllp tables."""


class Charge(Base):
    """A production batch (the LLP bag); ``n_sticks`` is set when final QC reports its counts.

    ``first_seen_us`` / ``last_seen_us``: time of the earliest / latest reading of the charge,
    microseconds since the epoch (UTC): the time bounds of its readings, by which queries
    prune the monthly partitions of ``readings``.
    """

    __tablename__ = "charges"

    charge_id: Mapped[str] = mapped_column(ID, primary_key=True)
    first_seen_us: Mapped[int | None] = mapped_column(BigInteger)
    last_seen_us: Mapped[int | None] = mapped_column(BigInteger)
    n_sticks: Mapped[int | None] = mapped_column(Integer)
    counts_batch_id: Mapped[int | None] = mapped_column(
        ForeignKey("ingestion_batches.id"), index=True
    )


class Stick(Base):
    """One stick of a charge; ``first_seen_us``: its earliest reading (epoch µs, UTC)."""

    __tablename__ = "sticks"

    charge_id: Mapped[str] = mapped_column(ID, primary_key=True)
    stick_id: Mapped[str] = mapped_column(ID, primary_key=True)
    first_seen_us: Mapped[int | None] = mapped_column(BigInteger)


class Series(Base):
    """One time series: the readings of one sensor for one stick at one station.

    Together with ``readings``' key ``(series_id, ts_us)`` its unique key gives the natural
    key of a reading, ``(station, charge_id, stick_id, sensor, timestamp)``.
    """

    __tablename__ = "series"
    __table_args__ = (UniqueConstraint("station", "charge_id", "stick_id", "sensor"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    station: Mapped[str] = mapped_column(ID, nullable=False)
    charge_id: Mapped[str] = mapped_column(ID, nullable=False)
    stick_id: Mapped[str] = mapped_column(ID, nullable=False)
    sensor: Mapped[str] = mapped_column(ID, nullable=False)


class Reading(Base):
    """One value of a series at one time; primary key ``(series_id, ts_us)``."""

    __tablename__ = "readings"
    __table_args__ = {"sqlite_with_rowid": False}

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    ts_us: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    value: Mapped[float] = mapped_column(Double(), nullable=False)
    batch_id: Mapped[int] = mapped_column(Integer, nullable=False)


class SensorCode(Base):
    """A small integer per (station, sensor) that the kept statistics name a series' sensor by
    (:data:`qcllp.store.series_stats.RECORD`): given when the ingester first meets the pair,
    never changed or reused, so a reader's map of codes stays right as the table grows."""

    __tablename__ = "sensor_codes"
    __table_args__ = (UniqueConstraint("station", "sensor"),)

    code: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    station: Mapped[str] = mapped_column(ID, nullable=False)
    sensor: Mapped[str] = mapped_column(ID, nullable=False)


class StickStatistics(Base):
    """The mergeable statistics of one stick's series at one station, from which their
    features follow (:mod:`qcllp.store.series_stats`, kept by :mod:`qcllp.store.kept_stats`):
    training and the scorers read one row per stick and station, not the readings. Merged by
    the ingester in the transaction that stores the readings; rebuilt from them, which stay
    the truth, by ``qcllp features rebuild`` and by retention for a dropped month's sticks.

    ``stats``: one :data:`~qcllp.store.series_stats.RECORD` per series with readings (104
    bytes: series id, sensor code, counts, moments). One row per stick and station, not per
    series: a scorer's drain fetched three times the rows, and the driver's fetch of them was
    a third of its time (``benchmarks/bench_scorer.py`` backlog, issue 34). ``t0_us``,
    ``t1_us``: the first and last reading of its series, what retention finds a dropped
    month's rows by. Without a rowid: the rows are read by their key, as ``readings`` are.
    """

    __tablename__ = "stick_stats"
    __table_args__ = {"sqlite_with_rowid": False}

    station: Mapped[str] = mapped_column(ID, primary_key=True)
    charge_id: Mapped[str] = mapped_column(ID, primary_key=True)
    stick_id: Mapped[str] = mapped_column(ID, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    t0_us: Mapped[int] = mapped_column(BigInteger, nullable=False)
    t1_us: Mapped[int] = mapped_column(BigInteger, nullable=False)
    stats: Mapped[bytes] = mapped_column(LargeBinary(), nullable=False)


class DefectCount(Base):
    """Final-QC count of one defect type in one charge (the charge's n_sticks is on ``charges``)."""

    __tablename__ = "defect_counts"

    charge_id: Mapped[str] = mapped_column(ForeignKey("charges.charge_id"), primary_key=True)
    defect_type: Mapped[str] = mapped_column(ID, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, nullable=False)


class DefectCountConflict(Base):
    """A charge re-reported with counts that differ from the stored ones (never overwritten)."""

    __tablename__ = "defect_count_conflicts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    charge_id: Mapped[str] = mapped_column(ID, nullable=False, index=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("ingestion_batches.id"), nullable=False)
    n_sticks: Mapped[int] = mapped_column(Integer, nullable=False)
    counts: Mapped[dict] = mapped_column(JSON, nullable=False)
    detail: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class IngestionBatch(Base):
    """One unit of ingestion (a file, a SQL pull): stored atomically, with its accounting.

    ``kind``: ``measurements``, ``defect_counts`` or ``inspections``.
    """

    __tablename__ = "ingestion_batches"
    __table_args__ = (
        Index("ix_ingestion_batches_kind_checksum", "kind", "checksum"),
        UniqueConstraint("commit_seq", name="uq_ingestion_batches_commit_seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)  # measurements, ...
    source: Mapped[str] = mapped_column(Text, nullable=False)
    checksum: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), nullable=False)  # running|done|failed
    commit_seq: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[datetime] = mapped_column(TS, nullable=False)
    finished_at: Mapped[datetime | None] = mapped_column(TS)
    rows_read: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    rows_stored: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    rows_duplicate: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    rows_quarantined: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    message: Mapped[str | None] = mapped_column(Text)


class QuarantineRow(Base):
    """An input row that was not stored, with the reason a person can read."""

    __tablename__ = "quarantine"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch_id: Mapped[int] = mapped_column(
        ForeignKey("ingestion_batches.id"), nullable=False, index=True
    )
    source: Mapped[str] = mapped_column(Text, nullable=False)
    row_number: Mapped[int | None] = mapped_column(BigInteger)
    raw: Mapped[str] = mapped_column(Text, nullable=False)  # the input row as JSON
    reason: Mapped[str] = mapped_column(String(64), nullable=False)
    detail: Mapped[str] = mapped_column(Text, nullable=False)


class Watermark(Base):
    """High-water mark of an incremental SQL source (the last watermark value ingested)."""

    __tablename__ = "watermarks"

    source_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    column: Mapped[str] = mapped_column(String(128), nullable=False)
    value: Mapped[str] = mapped_column(Text, nullable=False)  # JSON-encoded
    batch_id: Mapped[int | None] = mapped_column(ForeignKey("ingestion_batches.id"))
    updated_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class Model(Base):
    """A trained station model in the registry."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    station: Mapped[str] = mapped_column(ID, nullable=False, index=True)
    method: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str] = mapped_column(String(128), nullable=False)
    params: Mapped[dict] = mapped_column(JSON, nullable=False)
    metrics: Mapped[dict] = mapped_column(JSON, nullable=False)
    features: Mapped[list] = mapped_column(JSON, nullable=False)
    artifact_path: Mapped[str] = mapped_column(Text, nullable=False)
    sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    # candidate | shadow | active | retired
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    trained_from: Mapped[datetime | None] = mapped_column(TS)
    trained_until: Mapped[datetime | None] = mapped_column(TS)
    n_charges: Mapped[int] = mapped_column(Integer, nullable=False)
    n_sticks: Mapped[int] = mapped_column(Integer, nullable=False)
    qcllp_version: Mapped[str] = mapped_column(String(32), nullable=False)
    created_at: Mapped[datetime] = mapped_column(TS, nullable=False)
    promoted_at: Mapped[datetime | None] = mapped_column(TS)


class Flag(Base):
    """A scored stick at a station: the decision of the active model, once per stick.

    ``decision``: ``lock_out``, ``pass``, ``inspect`` (an audit sample: taken aside, looked at,
    returned to the line if good) or ``unscorable`` (then ``probability`` is null and ``reason``
    says why, e.g. which sensor is missing); ``flagged`` is ``decision == "lock_out"``.
    ``arrived_at``: when the reading that completed the stick was stored.
    Indexed by (station, id): a scorer step reads the station's flags above its sink's cursor.
    """

    __tablename__ = "flags"
    __table_args__ = (
        UniqueConstraint("station", "charge_id", "stick_id"),
        Index("ix_flags_station_id", "station", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    station: Mapped[str] = mapped_column(ID, nullable=False)
    charge_id: Mapped[str] = mapped_column(ID, nullable=False)
    stick_id: Mapped[str] = mapped_column(ID, nullable=False)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), nullable=False)
    probability: Mapped[float | None] = mapped_column(Double())
    flagged: Mapped[bool] = mapped_column(Boolean, nullable=False)
    decision: Mapped[str] = mapped_column(String(16), nullable=False, server_default="pass")
    reason: Mapped[str | None] = mapped_column(Text)
    threshold: Mapped[float] = mapped_column(Double(), nullable=False)
    arrived_at: Mapped[datetime | None] = mapped_column(TS)
    scored_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class ShadowFlag(Base):
    """What a model on a shadow trial would have decided for a stick; the line acts on none.

    A station's ``shadow`` model (:mod:`qcllp.station.registry`) is scored on the same sticks
    as its active model (or alone, when the station has none). ``decision`` is ``lock_out``,
    ``pass`` or ``unscorable`` as in :class:`Flag`; final QC's counts of the stick's charge (and
    any inspection of the stick) later judge it. One row per model and stick; indexed by
    (station, charge): the trial's evaluation reads a station's rows charge by charge.
    """

    __tablename__ = "shadow_flags"
    __table_args__ = (
        UniqueConstraint("model_id", "charge_id", "stick_id", name="uq_shadow_flags_stick"),
        Index("ix_shadow_flags_station_charge", "station", "charge_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    station: Mapped[str] = mapped_column(ID, nullable=False)
    charge_id: Mapped[str] = mapped_column(ID, nullable=False)
    stick_id: Mapped[str] = mapped_column(ID, nullable=False)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), nullable=False)
    probability: Mapped[float | None] = mapped_column(Double())
    decision: Mapped[str] = mapped_column(String(16), nullable=False)
    threshold: Mapped[float] = mapped_column(Double(), nullable=False)
    scored_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class Inspection(Base):
    """A stick looked at by a person at a station: at the lock-out bay before it is scrapped,
    or taken aside as an audit sample. ``result`` is ``ok`` or one of the plant's defect types.

    ``flag_id`` is the station's flag of the stick when the inspection was stored (null if the
    stick had none); ``audit`` is true when that flag did not lock the stick out (or there was
    none): the inspection is then a sample of what the model let pass, not evidence on its
    lock-outs. One inspection per stick and station: a second with the same result is a
    duplicate, one with another result is quarantined. Indexed by (station, id): the scorer's
    inspection guard reads only the inspections above its cursor.
    """

    __tablename__ = "inspections"
    __table_args__ = (
        UniqueConstraint("station", "charge_id", "stick_id", name="uq_inspections_stick"),
        Index("ix_inspections_station_id", "station", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    station: Mapped[str] = mapped_column(ID, nullable=False)
    charge_id: Mapped[str] = mapped_column(ID, nullable=False)
    stick_id: Mapped[str] = mapped_column(ID, nullable=False)
    result: Mapped[str] = mapped_column(ID, nullable=False)
    inspected_at: Mapped[datetime | None] = mapped_column(TS)
    flag_id: Mapped[int | None] = mapped_column(Integer)
    audit: Mapped[bool] = mapped_column(Boolean, nullable=False)
    batch_id: Mapped[int] = mapped_column(
        ForeignKey("ingestion_batches.id"), nullable=False, index=True
    )
    stored_at: Mapped[datetime] = mapped_column(TS, nullable=False)


class BatchStick(Base):
    """A stick that got new readings at a station in an ingestion batch."""

    __tablename__ = "batch_sticks"

    batch_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    station: Mapped[str] = mapped_column(ID, primary_key=True)
    charge_id: Mapped[str] = mapped_column(ID, primary_key=True)
    stick_id: Mapped[str] = mapped_column(ID, primary_key=True)


from qcllp.store import schema_services  # noqa: E402, F401 - their tables join Base.metadata
