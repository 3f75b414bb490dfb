"""The model registry: one active model per station, promotion and rollback only to artifacts
that verify, old artifacts through the converter, and a row never paired with a foreign file."""

from __future__ import annotations

import os
from pathlib import Path

import joblib
import pytest

from qcllp.station.artifacts import ArtifactError, file_sha256
from qcllp.station.registry import (
    RegistryError,
    active_model,
    list_models,
    load_model,
    promote,
    resave_model,
    rollback,
)
from qcllp.store import Model, Store
from qcllp.training.train import train_station


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
    source = Path(url.removeprefix("sqlite:///"))
    shutil.copy(source, target)
    shutil.copytree(source.parent / "models", tmp_path / "models")  # rows name files in it
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
    broken = tmp_path / "models" / "broken.joblib"
    broken.write_bytes(b"not a model")
    _set_artifact(store, first, broken.name, file_sha256(broken))
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
    path = tmp_path / "models" / "old.joblib"  # an absolute row of an earlier version
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


def _outside(tmp_path: Path, how: str) -> str:
    """A row's artifact path leading out of the models folder ``tmp_path/models``, to a
    genuine artifact copied outside it (its checksum matches: only the place is wrong)."""
    models = tmp_path / "models"
    original = next(models.glob("*.skops"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / original.name
    target.write_bytes(original.read_bytes())
    if how == "absolute":
        return str(target)
    if how == "dotdot":
        return f"../elsewhere/{original.name}"
    link = models / "link.skops"
    os.symlink(target, link)
    return link.name


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_an_artifact_path_outside_the_models_folder_is_refused(store, trained, tmp_path, how):
    first = trained[1][0]
    row = next(m for m in list_models(store) if m["id"] == first)
    stored = _outside(tmp_path, how)
    _set_artifact(store, first, stored, row["sha256"])
    with pytest.raises(ArtifactError) as refused:
        promote(store, first)
    message = str(refused.value)
    assert message.startswith(f"model {first} (cooling): model artifact path {stored!r} lies ")
    assert "outside the models folder" in message and "\n" not in message
    assert active_model(store, "cooling") is None


def test_rows_name_their_artifact_inside_the_models_folder_and_files_are_private(store, trained):
    rows = list_models(store)
    assert all("/" not in m["artifact_path"] for m in rows)  # relative: a plain file name
    folder = store.models_dir
    assert (folder.stat().st_mode & 0o777) == 0o700
    for m in rows:
        assert ((folder / m["artifact_path"]).stat().st_mode & 0o777) == 0o600
    assert load_model(store, rows[0]["id"]).model.station == rows[0]["station"]


def test_resave_rewrites_a_pickle_artifact_as_skops_and_switches_the_row(store, trained):
    first = trained[1][0]
    model = load_model(store, first).model
    old = store.models_dir / "earlier.joblib"  # format 2, as qcllp 0.x wrote it
    joblib.dump({"station_model": model, "format": 2, "qcllp_version": "0.1.0"}, old)
    _set_artifact(store, first, str(old), file_sha256(old))

    row = resave_model(store, first)
    assert row["artifact_path"] == "earlier.skops" and not old.exists()
    new = store.models_dir / "earlier.skops"
    assert row["sha256"] == file_sha256(new) and new.stat().st_mode & 0o777 == 0o600
    again = load_model(store, first).model
    X = model.per_charge  # the stored tables come back as they were
    assert again.threshold == model.threshold and list(again.features) == list(model.features)
    assert (again.per_charge.to_numpy() == X.to_numpy()).all()
    assert list(again.importances.index) == list(model.importances.index)
    assert resave_model(store, first) is None  # format 3 already
