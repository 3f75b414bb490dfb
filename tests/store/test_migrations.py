"""Migrations: the shipped scripts build exactly the schema the models describe."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from qcllp.store import Base, Store
from qcllp.store.migrate import current_revision, include_name, upgrade


def test_migrated_schema_matches_the_models(store_url):
    store = Store.open(store_url)
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": include_name})
        diff = compare_metadata(context, Base.metadata)
    store.close()
    assert diff == []


def test_upgrade_from_empty_in_place_is_idempotent(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.sqlite'}"
    store = Store.open(url)
    before = current_revision(store.engine)
    upgrade(store.engine)  # already at head: nothing to do, nothing breaks
    assert current_revision(store.engine) == before
    store.close()
