"""Alembic environment: migrates the connection that ``qcllp.store.Store.open`` hands in.

Run programmatically only (``Store.open`` / ``qcllp.store.migrate.upgrade``); there is no
alembic.ini. For a new revision during development::

    python -m qcllp.store.migrate revision "what changed" sqlite:///dev.sqlite
"""

from alembic import context

from qcllp.store.migrate import include_name
from qcllp.store.schema import Base

config = context.config
target_metadata = Base.metadata

connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reached by a misconfigured manual run
    raise RuntimeError("qcllp migrations run through qcllp.store.migrate, not the alembic CLI")

context.configure(
    connection=connection,
    target_metadata=target_metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # ALTER TABLE support on SQLite
    compare_type=True,
    include_name=include_name,
)
with context.begin_transaction():
    context.run_migrations()
