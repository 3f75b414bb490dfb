"""The model registry: which models exist per station, which one is active, and their files.

A trained model enters as a ``candidate`` with its artifact's SHA-256. ``promote`` makes one
model per station ``active`` (the previous active one is ``retired``); ``rollback`` retires
the active model and reactivates the one promoted before it. ``promote(..., shadow=True)``
puts a model on a **shadow trial** instead: one ``shadow`` model per station is scored beside
the active one (or alone), its would-be decisions are recorded
(:class:`~qcllp.store.schema.ShadowFlag`) and the line acts on none of them, until it is
promoted to active (by hand, or by the retraining daemon's confirmation rule).

A row names its artifact relative to the database's models folder (:attr:`Store.models_dir
<qcllp.store.Store.models_dir>`; rows of earlier versions hold an absolute path). Loading
refuses a path that resolves outside that folder, verifies the checksum of the bytes it read
and builds the model from those same bytes (:mod:`.artifacts`), so a row cannot point a scorer
at a file elsewhere and a corrupted, tampered or swapped file is refused; it then checks that
the :class:`~qcllp.station.model.StationModel` inside is the one its row describes (station,
target, feature list): a row pointing at another station's file is refused too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.orm import Session

from qcllp import __version__
from qcllp.station.artifacts import (
    ARTIFACT_SUFFIX,
    ArtifactError,
    artifact_file,
    load_artifact,
    save_artifact,
)
from qcllp.store import LockoutGuard, Model, Store
from qcllp.store.leases import scorer_lock_key

if TYPE_CHECKING:  # loaded with a model: listing models need not load scikit-learn
    from qcllp.station.model import StationModel

__all__ = [
    "LoadedModel",
    "RegistryError",
    "get_model",
    "list_models",
    "live_model_ids",
    "load_model",
    "promote",
    "promote_shadow",
    "register_model",
    "load_shadow",
    "shadow_model",
    "resave_model",
    "rollback",
    "active_model",
    "artifact_location",
    "save_station_model",
]

STATUSES = ("candidate", "shadow", "active", "retired")


class RegistryError(ValueError):
    """A registry request that cannot be met (unknown model, nothing to roll back to, ...)."""


@dataclass(frozen=True)
class LoadedModel:
    """A registry row and its verified station model."""

    record: dict[str, Any]
    model: StationModel

    @property
    def id(self) -> int:
        return int(self.record["id"])


def save_station_model(model: StationModel, directory: Path, stem: str) -> tuple[Path, str]:
    """Write a station model's artifact (format 3); returns (path, sha256). Its row records
    ``path.name``: the path relative to the models folder."""
    return save_artifact({"station_model": model.to_state()}, directory, stem)


def artifact_location(store: Store, record: dict[str, Any]) -> Path:
    """The artifact file of a registry row, confined to the store's models folder.

    Raises :class:`ArtifactError` naming the model and the path if the path resolves outside
    the folder (``..``, an absolute path elsewhere, a symlink out of it), or if the folder of a
    server database is unknown (the store was opened without the plant config).
    """
    folder = store.models_dir
    if folder is None:
        raise ArtifactError(
            f"model {record['id']} ({record['station']}): the models folder of this server "
            "database is unknown; name the plant config (--config or QCLLP_CONFIG)"
        )
    try:
        return artifact_file(folder, record["artifact_path"])
    except ArtifactError as exc:
        raise ArtifactError(f"model {record['id']} ({record['station']}): {exc}") from None


def _as_dict(row: Model) -> dict[str, Any]:
    return {c.name: getattr(row, c.name) for c in Model.__table__.columns}


def register_model(
    store: Store, *, also: Callable[[Connection, int], None] | None = None, **fields: Any
) -> int:
    """Record a trained model as a candidate; returns its id. ``also(connection, model_id)``
    writes more in the same transaction (the retraining daemon's ``trained`` event: a
    candidate and its event exist together or not at all)."""
    fields.setdefault("status", "candidate")
    fields.setdefault("qcllp_version", __version__)
    fields.setdefault("created_at", datetime.now(UTC))
    with store.write_session() as session:
        row = Model(**fields)
        session.add(row)
        session.flush()
        if also is not None:
            also(session.connection(), int(row.id))
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
    return _model_with_status(store, station, "active")


def shadow_model(store: Store, station: str) -> dict[str, Any] | None:
    """The station's model on a shadow trial, or ``None``."""
    return _model_with_status(store, station, "shadow")


