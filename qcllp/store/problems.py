"""One line for a database that cannot be used, as the CLI prints it and :class:`StoreError`
carries it: the database named with its password masked, the driver's first line, what to
check. Kept apart from :mod:`qcllp.store.core` (which raises them) so that the CLI can word a
failure of a command already running without the engine code.
"""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

from qcllp.store.credentials import display_url, mask_secrets

__all__ = ["database_problem", "url_problem"]


def url_problem(url: str, exc: ValueError) -> str:
    """What is wrong with a URL SQLAlchemy's parser raised ``exc`` for, its password masked:
    in practice the port, which SQLAlchemy converts with ``int()``."""
    shown = display_url(url)
    host = url.partition("://")[2].partition("/")[0].rpartition("@")[2]
    port = host.rpartition(":")[2] if ":" in host.lstrip("[").rpartition("]")[2] else ""
    if port and not port.isdigit():
        return f"{shown}: the port {port!r} is not a number"
    return f"{shown}: {exc}"


def database_problem(exc: OperationalError, shown: str, *, opening: bool = False) -> str:
    """One line for a database that cannot be used: the database ``shown`` (password masked),
    the first line of the driver's message and what to check. ``opening``: it failed on the
    first connection (wrong path, server away) rather than later (a full disk)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    reason = mask_secrets(lines[0]) if lines else type(exc).__name__
    if "disk is full" in reason or "No space left" in reason:
        hint = "free space on its disk"
    elif "disk I/O error" in reason:  # SQLite on a disk too full for its -wal / -shm files
        hint = "check its disk: full, read-only or failing"
    elif shown.startswith("sqlite"):
        hint = "check that its folder exists and can be written"
    else:
        hint = "check that the server runs and that the URL, user and database name are right"
    verb = "cannot open" if opening else "cannot use"
    return f"{verb} the plant database {shown}: {reason}; {hint}"
