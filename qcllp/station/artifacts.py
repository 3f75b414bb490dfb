"""Model artifact files: written atomically and privately, confined to the models folder,
identified by their SHA-256, and read without running code.

An artifact (format 3) is a skops file (:mod:`skops.io`, a zip of JSON and ``.npy`` members):
loading it builds only the types on :data:`TRUSTED_TYPES` (qcllp's learners and their fitted
parts, one scikit-learn type skops does not trust by default) besides the plain, NumPy and
scikit-learn types skops trusts itself; any other type in a file is refused before anything is
built. Unlike a pickle, nothing in the file names code to call. skops over a hand-written
format: it already serializes every scikit-learn estimator the learners hold, and audits a
file before building it. Writing refuses an object that needs a type off the list, so a model
that could not be read back is never stored.

Every read goes through the same two guards whatever the format:

* **confinement**: a registry row names its file relative to the models folder; the path is
  resolved (symlinks included) and refused unless it lies inside that folder
  (:func:`artifact_file`), so a row cannot point a scorer at a file elsewhere;
* **the verified bytes**: the file is read once into memory, those bytes are hashed and
  compared with the registry's SHA-256, and the very same bytes are deserialized
  (:func:`read_verified`): a file swapped after the check is never the one loaded.

Formats 1 and 2 (joblib pickles of earlier qcllp versions) are still read behind both guards,
so an upgraded plant keeps scoring; ``qcllp models resave`` rewrites them as format 3. Files
written before the flow layout name the modules where the types lived then; they are read
through :mod:`qcllp.station.legacy_names`.

Files are created owner-only (0600) in a folder of mode 0700: the retrainer and the scorers run
as one service user, and a model's weights and its training metrics are the plant's business.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from qcllp import __version__
from qcllp.station.legacy_names import alias_legacy_modules, legacy_trusted_types

__all__ = [
    "ARTIFACT_FORMAT",
    "ARTIFACT_SUFFIX",
    "FILE_MODE",
    "FOLDER_MODE",
    "PICKLE_FORMATS",
    "READABLE_FORMATS",
    "TRUSTED_TYPES",
    "ArtifactError",
    "artifact_file",
    "file_sha256",
    "load_artifact",
    "read_verified",
    "save_artifact",
]

ARTIFACT_FORMAT = 3
PICKLE_FORMATS = (1, 2)
READABLE_FORMATS = (*PICKLE_FORMATS, ARTIFACT_FORMAT)
ARTIFACT_SUFFIX = ".skops"
FILE_MODE = 0o600
FOLDER_MODE = 0o700

# The types besides skops' own trusted ones (builtins, NumPy, SciPy, scikit-learn estimators)
# a station model is built of: every learner of qcllp.training.methods and its fitted parts
# (found with skops.io.get_untrusted_types on a trained model of each method and of the variants
# a config grid reaches; tests/station/test_artifacts.py stores each). Named one by one, never
# "all of qcllp": a type joins the list when a learner needs it.
TRUSTED_TYPES: tuple[str, ...] = (
    "qcllp.learn.psvm.alter_psvm.AlterPSVM",
    "qcllp.learn.psvm.alter_psvm.FittedPSVM",
    "qcllp.learn.baselines.InvCal",
    "qcllp.learn.baselines.MeanMap",
    "qcllp.learn.tabular.binning.QuantileBinner",
    "qcllp.learn.calibration.BagCalibrator",
    "qcllp.learn.calibration.CountCalibrator",
    "qcllp.learn.psvm.conv_psvm.ConvPSVM",
    "qcllp.learn.tabular.em_llp.EMLLP",
    "qcllp.learn.tabular.em_llp.EMScore",
    "qcllp.learn.core.kernels.ExactRBFMap",
    "qcllp.learn.core.kernels.LinearDecision",
    "qcllp.learn.cluster.kmeans_labeler.KMeansLabeler",
    "qcllp.learn.tabular.llpfc.LLPFC",
    "qcllp.learn.tabular.llpfc._BoostedDecision",
    "qcllp.learn.tabular.llpfc._EstimatorDecision",
    "qcllp.learn.tabular.llpfc._LogisticDecision",
    "qcllp.learn.tabular.mean_maps.AlternatingMeanMap",
    "qcllp.learn.tabular.mean_maps.FittedMeanMap",
    "qcllp.learn.tabular.mean_maps.LaplacianMeanMap",
    "qcllp.learn.per_defect.PerDefectClassifier",
    "qcllp.learn.tabular.proportion_boosting.BoostedScore",
    "qcllp.learn.tabular.proportion_boosting.ProportionBoosting",
    "qcllp.learn.psvm.twin_psvm.TwinDecision",
    "qcllp.learn.psvm.twin_psvm.TwinPSVM",
    "qcllp.training.methods.Standardized",
    "qcllp.station.lockout_rule.LockoutCosts",
    # scikit-learn's fitted trees, which skops does not trust by default: ProportionBoosting's,
    # and HistGradientBoosting's (the "hgb" base of llpfc and em-llp)
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.tree._tree.Tree",
)


class ArtifactError(Exception):
    """A model artifact is missing, outside the models folder, corrupted or incompatible."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def artifact_file(folder: Path, stored: str | Path) -> Path:
    """The file a registry row's ``artifact_path`` names, refused unless inside ``folder``.

    ``stored`` is relative to the models folder (what qcllp writes), or absolute (rows of
    earlier versions). Both are resolved, symlinks included, before the check: ``../x``, an
    absolute path elsewhere or a link out of the folder raise :class:`ArtifactError`.
    """
    root = Path(folder).resolve()
    given = Path(stored)
    resolved = (given if given.is_absolute() else root / given).resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise ArtifactError(
            f"model artifact path {str(stored)!r} lies outside the models folder {root} "
            f"(it resolves to {resolved}); refused"
        )
    return resolved


