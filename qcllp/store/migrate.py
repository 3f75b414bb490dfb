"""Versioned schema migrations with Alembic, run programmatically (no alembic.ini).

Why Alembic rather than a home-made migrator: it is already a dependency, it knows how to
ALTER tables on both SQLite (batch mode: copy-and-move) and PostgreSQL, records the revision in
``alembic_version`` the way every DBA expects, and its autogenerate diff lets a test prove that
the models in :mod:`qcllp.store.schema` and the migration scripts agree.

The scripts live inside the package (``qcllp/store/migrations/versions``) so that an installed
qcllp can upgrade a plant database in place: ``Store.open(url)`` calls :func:`upgrade`.

Development: ``python -m qcllp.store.migrate revision "message" sqlite:///scratch.sqlite``
autogenerates a new revision against a database migrated to head.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, inspect

from qcllp.store.partitions import is_partition_table

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD",
    "alembic_config",
    "include_name",
    "upgrade",
    "current_revision",
    "head_revision",
    "known_revisions",
]

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"  # Alembic's own record of the revision
MIGRATION_LOCK_KEY = 0x51C120  # PostgreSQL advisory lock held by a migrating process
HEAD = "0013"
"""The newest revision shipped (``tests/store`` checks it against the scripts): a database
already there is opened without importing Alembic, a sixth of ``qcllp models list``'s time."""


def alembic_config(connection=None) -> Config:
    """An Alembic config pointing at the packaged scripts, optionally bound to a connection."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def include_name(name: str | None, type_: str, _parent_names: dict) -> bool:
    """Alembic's filter of what the schema comparison looks at: not the monthly partitions of
    ``readings`` (:mod:`qcllp.store.partitions`), which the models rightly do not list."""
    return not (type_ == "table" and is_partition_table(name))


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database behind ``engine`` to ``revision`` (default: the newest).

    On PostgreSQL without a statement timeout: a migration of a large table may rightly take
    longer than the services' per-statement limit (``statement_timeout_s``), and it runs in
    one transaction, so it either finishes or leaves the database as it was.

    One process at a time: the plant's services all open the database when a new qcllp
    starts them, and two that both saw the old revision ran the same ``CREATE TABLE`` and one
    failed (the line benchmark's four scorers and intake did, at revision 0013). The
    transaction takes the database's writer lock before Alembic reads the revision -- on
    PostgreSQL an advisory lock of its own, on SQLite ``BEGIN IMMEDIATE`` (waiting up to the
    busy timeout) -- so the second finds the first's revision and has nothing to do."""
    from alembic import command

    with (
        engine.connect().execution_options(qcllp_write=True) as connection,
        connection.begin(),
    ):
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
        command.upgrade(alembic_config(connection), revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database), read from Alembic's
    version table in plain SQL (its one row: the migrations are one line of revisions)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):
            return None
        found = connection.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").all()
    if len(found) > 1:
        raise RuntimeError(f"{VERSION_TABLE} holds {len(found)} revisions; qcllp keeps one")
    return found[0][0] if found else None


def known_revisions() -> set[str]:
    """All revisions shipped with this qcllp."""
    from alembic.script import ScriptDirectory

    return {
        script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()
    }


@functools.cache
def head_revision() -> str:
    """The newest revision shipped with this qcllp, as the scripts say (:data:`HEAD`)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _main(argv: list[str]) -> None:  # pragma: no cover - developer tool
    if len(argv) != 3 or argv[0] != "revision":
        sys.exit('usage: python -m qcllp.store.migrate revision "message" DATABASE_URL')
    from alembic import command

    engine = create_engine(argv[2])
    upgrade(engine)
    with engine.begin() as connection:
        command.revision(alembic_config(connection), message=argv[1], autogenerate=True)


if __name__ == "__main__":  # pragma: no cover
    _main(sys.argv[1:])
