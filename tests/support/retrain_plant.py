"""A simulated plant for the retraining tests: one simulation of 62 charges of the example plant
(fast training setup), split in time -- the first 48 charges (with their final-QC counts) are
the history in a template database, the last 14 arrive later: as they are (``same``), after a
sensor changed (``shifted``: the same sticks, a sensor reading 4 standard deviations higher)
or after the process changed (``worse``: the same sensors' mechanism, but defects arise at
several times the rate, so final QC counts far more than the model predicts).

One simulation split in time rather than two seeds: the simulator draws the plant's structure
(sensor loadings, trends) from its seed, so another seed is another plant.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import Connectors, FileConnector, PlantConfig, Retrainer
from qcllp.plant.simulate import simulate_plant, write_simulation
from qcllp.store import Store

HISTORY = 48
LATER = 14
SEED = 1
SHIFT = {"rolling.force": 4.0}
WORSE_RATE = 0.45  # the history's defect rate is the simulator's default, 0.15
RETRAINER = Retrainer(
    holdout_charges=12,
    min_holdout_charges=6,
    drift_window_charges=12,
    lease_ttl_s=30,
    shadow_trials=False,  # promoted straight to active; the shadow path has its own tests
)


@dataclass(frozen=True)
class RetrainPlant:
    config: PlantConfig
    folder: Path

    def copy_to(self, folder: Path) -> Store:
        """A private copy of the history database, opened."""
        target = folder / "plant.sqlite"
        shutil.copy(self.folder / "plant.sqlite", target)
        return Store.open(f"sqlite:///{target}")

    def retrained_copy(self, folder: Path, station: str) -> Store:
        """A private copy, opened, of the history database after one retraining of
        ``station`` promoted its first model (:func:`qcllp.retraining.retrain.retrain_station`).
        The retraining runs once per station in the session, on a template of its own; each
        copy takes the database and its ``models/`` folder (the registry names artifacts
        relative to it)."""
        from qcllp.retraining.retrain import retrain_station

        template = self.folder / f"retrained-{station}"
        if not template.exists():
            building = self.folder / f".retrained-{station}"
            building.mkdir()
            with self.copy_to(building) as store:
                outcome = retrain_station(store, self.config, station)
            assert outcome.outcome == "promoted", outcome.reason
            building.rename(template)
        shutil.copy(template / "plant.sqlite", folder / "plant.sqlite")
        shutil.copytree(template / "models", folder / "models", dirs_exist_ok=True)
        return Store.open(f"sqlite:///{folder / 'plant.sqlite'}")

    def later(self, kind: str) -> Path:
        """Folder of the later charges' files: ``"same"``, ``"shifted"`` or ``"worse"``."""
        return self.folder / kind

    def dropping(self, kind: str, folder: Path, stations: tuple[str, ...]) -> PlantConfig:
        """The config with file connectors on a drop folder in ``folder`` that already holds
        the later charges' files of ``kind``; the daemon retrains ``stations``."""
        drop = folder / "drop"
        shutil.copytree(self.later(kind), drop)
        return replace(
            self.config,
            connectors=Connectors(
                measurements=FileConnector(str(drop / "measurements"), pattern="*.csv"),
                defects=FileConnector(str(drop / "defects"), pattern="*.csv"),
            ),
            retrainer=replace(self.config.retrainer, stations=stations),
        )


def build(fast_config: PlantConfig, folder: Path) -> RetrainPlant:
    config = replace(fast_config, retrainer=RETRAINER)
    same = simulate_plant(config, HISTORY + LATER, random_state=SEED)
    shifted = simulate_plant(config, HISTORY + LATER, random_state=SEED, sensor_shift=SHIFT)
    worse = simulate_plant(config, HISTORY + LATER, random_state=SEED, defect_rate=WORSE_RATE)
    write_simulation(same.charges(0, HISTORY), folder / "history")
    for kind, sim in (("same", same), ("shifted", shifted), ("worse", worse)):
        write_simulation(sim.charges(HISTORY, HISTORY + LATER), folder / kind)
    with Store.open(f"sqlite:///{folder / 'plant.sqlite'}") as store:
        ingest_measurements(store, config, folder / "history" / "measurements")
        ingest_defect_counts(store, config, folder / "history" / "defects")
    return RetrainPlant(config, folder)


def ingest_later(store: Store, plant: RetrainPlant, kind: str) -> None:
    ingest_measurements(store, plant.config, plant.later(kind) / "measurements")
    ingest_defect_counts(store, plant.config, plant.later(kind) / "defects")
