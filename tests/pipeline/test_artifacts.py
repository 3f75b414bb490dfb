"""Model artifact files: round trip, and refusal of tampered, wrong-format or missing files."""

from __future__ import annotations

import pickle

import joblib
import numpy as np
import pytest

from qcllp.learn.baselines import MeanMap
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.pipeline.artifacts import (
    ARTIFACT_FORMAT,
    ArtifactError,
    file_sha256,
    load_artifact,
    save_artifact,
)


@pytest.fixture(scope="module")
def model():
    X, y = make_gaussian_mixture(200, 3, random_state=0)
    bags, shares = bags_from_labels(y, 20, random_state=0)
    return MeanMap().fit(X, bags, shares), X


def test_saved_model_loads_back_and_predicts_the_same(tmp_path, model):
    fitted, X = model
    path, sha = save_artifact({"model": fitted, "station": "cooling"}, tmp_path, "m1")
    assert path == tmp_path / "m1.joblib" and sha == file_sha256(path)
    content = load_artifact(path, sha)
    assert content["station"] == "cooling" and content["format"] == ARTIFACT_FORMAT
    np.testing.assert_array_equal(content["model"].predict_proba(X), fitted.predict_proba(X))
    assert [p.name for p in tmp_path.iterdir()] == ["m1.joblib"]  # no temporary file left


def test_a_tampered_artifact_is_refused_naming_the_file(tmp_path, model):
    path, sha = save_artifact({"model": model[0]}, tmp_path, "m2")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"m2\.joblib is corrupted or was modified"):
        load_artifact(path, sha)


def test_a_file_that_is_no_joblib_artifact_is_refused(tmp_path):
    path = tmp_path / "notes.joblib"
    path.write_text("this is not a model\n")
    with pytest.raises(ArtifactError, match=r"notes\.joblib is not a readable qcllp model"):
        load_artifact(path, file_sha256(path))


def test_a_pickle_without_format_number_is_refused(tmp_path):
    path = tmp_path / "foreign.joblib"
    with open(path, "wb") as fh:
        pickle.dump([1, 2, 3], fh)
    with pytest.raises(ArtifactError, match=r"foreign\.joblib is not a qcllp model artifact"):
        load_artifact(path, file_sha256(path))


def test_an_artifact_of_another_format_version_is_refused(tmp_path):
    path = tmp_path / "future.joblib"
    joblib.dump({"format": ARTIFACT_FORMAT + 1, "model": None}, path)
    with pytest.raises(ArtifactError, match=rf"future\.joblib has format {ARTIFACT_FORMAT + 1}"):
        load_artifact(path, file_sha256(path))


def test_a_missing_artifact_is_refused(tmp_path):
    with pytest.raises(ArtifactError, match=r"gone\.joblib does not exist"):
        load_artifact(tmp_path / "gone.joblib", "0" * 64)


def test_the_payload_cannot_override_the_format_number(tmp_path):
    path, sha = save_artifact({"format": 99}, tmp_path, "m3")
    assert load_artifact(path, sha)["format"] == ARTIFACT_FORMAT


@pytest.mark.parametrize("name", ["../escape", "sub/dir", ".hidden", ""])
def test_artifact_names_must_be_plain_file_names(tmp_path, name):
    with pytest.raises(ValueError, match="plain file name"):
        save_artifact({}, tmp_path, name)
