"""An SQLite database file before SQLite opens it: whether it is there, and a new one created
owner-only (:meth:`qcllp.store.core.Store.open`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["create_private", "sqlite_file_exists"]


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
