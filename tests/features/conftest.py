"""The feature tests use the plant tests' example config fixtures."""

from tests.plant.conftest import config, example_config  # noqa: F401 (fixtures)