def live_model_ids(store: Store, station: str) -> dict[str, int]:
    """The ids of the station's ``active`` and ``shadow`` models, keyed by status (a status
    no model holds is left out): the look a scorer takes every tick, one indexed query of two
    columns (reading both whole rows through the ORM, their JSON parsed, cost a line's scorer
    5 ms a tick, ``benchmarks/bench_scorer.py`` poll)."""
    m = Model.__table__
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(m.c.status, m.c.id).where(
                m.c.station == station, m.c.status.in_(("active", "shadow"))
            )
        ).all()
    return {status: int(model_id) for status, model_id in rows}


def _model_with_status(store: Store, station: str, status: str) -> dict[str, Any] | None:
    with store.session() as session:
        row = session.scalars(
            select(Model).where(Model.station == station, Model.status == status)
        ).first()
        return None if row is None else _as_dict(row)


def load_shadow(store: Store, station: str) -> LoadedModel | None:
    """The station's shadow model, verified as :func:`load_model` verifies, or ``None``."""
    record = shadow_model(store, station)
    return None if record is None else load_model(store, int(record["id"]))


def promote(
    store: Store,
    model_id: int,
    *,
    shadow: bool = False,
    also: Callable[[Connection], None] | None = None,
) -> dict[str, Any]:
    """Make ``model_id`` its station's active model; the previous active one is retired.

    ``shadow``: put it on a shadow trial instead (:func:`promote_shadow`).

    The model's artifact is loaded and verified first (:func:`load_model`): a corrupt file or
    one built for another station is never made active. Promoting starts the model's lock-out
    guard afresh (:mod:`qcllp.scoring.share_guard`); promoting the active model again is how an
    operator
    lifts a suspension once its cause is fixed. ``also(connection)`` writes more in the same
    transaction (the daemon's promotion event).
    """
    if shadow:
        return promote_shadow(store, model_id, also=also)
    load_model(store, model_id)
    with store.write_session() as session:
        row = _row_to_promote(session, model_id, also)
        _restart_guard(session.connection(), row.station, model_id)
        row.promoted_at = datetime.now(UTC)  # the guard judges what it decides from now on
        if row.status != "active":
            for other in session.scalars(
                select(Model).where(Model.station == row.station, Model.status == "active")
            ):
                other.status = "retired"
            row.status = "active"
        session.flush()
        return _as_dict(row)


def promote_shadow(
    store: Store, model_id: int, *, also: Callable[[Connection], None] | None = None
) -> dict[str, Any]:
    """Put ``model_id`` on its station's shadow trial; the previous shadow model is retired.

    The artifact is verified first, as for :func:`promote`. The active model is not touched,
    and an active model cannot go to shadow (roll it back instead): the line would be left
    without the model it is acting on. ``promoted_at`` marks the start of the trial.
    """
    load_model(store, model_id)
    with store.write_session() as session:
        row = _row_to_promote(session, model_id, also)
        if row.status == "active":
            raise RegistryError(
                f"model {model_id} is active at {row.station}; roll it back "
                "(qcllp models rollback) before trying it in shadow"
            )
        if row.status != "shadow":
            for other in session.scalars(
                select(Model).where(Model.station == row.station, Model.status == "shadow")
            ):
                other.status = "retired"
            row.status = "shadow"
            row.promoted_at = datetime.now(UTC)
        session.flush()
        return _as_dict(row)


