"""Plant description (YAML configuration schema and loader) and the plant simulator.

The simulator's names are loaded on first use: it needs pandas, and reading a plant config
(every CLI command) does not.
"""

from qcllp.plant.config import (
    ConfigError,
    PlantConfig,
    Schedules,
    Sensor,
    Station,
    load_plant_config,
    parse_plant_config,
)

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


def __getattr__(name: str):
    """``SimulatedPlant``, ``simulate_plant``, ``write_simulation`` from :mod:`.simulate`."""
    if name in ("SimulatedPlant", "simulate_plant", "write_simulation"):
        from qcllp.plant import simulate

        return getattr(simulate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
