"""Shared fixtures: a tiny plant config, and stores on both engines (SQLite, PostgreSQL).

``store_url`` / ``store`` are parametrized over ``sqlite`` and ``postgresql``, so every store
and ingestion test runs on both. The PostgreSQL server is started once per session
(:mod:`tests.pgserver`); each test gets the session's migrated database emptied (``TRUNCATE``).
Without PostgreSQL binaries the ``postgresql`` cases skip with the reason; ``broker`` is a
Mosquitto broker per test (skips without Mosquitto).

The property tests (hypothesis) draw the same examples on every run (profile ``repeatable``,
loaded here): a run on a clean clone says what the code does, not what a new draw found, and a
failure repeats. ``pytest --hypothesis-profile explore`` draws new examples; a case it finds
is kept as an ``@example``.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from qcllp.plant.config import PlantConfig, parse_plant_config
from tests.mqttbroker import TempBroker, find_mosquitto
from tests.pgserver import TempPostgres, find_pg_bin
from tests.support.plants import (  # noqa: F401 (fixtures)
    fast_config,
    history_plant,
    history_store,
    pg_history,
    retrain_plant,
)

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")

TINY_PLANT = {
    "name": "tiny",
    "timezone": "Europe/Berlin",
    "defect_types": ["crack", "bend"],
    "stations": [
        {
            "name": "furnace",
            "fail_cost": 100.0,
            "good_cost": 300.0,
            "sensors": [
                {"name": "temperature", "unit": "degC", "min": 900.0, "max": 1300.0},
                {"name": "oxygen", "unit": "percent", "min": 0.0, "max": 10.0},
            ],
        },
        {
            "name": "rolling",
            "fail_cost": 50.0,
            "good_cost": 320.0,
            "sensors": [
                {"name": "force", "unit": "kN", "min": 1000.0, "max": 30000.0},
                {"name": "temperature", "unit": "degC", "min": 700.0, "max": 1250.0},
            ],
        },
    ],
}


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory) -> PlantConfig:
    """A two-station plant (furnace: temperature, oxygen; rolling: force, temperature)."""
    base = tmp_path_factory.mktemp("tiny_plant")
    return parse_plant_config(dict(TINY_PLANT), source="<tiny plant>", base_dir=base)


@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL cluster for the whole session (skips without binaries)."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin "
            "or on PATH: install Debian's 'postgresql' package (deploy/bootstrap.sh --test)"
        )
    server = TempPostgres(bin_dir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_test_url(pg_server) -> str:
    """One migrated PostgreSQL database for the session; emptied before each test."""
    from qcllp.store import Store

    url = pg_server.create_database("qcllp_test")
    Store.open(url).close()
    return url


def _empty_all_tables(url: str) -> None:
    from sqlalchemy import create_engine

    from qcllp.store import Base

    engine = create_engine(url)
    names = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    engine.dispose()


@pytest.fixture
def broker():
    """A Mosquitto broker of its own for the test (:mod:`tests.mqttbroker`; skips without
    the binary)."""
    binary = find_mosquitto()
    if binary is None:
        pytest.skip(
            "mosquitto not found on PATH or in /usr/sbin: install Debian's 'mosquitto' "
            "package (deploy/bootstrap.sh --test)"
        )
    started = TempBroker(binary)
    yield started
    started.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """URL of an empty, migrated plant database on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'plant.sqlite'}"
    url = request.getfixturevalue("pg_test_url")
    _empty_all_tables(url)
    return url


@pytest.fixture
def store(store_url, tmp_path):
    """An opened :class:`qcllp.store.Store` on a fresh database (both engines); a server
    database's model artifacts go to ``tmp_path/models`` (an SQLite file's are beside it)."""
    from qcllp.store import Store

    opened = Store.open(store_url, models_dir=tmp_path / "models")
    yield opened
    opened.close()


@pytest.fixture
def pg_store(pg_test_url, tmp_path):
    """An opened store on the session's PostgreSQL database, emptied, without the monthly
    partitions of ``readings`` other tests left (``TRUNCATE`` keeps them)."""
    from qcllp.store import Store
    from qcllp.store.partitions import list_partitions

    _empty_all_tables(pg_test_url)
    opened = Store.open(pg_test_url, models_dir=tmp_path / "models")
    with opened.engine.begin() as conn:
        for partition in list_partitions(conn):
            conn.exec_driver_sql(f"DROP TABLE {partition.name}")
    yield opened
    opened.close()
