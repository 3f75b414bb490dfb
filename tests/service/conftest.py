"""The service tests use the pipeline tests' simulated plants (fixtures re-exported)."""

from tests.pipeline.conftest import fast_config, retrain_plant  # noqa: F401 (fixtures)
