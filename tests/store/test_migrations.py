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


OPEN_AT_ONCE = """
import sys, time
from pathlib import Path
from qcllp.store import Store
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
Store.open(sys.argv[1]).close()
"""


def test_services_that_start_at_once_on_an_old_database_migrate_it_once(store_url, tmp_path):
    """Four processes open a database at revision 0012 together, as a plant's services do
    when a new qcllp starts them: each waits for the one migrating, then finds the schema at
    head; the statistics are computed once, from the readings."""
    import subprocess
    import sys

    from qcllp.ingest.measurements import ingest_measurements
    from qcllp.plant.config import load_plant_config
    from qcllp.plant.simulate import simulate_plant
    from qcllp.store.kept_stats import stats_count
    from qcllp.store.migrate import HEAD
    from tests.support.plants import ROOT

    example = load_plant_config(ROOT / "plant_config" / "example.yaml")
    store = Store.open(store_url)
    path = tmp_path / "readings.csv"
    simulate_plant(example, 3, random_state=9).readings.to_csv(path, index=False)
    ingest_measurements(store, example, path)
    with store.engine.connect() as conn:
        kept = stats_count(conn)
    with store.engine.begin() as conn:  # back to revision 0012's tables
        for table in ("stick_stats", "sensor_codes"):
            conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql(
            "CREATE TABLE series_stats (series_id INTEGER PRIMARY KEY, version INTEGER, "
            "n INTEGER, t0_us BIGINT, t1_us BIGINT, moments BYTEA)".replace(
                "BYTEA", "BLOB" if store.engine.dialect.name == "sqlite" else "BYTEA"
            )
        )
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0012'")
    store.close()
    go = tmp_path / "go"
    opening = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT_ONCE, store_url, str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    go.touch()
    errors = [p.communicate(timeout=120)[1] for p in opening]
    assert [p.returncode for p in opening] == [0] * 4, errors
    store = Store.open(store_url)
    assert current_revision(store.engine) == HEAD
    with store.engine.connect() as conn:
        assert stats_count(conn) == kept > 0
    store.close()
