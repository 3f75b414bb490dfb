"""The model registry: one active model per station, promotion and rollback only to artifacts
that verify, old artifacts through the converter, and a row never paired with a foreign file."""

from __future__ import annotations

import joblib
import pytest

from qcllp.pipeline.artifacts import ArtifactError, file_sha256
from qcllp.pipeline.registry import (
    RegistryError,
    active_model,
    list_models,
    load_model,
    promote,
    rollback,
)
from qcllp.pipeline.train import train_station
from qcllp.store import Model, Store


@pytest.fixture(scope="module")
def trained(history_plant, tmp_path_factory):
    """A private database with two cooling models and one furnace model (candidates)."""
    url = history_plant.copy_to(tmp_path_factory.mktemp("registry"))
    with Store.open(url) as store:
        ids = [
            train_station(store, history_plant.config, station, random_state=seed).model_id
            for station, seed in [("cooling", 0), ("cooling", 1), ("furnace", 0)]
        ]
    return url, ids


@pytest.fixture
def store(trained, tmp_path):
    """A fresh copy of the trained registry per test (artifacts shared, read-only)."""
    import shutil

    url, _ = trained
    target = tmp_path / "plant.sqlite"
    shutil.copy(url.removeprefix("sqlite:///"), target)
    opened = Store.open(f"sqlite:///{target}")
    yield opened
    opened.close()


def _set_artifact(store: Store, model_id: int, path: str, sha: str) -> None:
    with store.session() as session:
        row = session.get(Model, model_id)
        row.artifact_path, row.sha256 = path, sha


def test_promote_keeps_one_active_model_per_station_and_rollback_restores_the_last(store, trained):
    first, second, furnace = trained[1]
    promote(store, first)
    promote(store, furnace)
    promote(store, second)
    status = {m["id"]: m["status"] for m in list_models(store)}
    assert status == {first: "retired", second: "active", furnace: "active"}
    assert rollback(store, "cooling")["id"] == first
    assert active_model(store, "cooling")["id"] == first
    assert active_model(store, "furnace")["id"] == furnace
    with pytest.raises(RegistryError, match="first one ever promoted"):
        rollback(store, "furnace")


def test_rollback_refuses_a_previous_model_whose_artifact_was_corrupted(store, trained, tmp_path):
    first, second, _ = trained[1]
    promote(store, first)
    promote(store, second)
    broken = tmp_path / "broken.joblib"
    broken.write_bytes(b"not a model")
    _set_artifact(store, first, str(broken), file_sha256(broken))
    with pytest.raises(ArtifactError, match="broken.joblib is not a readable"):
        rollback(store, "cooling")
    assert active_model(store, "cooling")["id"] == second  # nothing changed


def test_a_row_pointing_at_another_stations_artifact_is_never_promoted(store, trained):
    first, _, furnace = trained[1]
    furnace_row = next(m for m in list_models(store) if m["id"] == furnace)
    _set_artifact(store, first, furnace_row["artifact_path"], furnace_row["sha256"])
    with pytest.raises(ArtifactError, match="trained for station 'furnace', not 'cooling'"):
        promote(store, first)
    assert active_model(store, "cooling") is None


def test_an_artifact_of_format_1_loads_through_the_converter(store, trained, tmp_path):
    first = trained[1][0]
    model = load_model(store, first).model
    old = {
        "model": model.estimator,
        "station": model.station,
        "method": model.method,
        "target": model.target,
        "features": list(model.features),
        "imputation": dict(model.imputation),
        "threshold": model.threshold,
        "recalibration": model.recalibration,
        "per_charge": model.per_charge,
        "importances": model.importances,
        "format": 1,
        "qcllp_version": "0.1.0",
    }
    path = tmp_path / "old.joblib"
    joblib.dump(old, path)
    _set_artifact(store, first, str(path), file_sha256(path))
    converted = load_model(store, first).model
    assert converted.threshold == model.threshold and converted.costs is None
    assert converted.metrics["threshold"] == pytest.approx(model.threshold)  # from the row
    X = model.per_charge  # any frame works for the column check below
    assert list(converted.features) == list(model.features) and X is not None


def test_unknown_models_and_stations_without_models_are_named(store):
    with pytest.raises(RegistryError, match="no model with id 999"):
        promote(store, 999)
    with pytest.raises(RegistryError, match="station 'rolling' has no active model"):
        load_model(store, station="rolling")