def _row_to_promote(
    session: Session, model_id: int, also: Callable[[Connection], None] | None
) -> Model:
    """The model's row in a promotion's transaction, after the caller's ``also`` wrote its
    part (an event), so that both commit together or neither does."""
    if also is not None:
        also(session.connection())
    row = session.get(Model, model_id)
    if row is None:
        raise RegistryError(f"no model with id {model_id}")
    return row


def _restart_guard(conn: Connection, station: str, model_id: int) -> None:
    """A model (re)starts its term with a fresh lock-out guard. On PostgreSQL the station's
    scorer lock is taken first, so that no scorer step in flight writes the old guard row
    back after it is gone (SQLite's writer lock serializes both already)."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(scorer_lock_key(station))))
    conn.execute(
        delete(LockoutGuard).where(
            LockoutGuard.station == station, LockoutGuard.model_id == model_id
        )
    )


def rollback(store: Store, station: str) -> dict[str, Any]:
    """Retire the station's active model and reactivate the one promoted before it.

    The reactivated model's artifact is verified first, as :func:`promote` does: rolling back
    to a file that has since been corrupted fails and leaves the active model in place.
    """
    with store.write_session() as session:
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
        load_model(store, previous.id)
        _restart_guard(session.connection(), station, previous.id)
        current.status = "retired"
        previous.status = "active"
        previous.promoted_at = datetime.now(UTC)
        session.flush()
        return _as_dict(previous)


def load_model(store: Store, model_id: int | None = None, *, station: str | None = None):
    """Load a model by id, or the station's active one, verifying its artifact."""
    from qcllp.station.model import ModelMismatchError

    if model_id is not None:
        record = get_model(store, model_id)
    else:
        record = active_model(store, station)
        if record is None:
            raise RegistryError(
                f"station {station!r} has no active model; train one and promote it "
                "(qcllp train, qcllp models promote)"
            )
    path = artifact_location(store, record)
    content = load_artifact(path, record["sha256"])
    model = _station_model(content, record, path)
    try:
        model.check_matches(
            station=record["station"], target=record["target"], features=record["features"]
        )
    except ModelMismatchError as exc:
        raise ArtifactError(
            f"model {record['id']} ({record['station']}) cannot use artifact {path}: {exc}; "
            "retrain the station (qcllp train --station ...)"
        ) from exc
    return LoadedModel(record=record, model=model)


def _station_model(content: dict[str, Any], record: dict[str, Any], path: Path) -> StationModel:
    """The station model of an artifact of any readable format."""
    from qcllp.station.model import StationModel, station_model_from_state, station_model_from_v1

    if content["format"] == 1:
        return station_model_from_v1(content, record)
    model = content.get("station_model")
    if isinstance(model, dict) and content["format"] >= 3:
        try:
            return station_model_from_state(model)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(
                f"model artifact {path} holds no readable station model ({exc}); retrain the model"
            ) from exc
    if not isinstance(model, StationModel):
        raise ArtifactError(f"model artifact {path} holds no station model; retrain the model")
    return model


def resave_model(store: Store, model_id: int) -> dict[str, Any] | None:
    """Rewrite a model's artifact of format 1 or 2 (a pickle) as format 3; the new row, or
    ``None`` if it is format 3 already.

    The pickle is read behind both guards (:func:`load_model`), written again beside it as
    ``<stem>.skops``, and the row switched to the new file in one transaction, only if it still
    names the old one (a concurrent change wins); the old file is removed after the commit.
    """
    record = get_model(store, model_id)
    old = artifact_location(store, record)
    if old.suffix == ARTIFACT_SUFFIX:
        return None
    loaded = load_model(store, model_id)
    new, sha = save_station_model(loaded.model, old.parent, old.stem)
    with store.write_session() as session:
        row = session.get(Model, model_id)
        if row is None or (row.artifact_path, row.sha256) != (
            record["artifact_path"],
            record["sha256"],
        ):
            new.unlink(missing_ok=True)
            raise RegistryError(f"model {model_id} changed while it was being re-saved; retry")
        row.artifact_path, row.sha256 = new.name, sha
        session.flush()
        result = _as_dict(row)
    old.unlink(missing_ok=True)
    return result
