"""Model artifact files: round trip, private modes, confinement to the models folder, loading
the very bytes that were verified, and refusal of tampered, wrong-format or missing files."""

from __future__ import annotations

import os
import pickle
import sys
import zipfile
from pathlib import Path

import joblib
import numpy as np
import pytest
import skops.io

from qcllp.learn.baselines import MeanMap
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.station.artifacts import (
    ARTIFACT_FORMAT,
    ArtifactError,
    artifact_file,
    file_sha256,
    load_artifact,
    read_verified,
    save_artifact,
)


@pytest.fixture(scope="module")
def model():
    X, y = make_gaussian_mixture(200, 3, random_state=0)
    bags, shares = bags_from_labels(y, 20, random_state=0)
    return MeanMap().fit(X, bags, shares), X


def test_saved_model_loads_back_and_predicts_the_same(tmp_path, model):
    fitted, X = model
    folder = tmp_path / "models"
    path, sha = save_artifact({"model": fitted, "station": "cooling"}, folder, "m1")
    assert path == folder / "m1.skops" and sha == file_sha256(path)
    assert zipfile.is_zipfile(path)  # a skops file, not a pickle
    content = load_artifact(path, sha)
    assert content["station"] == "cooling" and content["format"] == ARTIFACT_FORMAT
    np.testing.assert_array_equal(content["model"].predict_proba(X), fitted.predict_proba(X))
    assert [p.name for p in folder.iterdir()] == ["m1.skops"]  # no temporary file left


def test_artifacts_are_owner_only_in_an_owner_only_folder(tmp_path, model):
    folder = tmp_path / "models"
    path, _ = save_artifact({"model": model[0]}, folder, "m1")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(folder).st_mode & 0o777 == 0o700
    folder.chmod(0o755)  # a folder an earlier version (or a person) left open
    save_artifact({"model": model[0]}, folder, "m2")
    assert os.stat(folder).st_mode & 0o777 == 0o700


class _Touch:
    """A pickle that, when loaded, creates a file: what a hostile artifact would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_type_off_the_allow_list_is_refused_before_anything_is_built(tmp_path):
    path = tmp_path / "foreign.skops"
    path.write_bytes(skops.io.dumps({"format": ARTIFACT_FORMAT, "x": pickle.PickleError()}))
    with pytest.raises(ArtifactError, match=r"holds types qcllp does not load: .*PickleError"):
        load_artifact(path, file_sha256(path))
    with pytest.raises(ArtifactError, match=r"would hold types qcllp does not load"):
        save_artifact({"x": pickle.PickleError()}, tmp_path, "m")
    assert not (tmp_path / "m.skops").exists()


_SWAP: dict = {}


def _swap_on_reopen(event: str, args: tuple) -> None:
    """Audit hook: when the watched artifact is opened a second time, replace it first."""
    if event != "open" or not _SWAP or str(args[0]) != str(_SWAP["path"]):
        return
    _SWAP["opens"] += 1
    if _SWAP["opens"] == 2:
        os.replace(_SWAP["evil"], _SWAP["path"])


def test_the_bytes_loaded_are_the_bytes_verified_a_file_swapped_after_the_check_is_not_read(
    tmp_path, model
):
    """Between the checksum and the load, a hostile file takes the verified one's place
    (replaced as the artifact is opened a second time). Only one read happens: the verified
    bytes are the ones built, the hostile pickle never runs."""
    path, sha = save_artifact({"model": model[0], "station": "cooling"}, tmp_path, "m1")
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"format": 2, "x": _Touch(marker)}))
    if not _SWAP:
        sys.addaudithook(_swap_on_reopen)
    _SWAP.update(path=path, evil=evil, opens=0)
    try:
        content = load_artifact(path, sha)
    finally:
        opens = _SWAP.pop("opens")
        _SWAP.clear()
    assert opens == 1 and not marker.exists()
    assert content["station"] == "cooling"
    np.testing.assert_array_equal(
        content["model"].predict_proba(model[1]), model[0].predict_proba(model[1])
    )


def test_read_verified_returns_the_bytes_it_hashed(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"verified")
    data = read_verified(path, file_sha256(path))
    path.write_bytes(b"swapped!")
    assert data == b"verified"


@pytest.mark.parametrize("stored", ["/etc/passwd", "../outside.skops", "sub/../../outside.skops"])
def test_a_path_out_of_the_models_folder_is_refused(tmp_path, stored):
    folder = tmp_path / "models"
    folder.mkdir()
    with pytest.raises(ArtifactError, match=r"lies outside the models folder"):
        artifact_file(folder, stored)


def test_a_symlink_out_of_the_models_folder_is_refused_and_one_inside_is_kept(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (tmp_path / "outside.skops").write_bytes(b"x")
    (folder / "inside.skops").write_bytes(b"x")
    os.symlink(tmp_path / "outside.skops", folder / "out.skops")
    os.symlink(folder / "inside.skops", folder / "in.skops")
    with pytest.raises(ArtifactError, match=r"'out.skops' lies outside the models folder"):
        artifact_file(folder, "out.skops")
    assert artifact_file(folder, "in.skops") == (folder / "inside.skops").resolve()
    assert artifact_file(folder, str(folder / "inside.skops")) == (folder / "inside.skops")


def test_a_tampered_artifact_is_refused_naming_the_file(tmp_path, model):
    path, sha = save_artifact({"model": model[0]}, tmp_path, "m2")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"m2\.skops is corrupted or was modified"):
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
    with pytest.raises(ArtifactError, match=r"gone\.skops does not exist"):
        load_artifact(tmp_path / "gone.skops", "0" * 64)


def test_the_payload_cannot_override_the_format_number(tmp_path):
    path, sha = save_artifact({"format": 99}, tmp_path, "m3")
    assert load_artifact(path, sha)["format"] == ARTIFACT_FORMAT


@pytest.mark.parametrize("name", ["../escape", "sub/dir", ".hidden", ""])
def test_artifact_names_must_be_plain_file_names(tmp_path, name):
    with pytest.raises(ValueError, match="plain file name"):
        save_artifact({}, tmp_path, name)


def _variants():
    """Every learner qcllp trains by name, plus the variants a plant config reaches by a grid
    (the gradient-boosting bases, the RBF map of the mean-map learners)."""
    from qcllp.training.methods import METHODS

    cases = [(name, {}) for name in METHODS]
    cases += [("llpfc", {"base": "hgb"}), ("em-llp", {"base": "hgb"})]
    cases += [("lmm", {"kernel": "rbf"}), ("amm", {"kernel": "rbf"})]
    return cases


@pytest.mark.parametrize(("name", "params"), _variants(), ids=lambda v: str(v))
def test_every_learner_is_stored_and_read_back_within_the_allow_list(tmp_path, name, params):
    """A learner whose fitted parts needed a type off the list would fail here (at writing),
    not in a plant's training."""
    from qcllp.training.methods import METHODS

    X, y = make_gaussian_mixture(300, 3, random_state=0)
    bags, shares = bags_from_labels(y, 30, random_state=0)
    estimator = METHODS[name].estimator(0)
    prefix = "estimator__" if METHODS[name].standardized else ""
    estimator.set_params(**{prefix + k: v for k, v in params.items()})
    fitted = estimator.fit(X, bags, shares)
    path, sha = save_artifact({"model": fitted}, tmp_path, "m")
    back = load_artifact(path, sha)["model"]
    np.testing.assert_array_equal(back.predict_proba(X), fitted.predict_proba(X))
