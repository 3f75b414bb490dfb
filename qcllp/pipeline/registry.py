"""The model registry: which models exist per station, which one is active, and their files.

A trained model enters as a ``candidate`` with its artifact's SHA-256. ``promote`` makes one
model per station ``active`` (the previous active one is ``retired``); ``rollback`` retires
the active model and reactivates the one promoted before it. Loading verifies the checksum
before unpickling (:mod:`.artifacts`), so a corrupted or tampered file is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from qcllp import __version__
from qcllp.store import Model, Store

from .artifacts import load_artifact

__all__ = [
    "LoadedModel",
    "RegistryError",
    "get_model",
    "list_models",
    "load_model",
    "promote",
    "register_model",
    "rollback",
    "active_model",
]

STATUSES = ("candidate", "active", "retired")


class RegistryError(ValueError):
    """A registry request that cannot be met (unknown model, nothing to roll back to, ...)."""


@dataclass(frozen=True)
class LoadedModel:
    """A registry row and its verified artifact payload."""

    record: dict[str, Any]
    payload: dict[str, Any]

    @property
    def estimator(self):
        return self.payload["model"]


def _as_dict(row: Model) -> dict[str, Any]:
    return {c.name: getattr(row, c.name) for c in Model.__table__.columns}


def register_model(store: Store, **fields: Any) -> int:
    """Record a trained model as a candidate; returns its id."""
    fields.setdefault("status", "candidate")
    fields.setdefault("qcllp_version", __version__)
    fields.setdefault("created_at", datetime.now(UTC))
    with store.session() as session:
        row = Model(**fields)
        session.add(row)
        session.flush()
        return int(row.id)


def list_models(store: Store, station: str | None = None) -> list[dict[str, Any]]:
    """All models, newest first (optionally of one station)."""
    query = select(Model).order_by(Model.id.desc())
    if station is not None:
        query = query.where(Model.station == station)
    with store.session() as session:
        return [_as_dict(row) for row in session.scalars(query)]


def get_model(store: Store, model_id: int) -> dict[str, Any]:
    with store.session() as session:
        row = session.get(Model, model_id)
        if row is None:
            raise RegistryError(f"no model with id {model_id}")
        return _as_dict(row)


def active_model(store: Store, station: str) -> dict[str, Any] | None:
    """The station's active model, or ``None``."""
    with store.session() as session:
        row = session.scalars(
            select(Model).where(Model.station == station, Model.status == "active")
        ).first()
        return None if row is None else _as_dict(row)


def promote(store: Store, model_id: int) -> dict[str, Any]:
    """Make ``model_id`` its station's active model; the previous active one is retired."""
    with store.session() as session:
        row = session.get(Model, model_id)
        if row is None:
            raise RegistryError(f"no model with id {model_id}")
        if row.status == "active":
            return _as_dict(row)
        for other in session.scalars(
            select(Model).where(Model.station == row.station, Model.status == "active")
        ):
            other.status = "retired"
        row.status = "active"
        row.promoted_at = datetime.now(UTC)
        session.flush()
        return _as_dict(row)


def rollback(store: Store, station: str) -> dict[str, Any]:
    """Retire the station's active model and reactivate the one promoted before it."""
    with store.session() as session:
        current = session.scalars(
            select(Model).where(Model.station == station, Model.status == "active")
        ).first()
        if current is None:
            raise RegistryError(f"station {station!r} has no active model to roll back")
        previous = session.scalars(
            select(Model)
            .where(
                Model.station == station,
                Model.status == "retired",
                Model.promoted_at.is_not(None),
                Model.id != current.id,
            )
            .order_by(Model.promoted_at.desc(), Model.id.desc())
        ).first()
        if previous is None:
            raise RegistryError(
                f"station {station!r}: model {current.id} is the first one ever promoted; "
                "there is nothing to roll back to"
            )
        current.status = "retired"
        previous.status = "active"
        previous.promoted_at = datetime.now(UTC)
        session.flush()
        return _as_dict(previous)


def load_model(store: Store, model_id: int | None = None, *, station: str | None = None):
    """Load a model by id, or the station's active one, verifying its artifact."""
    if model_id is not None:
        record = get_model(store, model_id)
    else:
        record = active_model(store, station)
        if record is None:
            raise RegistryError(
                f"station {station!r} has no active model; train one and promote it "
                "(qcllp train, qcllp models promote)"
            )
    payload = load_artifact(Path(record["artifact_path"]), record["sha256"])
    return LoadedModel(record=record, payload=payload)
