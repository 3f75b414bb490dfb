"""Model artifact files: written atomically, identified by their SHA-256, verified on load.

A joblib pickle executes code when loaded, so an artifact is only unpickled after its checksum
matches the one the registry recorded when it was written: a corrupted or tampered file is
refused before it is read. The payload carries a format number and the qcllp version that
wrote it, so an incompatible artifact is refused with a message instead of failing later.

Formats: 1 held the station model as a plain dict of parts; 2 holds one
:class:`~qcllp.pipeline.station_model.StationModel` under ``"station_model"``. Both are read;
the registry converts format 1 (:func:`~qcllp.pipeline.station_model.station_model_from_v1`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import joblib

from qcllp import __version__

__all__ = [
    "ARTIFACT_FORMAT",
    "READABLE_FORMATS",
    "ArtifactError",
    "file_sha256",
    "load_artifact",
    "save_artifact",
]

ARTIFACT_FORMAT = 2
READABLE_FORMATS = (1, 2)


class ArtifactError(Exception):
    """A model artifact is missing, corrupted or incompatible."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_artifact(payload: dict[str, Any], directory: Path, name: str) -> tuple[Path, str]:
    """Write ``payload`` to ``directory/name.joblib`` atomically; return (path, sha256).

    The file is written to a temporary name in the same folder, flushed to disk and renamed,
    so a reader never sees half an artifact. ``format`` and ``qcllp_version`` are added to the
    payload (and win over keys of the same name in it).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.joblib"
    if not name or Path(name).name != name or name.startswith("."):
        raise ValueError(f"artifact name {name!r} must be a plain file name")
    content = {**payload, "format": ARTIFACT_FORMAT, "qcllp_version": __version__}
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; the scoring service may run as another user
        with os.fdopen(fd, "wb") as fh:
            joblib.dump(content, fh, compress=3)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path, file_sha256(path)


def load_artifact(path: Path, sha256: str) -> dict[str, Any]:
    """Read an artifact after checking its checksum and format; raise :class:`ArtifactError`.

    The checksum is checked *before* unpickling: a modified file is never executed.
    """
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"model artifact {path} does not exist")
    actual = file_sha256(path)
    if actual != sha256:
        raise ArtifactError(
            f"model artifact {path} is corrupted or was modified: its SHA-256 {actual[:12]}... "
            f"does not match the registry's {sha256[:12]}...; retrain or restore the file"
        )
    try:
        content = joblib.load(path)
    except Exception as exc:  # checksum matches, but not a joblib file or written by other code
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
