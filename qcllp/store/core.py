"""``Store``: one plant database (SQLite file by default, PostgreSQL for bigger plants).

``Store.open(url)`` creates or migrates the database to the newest schema
(:mod:`qcllp.store.migrate`): a plant database upgrades in place. The read helpers return
pandas frames with the dtypes the feature builder and the learners expect.

SQLite settings, and why: WAL journal (readers -- scorers, the feature builder -- never block
the ingester and vice versa), ``synchronous=NORMAL`` (durable at each checkpoint, safe against
application crashes, the usual WAL pairing), a busy timeout instead of instant "database is
locked" errors, foreign keys on, and pysqlite's own transaction handling switched off so that
SQLAlchemy's ``BEGIN`` is really the start of the transaction -- writers use ``BEGIN IMMEDIATE``
(:meth:`Store.write`) so that two ingesters serialize instead of deadlocking.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, Table, func, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session

from qcllp.store import migrate
from qcllp.store.credentials import display_url
from qcllp.store.driver_sql import placeholders, us_to_utc
from qcllp.store.engines import (
    SQLITE_BUSY_TIMEOUT_S,
    StoreError,
    create_private,
    server_engine,
    sqlite_engine,
    sqlite_file_exists,
)
from qcllp.store.problems import database_problem, url_problem
from qcllp.store.schema import (
    Charge,
    DefectCount,
    DefectCountConflict,
    IngestionBatch,
    QuarantineRow,
    Reading,
    Series,
    Stick,
)
from qcllp.store.writer_queue import WriterQueue

if TYPE_CHECKING:  # the functions building frames import pandas: `qcllp models list` needs none
    import pandas as pd

__all__ = [
    "IN_CHUNK",
    "charge_time_bounds",
    "Store",
    "StoreError",
    "dialect_insert",
    "rows_frame",
]

_ADVISORY_LOCK_KEY = 0x51C11F  # PostgreSQL advisory lock held by a writing ingester
IN_CHUNK = 2000  # ids per IN (...) list: far below SQLite's and psycopg's parameter limits


def dialect_insert(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """``INSERT`` into ``table`` in the connection's dialect (SQLite or PostgreSQL), which
    offers ``on_conflict_do_nothing`` / ``on_conflict_do_update``."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def charge_time_bounds(conn: Connection, charge_ids: Sequence[str]) -> tuple[int, int] | None:
    """``(lo_us, hi_us)``, inclusive, holding every reading of these charges: their least
    ``first_seen_us`` and greatest ``last_seen_us``; ``None`` when none has readings.

    A query of readings bounded by it touches only the months in between on a partitioned
    ``readings`` (:mod:`qcllp.store.partitions`): its cost follows what it asks for, not the
    stored history. Exact, not a heuristic: the writer keeps both columns with least/greatest
    upserts in the transaction that stores the readings.
    """
    ids = list(charge_ids)
    lows, highs = [], []
    for start in range(0, len(ids), IN_CHUNK):
        part = ids[start : start + IN_CHUNK]
        lo, hi = conn.exec_driver_sql(
            "SELECT min(first_seen_us), max(last_seen_us) FROM charges "
            f"WHERE charge_id IN ({placeholders(conn, len(part))})",
            tuple(part),
        ).one()
        if lo is not None and hi is not None:
            lows.append(int(lo))
            highs.append(int(hi))
    return (min(lows), max(highs)) if lows else None


def rows_frame(rows: Sequence, columns: list[str]) -> pd.DataFrame:
    """A frame from result rows, built column-wise (much faster than per-row Row handling)."""
    import pandas as pd

    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame(dict(zip(columns, zip(*rows, strict=True), strict=True)))


