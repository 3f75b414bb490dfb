"""Fixtures of the plant tests: the shipped example plant config."""

from __future__ import annotations

from pathlib import Path

import pytest

from qcllp.plant import PlantConfig, load_plant_config

EXAMPLE = Path(__file__).resolve().parents[2] / "plant_config" / "example.yaml"


@pytest.fixture(scope="session")
def example_config() -> PlantConfig:
    """``plant_config/example.yaml``: furnace, rolling, cooling, straightening; 12 sensors."""
    return load_plant_config(EXAMPLE)


@pytest.fixture(scope="session")
def config(example_config: PlantConfig) -> PlantConfig:
    """Short name of ``example_config`` for tests that use no other config."""
    return example_config
