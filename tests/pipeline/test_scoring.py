"""Scoring at a station: the active model decides for the sticks still on the line, one flag
per stick on SQLite and PostgreSQL alike, with the features built as at training time."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from qcllp.features import station_features
from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.pipeline.registry import load_model, promote
from qcllp.pipeline.scoring import flags_frame, score_file, score_station
from qcllp.pipeline.train import train_station

from .conftest import FRESH_CHARGES


@pytest.fixture
def scored_plant(store, history_plant, tmp_path):
    """``store`` (both engines) with the history and fresh charges and an active cooling model.

    The config is placed in ``tmp_path``: a server database keeps its model files beside it."""
    config, folder = (
        replace(history_plant.config, path=tmp_path / "plant.yaml"),
        history_plant.folder,
    )
    ingest_measurements(store, config, folder / "history" / "measurements")
    ingest_defect_counts(store, config, folder / "history" / "defects")
    ingest_measurements(store, config, folder / "fresh" / "measurements")
    model_id = train_station(store, config, "cooling").model_id
    promote(store, model_id)
    return store, config, model_id


def test_each_stick_still_on_the_line_is_flagged_once_with_the_models_decision(
    scored_plant, history_plant
):
    store, config, model_id = scored_plant
    first = score_station(store, config, "cooling")
    again = score_station(store, config, "cooling")
    scored = set(first.scores["charge_id"])
    assert first.flags_written == len(first.scores) > 0
    assert again.flags_written == 0 and again.scores.empty
    # the fresh charges only: labeled charges have left the line
    assert scored == set(history_plant.fresh.truth["charge_id"].astype(str))
    assert len(scored) == FRESH_CHARGES
    flags = flags_frame(store, "cooling")
    assert len(flags) == len(first.scores) and (flags["model_id"] == model_id).all()
    model = load_model(store, model_id).model
    X = station_features(
        store, config, "cooling", charge_ids=sorted(scored), imputation=model.imputation
    ).X
    expected = model.failure_probability(X)
    got = flags.set_index(["charge_id", "stick_id"]).loc[X.index, "probability"].to_numpy()
    np.testing.assert_allclose(got, expected)


def test_a_file_is_scored_with_the_same_model_and_writes_no_flags(scored_plant, history_plant):
    store, config, _ = scored_plant
    files = sorted((history_plant.folder / "fresh" / "measurements").iterdir())
    result = score_file(store, config, "cooling", files[0])
    assert len(result.scores) > 0 and result.flags_written == 0
    assert flags_frame(store, "cooling").empty
