"""Artifacts written before the flow layout name the modules where their types lived then
(``qcllp.learn.mean_maps``, ``qcllp.pipeline.methods``); they still load, to the same model."""

from __future__ import annotations

import io
import re
import zipfile

import joblib
import numpy as np
import pytest
import skops.io

from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.station.artifacts import file_sha256, load_artifact, save_artifact
from qcllp.station.legacy_names import LEGACY_MODULES
from qcllp.training.methods import METHODS


@pytest.fixture(scope="module")
def fitted():
    """A standardized Laplacian mean map: both its wrapper and its learner moved."""
    X, y = make_gaussian_mixture(200, 3, random_state=0)
    bags, shares = bags_from_labels(y, 20, random_state=0)
    return METHODS["lmm"].estimator(0).fit(X, bags, shares), X


def _old_names(text: str, before: str, after: str) -> str:
    """``text`` with every moved module named as before the layout, where a name stands
    between the characters ``before`` and ``after`` (whole names only)."""
    for old, new in sorted(LEGACY_MODULES.items(), key=lambda kv: -len(kv[1])):
        text = re.sub(f"(?<={before}){re.escape(new)}(?={after})", old, text)
    return text


def _legacy_skops(data: bytes) -> bytes:
    """The same skops file with its schema naming the pre-layout modules."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            member = src.read(item.filename)
            if item.filename == "schema.json":
                member = _old_names(member.decode(), '"', '"').encode()
            dst.writestr(item, member)
    return out.getvalue()


def test_a_skops_artifact_naming_the_old_modules_loads_the_same_model(tmp_path, fitted):
    model, X = fitted
    path, _ = save_artifact({"model": model, "station": "cooling"}, tmp_path, "m1")
    legacy = _legacy_skops(path.read_bytes())
    names = set(skops.io.get_untrusted_types(data=legacy))
    assert {"qcllp.pipeline.methods.Standardized", "qcllp.learn.mean_maps.FittedMeanMap"} <= names
    old = tmp_path / "old.skops"
    old.write_bytes(legacy)
    content = load_artifact(old, file_sha256(old))
    np.testing.assert_array_equal(content["model"].predict_proba(X), model.predict_proba(X))


def test_a_format_2_pickle_naming_the_old_modules_loads_the_same_model(tmp_path, fitted):
    model, X = fitted
    buffer = io.BytesIO()
    joblib.dump({"format": 2, "model": model}, buffer, protocol=0)  # text GLOBAL opcodes
    legacy = _old_names(buffer.getvalue().decode("latin-1"), "c", "\n").encode("latin-1")
    assert b"qcllp.pipeline.methods\nStandardized" in legacy
    old = tmp_path / "old.joblib"
    old.write_bytes(legacy)
    content = load_artifact(old, file_sha256(old))
    np.testing.assert_array_equal(content["model"].predict_proba(X), model.predict_proba(X))


def test_only_allow_listed_types_load_under_old_names(tmp_path, fitted):
    """The old names widen nothing: a type off the list is refused under any module name."""
    model, _ = fitted
    path, _ = save_artifact({"model": model}, tmp_path, "m2")
    legacy = _legacy_skops(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(legacy)) as z:
        schema = z.read("schema.json").decode()
    assert "qcllp.learn.mean_maps" in schema
    forged = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(legacy)) as src, zipfile.ZipFile(forged, "w") as dst:
        for item in src.infolist():
            member = src.read(item.filename)
            if item.filename == "schema.json":
                member = member.replace(b'"FittedMeanMap"', b'"Popen"').replace(
                    b'"qcllp.learn.mean_maps"', b'"subprocess"'
                )
            dst.writestr(item, member)
    bad = tmp_path / "forged.skops"
    bad.write_bytes(forged.getvalue())
    with pytest.raises(Exception, match=r"subprocess\.Popen"):
        load_artifact(bad, file_sha256(bad))