def read_verified(path: Path, sha256: str) -> bytes:
    """The file's bytes, read once, whose SHA-256 is ``sha256``; else :class:`ArtifactError`.

    The caller deserializes these bytes, never the path again: a file replaced after this read
    is not what gets loaded.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"model artifact {path} does not exist") from None
    except IsADirectoryError:
        raise ArtifactError(f"model artifact {path} is a folder, not a file") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ArtifactError(
            f"model artifact {path} is corrupted or was modified: its SHA-256 {actual[:12]}... "
            f"does not match the registry's {sha256[:12]}...; retrain or restore the file"
        )
    return data


def _private_folder(directory: Path) -> None:
    """Create the models folder 0700, or narrow an existing one of ours to it."""
    directory.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(directory, FOLDER_MODE)


def _skops_bytes(content: dict[str, Any], name: str) -> bytes:
    """The skops file of ``content``; refused if reading it back would need an untrusted type."""
    import skops.io  # here: listing models and `qcllp --help` need not load scikit-learn

    data = skops.io.dumps(content, compression=zipfile.ZIP_DEFLATED)
    foreign = sorted(set(skops.io.get_untrusted_types(data=data)) - set(TRUSTED_TYPES))
    if foreign:
        raise ArtifactError(
            f"model artifact {name} would hold types qcllp does not load: {', '.join(foreign)}"
        )
    return data


def save_artifact(payload: dict[str, Any], directory: Path, name: str) -> tuple[Path, str]:
    """Write ``payload`` to ``directory/name.skops`` atomically; return (path, sha256).

    The file is written owner-only to a temporary name in the same folder, flushed to disk and
    renamed, so a reader never sees half an artifact. ``format`` and ``qcllp_version`` are added
    to the payload (and win over keys of the same name in it).
    """
    if not name or Path(name).name != name or name.startswith("."):
        raise ValueError(f"artifact name {name!r} must be a plain file name")
    directory = Path(directory)
    _private_folder(directory)
    path = directory / f"{name}{ARTIFACT_SUFFIX}"
    content = {**payload, "format": ARTIFACT_FORMAT, "qcllp_version": __version__}
    data = _skops_bytes(content, path.name)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp's 0600 already; said, not assumed
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path, hashlib.sha256(data).hexdigest()


def _deserialize(data: bytes, path: Path) -> Any:
    """Build the object in ``data``: a skops file (a zip) with the allow-list, else a pickle of
    formats 1 and 2 (the caller has confined and verified these bytes). Types named under
    their modules of before the flow layout are the same types (:mod:`.legacy_names`)."""
    import joblib
    import skops.io

    alias_legacy_modules()
    trusted = (*TRUSTED_TYPES, *legacy_trusted_types(TRUSTED_TYPES))
    if zipfile.is_zipfile(io.BytesIO(data)):
        foreign = sorted(set(skops.io.get_untrusted_types(data=data)) - set(trusted))
        if foreign:
            raise ArtifactError(
                f"model artifact {path} holds types qcllp does not load: {', '.join(foreign)}; "
                "refused"
            )
        return skops.io.loads(data, trusted=list(trusted))
    return joblib.load(io.BytesIO(data))


def load_artifact(path: Path, sha256: str) -> dict[str, Any]:
    """Read an artifact's verified bytes and check its format; raise :class:`ArtifactError`.

    The checksum is checked on the bytes read *before* anything is built from them, and those
    bytes are what is built (:func:`read_verified`). ``path`` must already be confined
    (:func:`artifact_file`).
    """
    path = Path(path)
    data = read_verified(path, sha256)
    try:
        content = _deserialize(data, path)
    except ArtifactError:
        raise
    except Exception as exc:  # checksum matches, but not an artifact or written by other code
        raise ArtifactError(
            f"model artifact {path} is not a readable qcllp model artifact "
            f"({type(exc).__name__}: {exc}); retrain the model"
        ) from exc
    if not isinstance(content, dict) or "format" not in content:
        raise ArtifactError(
            f"model artifact {path} is not a qcllp model artifact (it holds a "
            f"{type(content).__name__} without a format number); retrain the model"
        )
    if content["format"] not in READABLE_FORMATS:
        raise ArtifactError(
            f"model artifact {path} has format {content['format']!r}; this qcllp "
            f"({__version__}) reads formats {', '.join(map(str, READABLE_FORMATS))}; retrain the "
            "model with this qcllp (qcllp train --station ...)"
        )
    return content
