"""The retraining daemon's event log (table ``retrainer_events``): every job run, model
trained, promotion decision and drift check, with the reason a person reads and the figures
behind it. ``qcllp status`` shows the recent ones; tests read them to check what was decided.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, select

from qcllp.store import RetrainerEvent, Store

__all__ = [
    "EVENT_KINDS",
    "QUEUED_PREFIX",
    "WANTED_KINDS",
    "events",
    "insert_event",
    "record_event",
]

EVENT_KINDS = (
    "job",
    "trained",
    "promotion",
    "count_drift",
    "feature_drift",
    "recovery",
    "guard_retrain",
    "drift_retrain",
    "shadow",
    "confirmed",
    "rejected",
)
QUEUED_PREFIX = "queued-retrain-"  # job id of a retraining a drift alarm or a suspension queued
WANTED_KINDS = ("drift_retrain", "guard_retrain")  # the events of such a retraining
_T = RetrainerEvent.__table__


def insert_event(
    conn: Connection,
    kind: str,
    outcome: str,
    reason: str,
    *,
    station: str | None = None,
    model_id: int | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """An event inside the caller's transaction (it exists exactly when that commits)."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}; known: {', '.join(EVENT_KINDS)}")
    conn.execute(
        _T.insert().values(
            at=datetime.now(UTC),
            kind=kind,
            station=station,
            model_id=model_id,
            outcome=outcome,
            reason=reason,
            detail=_plain(detail or {}),
        )
    )


def record_event(store: Store, kind: str, outcome: str, reason: str, **fields: Any) -> None:
    """:func:`insert_event` in a transaction of its own."""
    with store.writing() as conn:
        insert_event(conn, kind, outcome, reason, **fields)


def events(
    store: Store,
    kinds: Sequence[str] | None = None,
    *,
    station: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """The newest events first (optionally of some kinds, of one station)."""
    query = select(_T).order_by(_T.c.id.desc()).limit(limit)
    if kinds:
        query = query.where(_T.c.kind.in_(list(kinds)))
    if station is not None:
        query = query.where(_T.c.station == station)
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def _plain(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to None."""
    return json.loads(json.dumps(value, default=_default, allow_nan=True), parse_constant=_nan)


def _default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _nan(_token: str) -> None:
    return None