class Store:
    """One plant database. Create with :meth:`open`."""

    def __init__(self, engine: Engine, models_dir: Path | None = None):
        self.engine = engine
        self.server_models_dir = None if models_dir is None else Path(models_dir)
        database = engine.url.database
        file = engine.dialect.name == "sqlite" and database not in (None, "", ":memory:")
        self._writers = (
            WriterQueue(os.path.realpath(database), timeout_s=SQLITE_BUSY_TIMEOUT_S)
            if file and not database.startswith("file:")  # a URI name: SQLite's lock alone
            else None
        )

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self.engine.dialect.name

    @property
    def url(self) -> URL:
        """The database URL, parsed once by the engine (render it with ``hide_password``)."""
        return self.engine.url

    @property
    def revision(self) -> str | None:
        """The schema revision the database is at (``None``: no qcllp schema)."""
        return migrate.current_revision(self.engine)

    @property
    def display_url(self) -> str:
        """The URL as it may be printed or logged: every password in it masked
        (:func:`qcllp.store.credentials.display_url`)."""
        return display_url(self.url)

    @property
    def models_dir(self) -> Path | None:
        """Where model artifacts of this database live: ``models/`` beside an SQLite file.

        A server database's (or an in-memory one's) is the folder it was opened with (the plant
        config's :attr:`~qcllp.plant.config.PlantConfig.models_dir`), ``None`` if none was given.
        """
        database = self.url.database
        if self.dialect != "sqlite" or database in (None, "", ":memory:"):
            return self.server_models_dir
        return Path(database).resolve().parent / "models"

    @classmethod
    def open(
        cls,
        url: str,
        *,
        create: bool = True,
        statement_timeout_s: float | None = None,
        models_dir: Path | None = None,
    ) -> Store:
        """Open the database at ``url``, creating it and migrating it to the newest schema.

        ``create=False`` refuses an empty database (no qcllp schema yet) instead of creating the
        tables: for tools that must not start a new plant database by a typo in the URL.
        ``statement_timeout_s``: on PostgreSQL the server cancels any statement of these
        connections that runs longer (``statement_timeout``, set per connection at login), so
        a service stuck behind a lock or a runaway query fails its step and retries instead of
        hanging; SQLite has its busy timeout instead. It bounds each statement, including an
        ingester's wait for another's batch (an advisory lock): a wait longer than it fails
        that ingestion, which is retried. Migrations run without it. The password of a server
        database comes from :mod:`qcllp.store.credentials`.
        """
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise StoreError(f"not a database URL: {exc}") from exc
        except ValueError as exc:  # a part SQLAlchemy cannot convert, e.g. a port "notaport"
            raise StoreError(f"not a database URL: {url_problem(url, exc)}") from exc
        shown = display_url(parsed)
        if parsed.get_backend_name() == "sqlite":
            if not create and parsed.database and not sqlite_file_exists(parsed.database):
                raise StoreError(f"no plant database at {parsed.database}")
            create_private(parsed.database)
            engine = sqlite_engine(url)
        else:
            engine = server_engine(parsed, statement_timeout_s)
        try:
            current = migrate.current_revision(engine)
        except OperationalError as exc:
            engine.dispose()
            raise StoreError(database_problem(exc, shown, opening=True)) from exc
        if current is None and not create:
            engine.dispose()
            raise StoreError(f"{shown} has no qcllp schema")
        if current == migrate.HEAD:
            return cls(engine, models_dir)
        if current is not None and current not in migrate.known_revisions():
            engine.dispose()
            raise StoreError(
                f"the database is at schema revision {current}, which this qcllp does not know "
                "(written by a newer qcllp?); upgrade qcllp"
            )
        try:
            migrate.upgrade(engine)
        except OperationalError as exc:  # e.g. SQLite's "database or disk is full"
            engine.dispose()
            raise StoreError(database_problem(exc, shown)) from exc
        return cls(engine, models_dir)

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """An ORM session in one transaction: committed on success, rolled back on error."""
        with Session(self.engine) as session, session.begin():
            yield session

    @contextmanager
    def write_session(self) -> Iterator[Session]:
        """An ORM session in one transaction that holds SQLite's writer lock from its start
        (``BEGIN IMMEDIATE``, in its turn: :meth:`writing`; on PostgreSQL a plain
        transaction).

        For transactions that read and then write (promoting a model, a rollback): in WAL mode
        a plain ``BEGIN`` reads from a snapshot, and if another connection commits before the
        first write, SQLite refuses the write at once with "database is locked" -- the busy
        timeout does not apply to an outdated snapshot. A scorer committing every second makes
        that likely. Taking the lock up front waits (busy timeout) instead of failing.
        """
        with (
            self._turn(),
            self.engine.connect().execution_options(qcllp_write=True) as conn,
            Session(bind=conn) as session,
            session.begin(),
        ):
            yield session

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """A Core connection in one transaction that writes: on SQLite it takes the writer
        lock at its start (``BEGIN IMMEDIATE``) and in turn with the other writers
        (:mod:`qcllp.store.writer_queue`); on PostgreSQL a plain transaction. qcllp's write
        transactions go through here, :meth:`write` or :meth:`write_session`; only the
        migrations and APScheduler's own job store write without them."""
        with (
            self._turn(),
            self.engine.connect().execution_options(qcllp_write=True) as conn,
            conn.begin(),
        ):
            yield conn

    def _turn(self) -> AbstractContextManager:
        """This writer's turn among the SQLite database's writers (none needed elsewhere)."""
        return self._writers.turn() if self._writers is not None else nullcontext()

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A Core connection in one *exclusive writing* transaction.

        Ingesters use it: it takes the database's writer lock up front (SQLite ``BEGIN
        IMMEDIATE`` in its turn, :meth:`writing`; PostgreSQL a transaction-scoped advisory
        lock), so what a batch reads to classify its rows (duplicate or conflict) cannot
        change before it writes.
        """
        with self.writing() as conn:
            if self.dialect == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK_KEY})")
            yield conn

    # ---------------------------------------------------------------- read helpers
    def read_series_stats(
        self, stations: Sequence[str], charge_ids: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """:func:`qcllp.store.kept_stats.read_series_stats`: what training and the scorer read."""
        from qcllp.store.kept_stats import read_series_stats

        with self.engine.connect() as conn:
            return read_series_stats(conn, stations, charge_ids)

    def read_readings(
        self, stations: Sequence[str] | None = None, charge_ids: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """Readings as a long frame (optionally only some stations and/or charges).

        Columns ``charge_id, stick_id, station`` (str), ``timestamp`` (datetime64[ns, UTC]),
        ``sensor`` (str), ``value`` (float64); ordered by station, charge, stick, sensor, time.
        The database returns numbers only (series id, time, value); the strings of the few
        series are attached in pandas, which is much faster than fetching them per reading.
        Each chunk of charges is bounded in time by :func:`charge_time_bounds`, so on a
        partitioned ``readings`` only the months of those charges are read.
        """
        import numpy as np
        import pandas as pd

        s, r = Series.__table__, Reading.__table__
        series_q = select(s.c.id, s.c.charge_id, s.c.stick_id, s.c.station, s.c.sensor)
        readings_q = select(r.c.series_id, r.c.ts_us, r.c.value).join(s, s.c.id == r.c.series_id)
        if stations is not None:
            series_q = series_q.where(s.c.station.in_(list(stations)))
            readings_q = readings_q.where(s.c.station.in_(list(stations)))
        series_parts, reading_parts = [], []
        with self.engine.connect() as conn:
            for ids in _chunks(charge_ids):
                sq, rq = series_q, readings_q
                if ids is not None:
                    sq, rq = sq.where(s.c.charge_id.in_(ids)), rq.where(s.c.charge_id.in_(ids))
                    bounds = charge_time_bounds(conn, ids)
                    if bounds is not None:
                        rq = rq.where(r.c.ts_us.between(*bounds))
                series_parts += conn.execute(sq).all()
                reading_parts += conn.execute(rq).all()
        series = rows_frame(series_parts, ["id", "charge_id", "stick_id", "station", "sensor"])
        series = series.astype(
            {
                "id": "int64",
                "charge_id": "str",
                "stick_id": "str",
                "station": "str",
                "sensor": "str",
            }
        )
        series = series.sort_values(["station", "charge_id", "stick_id", "sensor"])
        series = series.reset_index(drop=True)
        values = rows_frame(reading_parts, ["series_id", "ts_us", "value"])
        sid = values["series_id"].to_numpy(dtype="int64")
        ts = values["ts_us"].to_numpy(dtype="int64")
        rank = pd.Index(series["id"]).get_indexer(sid)  # series position = sort rank
        order = np.lexsort((ts, rank))
        rank, ts = rank[order], ts[order]
        frame = series.drop(columns="id").take(rank).reset_index(drop=True)
        frame.insert(3, "timestamp", us_to_utc(ts))
        frame["value"] = values["value"].to_numpy(dtype="float64")[order]
        return frame

    def read_defect_counts(self, defect_types: Sequence[str] | None = None) -> pd.DataFrame:
        """Final-QC counts per charge: index ``charge_id``; ``n_sticks``, one int column per type.

        Only charges whose counts are unambiguous: a charge with a recorded conflict (re-reported
        with different counts) is left out until a person resolves it. ``defect_types`` gives
        the columns and their order (pass ``config.defect_types``); by default the types found
        in the store, alphabetically. A charge without a count for one of
        the requested types (reported before that type was configured) is left out too: its
        ok count would be wrong.
        """
        import pandas as pd

        conflicted = select(DefectCountConflict.charge_id)
        with self.engine.connect() as conn:
            charges = conn.execute(
                select(Charge.charge_id, Charge.n_sticks)
                .where(Charge.n_sticks.is_not(None))
                .where(Charge.charge_id.not_in(conflicted))
                .order_by(Charge.charge_id)
            ).all()
            counts = conn.execute(
                select(DefectCount.charge_id, DefectCount.defect_type, DefectCount.count)
            ).all()
        if defect_types is None:
            defect_types = sorted({row.defect_type for row in counts})
        defect_types = list(defect_types)
        frame = pd.DataFrame(charges, columns=["charge_id", "n_sticks"]).set_index("charge_id")
        long = pd.DataFrame(counts, columns=["charge_id", "defect_type", "count"])
        wide = long.pivot(index="charge_id", columns="defect_type", values="count")
        wide = wide.reindex(index=frame.index, columns=defect_types)
        complete = wide.notna().all(axis=1)
        frame = pd.concat([frame, wide], axis=1).loc[complete]
        frame = frame.astype(dict.fromkeys(["n_sticks", *defect_types], "int64"))
        frame.index = frame.index.astype("str")
        frame.index.name = "charge_id"
        frame.columns.name = None
        return frame

    def read_sticks(self) -> pd.DataFrame:
        """All sticks: ``charge_id``, ``stick_id`` (str), ``first_seen`` (datetime64[ns, UTC])."""
        import pandas as pd

        with self.engine.connect() as conn:
            rows = conn.execute(
                select(Stick.charge_id, Stick.stick_id, Stick.first_seen_us).order_by(
                    Stick.charge_id, Stick.stick_id
                )
            ).all()
        frame = pd.DataFrame(rows, columns=["charge_id", "stick_id", "first_seen_us"])
        frame = frame.astype({"charge_id": "str", "stick_id": "str"})
        first = frame.pop("first_seen_us").to_numpy(dtype="int64")
        frame["first_seen"] = us_to_utc(first)
        return frame

    def read_charge_times(self) -> pd.Series:
        """When each charge was first seen (its first stick's first reading), UTC; index
        ``charge_id``."""
        import pandas as pd

        with self.engine.connect() as conn:
            rows = conn.execute(
                select(Stick.charge_id, func.min(Stick.first_seen_us)).group_by(Stick.charge_id)
            ).all()
        frame = rows_frame(rows, ["charge_id", "first_seen_us"])
        index = pd.Index(frame["charge_id"].astype("str"), name="charge_id")
        times = us_to_utc(frame["first_seen_us"].to_numpy(dtype="int64"))
        return pd.Series(times, index=index, name="first_seen").sort_index()

    def read_batches(self, kind: str | None = None) -> pd.DataFrame:
        """Ingestion batches, newest first: id, kind, source, checksum, status, started_at,
        finished_at, rows_read/stored/duplicate/quarantined, message."""
        t = IngestionBatch.__table__
        stmt = select(*t.c).order_by(t.c.id.desc())
        if kind is not None:
            stmt = stmt.where(t.c.kind == kind)
        with self.engine.connect() as conn:
            return rows_frame(conn.execute(stmt).all(), [c.name for c in t.c])

    def read_quarantine(
        self, batch_id: int | None = None, reason: str | None = None, limit: int | None = 1000
    ) -> pd.DataFrame:
        """Quarantined input rows (batch_id, source, row_number, raw JSON, reason, detail)."""
        t = QuarantineRow.__table__
        stmt = select(t.c.batch_id, t.c.source, t.c.row_number, t.c.raw, t.c.reason, t.c.detail)
        if batch_id is not None:
            stmt = stmt.where(t.c.batch_id == batch_id)
        if reason is not None:
            stmt = stmt.where(t.c.reason == reason)
        stmt = stmt.order_by(t.c.id).limit(limit)
        columns = ["batch_id", "source", "row_number", "raw", "reason", "detail"]
        with self.engine.connect() as conn:
            return rows_frame(conn.execute(stmt).all(), columns)

    def count(self, table) -> int:  # noqa: ANN001
        """Number of rows of a table (a model class or ``Table``): for reports and tests."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

    def execute_sql(self, sql: str, **params) -> list:
        """Run one read-only SQL statement and return its rows (for tools and tests)."""
        with self.engine.connect() as conn:
            return list(conn.execute(text(sql), params).all())


def _chunks(ids: Sequence[str] | None) -> Iterator[list[str] | None]:
    if ids is None:
        yield None
        return
    ids = list(dict.fromkeys(str(i) for i in ids))
    if not ids:
        yield []
    for start in range(0, len(ids), IN_CHUNK):
        yield ids[start : start + IN_CHUNK]
