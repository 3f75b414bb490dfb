"""Plant description (YAML configuration schema and loader) and the plant simulator."""

from qcllp.plant.config import (
    ConfigError,
    PlantConfig,
    Schedules,
    Sensor,
    Station,
    load_plant_config,
    parse_plant_config,
)
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation

__all__ = [
    "ConfigError",
    "PlantConfig",
    "Schedules",
    "Sensor",
    "SimulatedPlant",
    "Station",
    "load_plant_config",
    "parse_plant_config",
    "simulate_plant",
    "write_simulation",
]
