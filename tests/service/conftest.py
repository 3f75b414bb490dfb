"""The scorer's plant fixtures for every service test (:mod:`tests.service.scorer_plant`)."""

from tests.service.scorer_plant import history, plant, plant_ab, start_scorer  # noqa: F401
