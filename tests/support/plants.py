"""A small simulated plant in a real database, with a fast training setup, for the flows' tests.

The fixtures are registered for the whole suite by ``tests/conftest.py``.

``history_plant`` is one SQLite file per test session (per pytest-xdist worker): 16 charges
of the example plant ingested from the simulator's files with their final-QC counts, plus 3
fresh charges (measurements only, still on the line); a test that needs a trained model of it
registers the session's one (:meth:`HistoryPlant.record_trained`); ``history_store`` gives a
test a database of its own holding the same charges, on each engine. ``fast_config`` trains
InvCal with one grid point, 2 charge folds and 5 bootstrap resamples: these tests check the
pipeline's plumbing, the learners have their own.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import PlantConfig, Training, load_plant_config
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation
from qcllp.store import Store

ROOT = Path(__file__).resolve().parents[2]
HISTORY_CHARGES = 16
FRESH_CHARGES = 3


@dataclass(frozen=True)
class HistoryPlant:
    """Where the plant database lives and what the simulator wrote into it."""

    config: PlantConfig
    folder: Path
    url: str
    history: SimulatedPlant
    fresh: SimulatedPlant

    def copy_to(self, folder: Path) -> str:
        """A private copy of the database (for tests that change the registry); its URL."""
        target = folder / "plant.sqlite"
        shutil.copy(self.folder / "plant.sqlite", target)
        return f"sqlite:///{target}"

    def ingest_into(self, store: Store, config: PlantConfig) -> None:
        """The history's measurements and counts and the fresh charges' measurements, into
        ``store`` as the plant's files bring them (what this plant's own database holds)."""
        ingest_measurements(store, config, self.folder / "history" / "measurements")
        ingest_defect_counts(store, config, self.folder / "history" / "defects")
        ingest_measurements(store, config, self.folder / "fresh" / "measurements")

    def record_trained(self, store: Store, config: PlantConfig, station: str) -> int:
        """Register in ``store`` (holding this plant's charges, :meth:`ingest_into`) the model
        :func:`~qcllp.training.train.train_station` gives for ``station`` under ``config``, as
        a candidate; its id. The training runs once per station and config in the session, on
        a private copy of the plant's database: for the tests whose subject is what a model
        does, not how it was trained (a training takes seconds; registering it, a fraction)."""
        from qcllp.station.registry import load_model
        from qcllp.training.train import labeled_data, record_model, train_station

        key = f"{self.folder}\x1f{station}\x1f{replace(config, path=self.config.path)!r}"
        if key not in _TRAINED:
            folder = self.folder / f"trained-{len(_TRAINED)}"
            folder.mkdir()
            with Store.open(self.copy_to(folder)) as own:
                trained = load_model(own, train_station(own, config, station).model_id).model
                _TRAINED[key] = (trained, labeled_data(own, config, station))
        model, data = _TRAINED[key]
        return record_model(store, config, model, data).model_id


_TRAINED: dict[str, tuple] = {}  # HistoryPlant.record_trained's models and their data


def with_station(config: PlantConfig, station: str, **changes) -> PlantConfig:
    """The config with station ``station``'s fields ``changes`` (costs, audit shares...)."""
    stations = tuple(replace(s, **changes) if s.name == station else s for s in config.stations)
    return replace(config, stations=stations)


@pytest.fixture(scope="session")
def fast_config() -> PlantConfig:
    config = load_plant_config(ROOT / "plant_config" / "example.yaml")
    training = Training(
        default_method="invcal", methods={"invcal": {"C_p": [1.0]}}, cv=2, bootstrap=5
    )
    return replace(config, training=training)


@pytest.fixture(scope="session")
def history_plant(tmp_path_factory, fast_config) -> HistoryPlant:
    """One simulated plant for the session (tests read it, or work on a ``copy_to``)."""
    folder = tmp_path_factory.mktemp("history_plant")
    history = simulate_plant(fast_config, HISTORY_CHARGES, random_state=3)
    files = write_simulation(history, folder / "history")
    start = history.readings["timestamp"].max()
    fresh = simulate_plant(
        fast_config,
        FRESH_CHARGES,
        random_state=4,
        start=start,
        first_charge=HISTORY_CHARGES + 1,
    )
    write_simulation(fresh, folder / "fresh")
    url = f"sqlite:///{folder / 'plant.sqlite'}"
    with Store.open(url) as store:
        ingest_measurements(store, fast_config, folder / "history" / "measurements")
        ingest_defect_counts(store, fast_config, files["defects"])
        ingest_measurements(store, fast_config, folder / "fresh" / "measurements")
    return HistoryPlant(fast_config, folder, url, history, fresh)


@pytest.fixture(scope="session")
def pg_history(pg_server, history_plant) -> str:
    """The name of a PostgreSQL database holding the history plant's charges, the template
    of :func:`history_store`'s (ingesting them took a test about a second)."""
    with Store.open(pg_server.create_database("history_template")) as built:
        history_plant.ingest_into(built, history_plant.config)
    return "history_template"


@pytest.fixture(params=["sqlite", "postgresql"])
def history_store(request, history_plant, tmp_path) -> Iterator[Store]:
    """A database of the test's own on each engine holding the history plant's charges
    (history with counts, fresh charges): a copy of the plant's SQLite file (its model
    artifacts beside it), or ``CREATE DATABASE ... TEMPLATE`` of :func:`pg_history` (its
    artifacts under ``tmp_path``, the database dropped after the test)."""
    if request.param == "sqlite":
        with Store.open(history_plant.copy_to(tmp_path)) as store:
            yield store
        return
    server, name = request.getfixturevalue("pg_server"), f"history_{uuid.uuid4().hex[:12]}"
    url = server.create_database(name, template=request.getfixturevalue("pg_history"))
    try:
        with Store.open(url, models_dir=tmp_path / "models") as store:
            yield store
    finally:
        server.drop_database(name)


@pytest.fixture(scope="session")
def retrain_plant(tmp_path_factory, fast_config):
    """History of 48 charges in a template database, 14 later ones as files
    (:mod:`tests.support.retrain_plant`)."""
    from tests.support.retrain_plant import build

    return build(fast_config, tmp_path_factory.mktemp("retrain_plant"))
