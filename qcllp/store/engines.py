"""The databases qcllp opens (:meth:`qcllp.store.Store.open`): an SQLite file -- whether it is
there, a new one created owner-only, its engine with qcllp's settings -- or a server database
(PostgreSQL) with its password from the environment."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import NoSuchModuleError

from qcllp.store.credentials import CredentialError, display_url, with_password

__all__ = [
    "SQLITE_BUSY_TIMEOUT_S",
    "StoreError",
    "create_private",
    "server_engine",
    "sqlite_engine",
    "sqlite_file_exists",
]

SQLITE_BUSY_TIMEOUT_S = 60.0  # SQLite's busy timeout, and the wait for a writer's turn


class StoreError(RuntimeError):
    """The database cannot be used (missing and create=False, or newer than this qcllp)."""


def sqlite_file_exists(database: str) -> bool:
    """Whether the database of an SQLite URL is there (an in-memory one always is)."""
    return database == ":memory:" or Path(database).exists()


def create_private(database: str | None) -> None:
    """Create a new SQLite database file readable by its owner only (0600), before SQLite
    creates it with the process umask (0644 under systemd's default): SQLite gives its -wal,
    -shm and -journal files the main file's mode, so they follow. An empty file is a valid
    empty database. An existing file keeps its mode (an operator may have chosen it); a
    folder that does not exist is left to SQLite's own error."""
    if database in (None, "", ":memory:") or database.startswith("file:"):
        return
    try:
        fd = os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except (FileExistsError, FileNotFoundError, NotADirectoryError):
        return
    os.close(fd)


def sqlite_engine(url: str) -> Engine:
    """The engine of an SQLite file with qcllp's settings (:mod:`qcllp.store.core`): WAL, the
    busy timeout, foreign keys, and ``BEGIN IMMEDIATE`` for the transactions that write."""
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # noqa: ANN001
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
        cursor = dbapi_connection.cursor()
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            f"busy_timeout={round(SQLITE_BUSY_TIMEOUT_S * 1000)}",
            "foreign_keys=ON",
            "cache_size=-131072",  # 128 MiB page cache: bulk inserts into the readings B-tree
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection):
        immediate = connection.get_execution_options().get("qcllp_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def server_engine(parsed: URL, statement_timeout_s: float | None) -> Engine:
    """The engine of a server database (PostgreSQL), its password from the environment
    (:mod:`qcllp.store.credentials`); a missing driver says which extra to install."""
    shown = display_url(parsed)
    connect_args = (
        {"options": f"-c statement_timeout={round(statement_timeout_s * 1000)}"}
        if statement_timeout_s and parsed.get_backend_name() == "postgresql"
        else {}
    )
    try:
        return create_engine(with_password(parsed), pool_pre_ping=True, connect_args=connect_args)
    except CredentialError as exc:
        raise StoreError(str(exc)) from exc
    except (ImportError, NoSuchModuleError) as exc:
        if parsed.get_backend_name() == "postgresql" and isinstance(exc, ImportError):
            other = parsed.get_driver_name() != "psycopg"  # the extra brings psycopg 3 only
            raise StoreError(
                f"the database URL {shown} needs the PostgreSQL driver ({exc}): "
                "pip install 'qcllp[postgres]'"
                + (" and write the URL as postgresql+psycopg://..." if other else "")
            ) from exc
        raise StoreError(
            f"{shown}: no database driver for it ({exc}); qcllp works with "
            "sqlite:///<file> and postgresql+psycopg://<user>@<host>/<database>"
        ) from exc
