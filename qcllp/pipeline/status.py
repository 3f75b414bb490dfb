"""``qcllp status``: what an operator on call reads first, from the plant database alone.

Per station: the active model, the scorer's checkpoint (last batch taken in, when, with which
model), sticks pending and flags written by decision; the newest batch committed; the latest
alarms. It works whether or not the services are running.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from qcllp.plant.config import PlantConfig
from qcllp.store import (
    Alarm,
    Flag,
    IngestionBatch,
    LockoutGuard,
    ScorerCheckpoint,
    ScorerPending,
    Store,
)

from .registry import active_model

__all__ = ["plant_status"]


def plant_status(store: Store, config: PlantConfig, *, alarms: int = 10) -> dict[str, Any]:
    """A JSON-ready summary of the scorers, the ingestion and the alarms."""
    b, c, p, f, a, g = (
        IngestionBatch.__table__,
        ScorerCheckpoint.__table__,
        ScorerPending.__table__,
        Flag.__table__,
        Alarm.__table__,
        LockoutGuard.__table__,
    )
    with store.engine.connect() as conn:
        newest = conn.execute(
            select(b.c.commit_seq, b.c.finished_at).order_by(b.c.commit_seq.desc()).limit(1)
        ).first()
        checkpoints = {r.station: r for r in conn.execute(select(c)).all()}
        pending = dict(conn.execute(select(p.c.station, func.count()).group_by(p.c.station)).all())
        flags: dict[str, dict[str, int]] = {}
        for station, decision, n in conn.execute(
            select(f.c.station, f.c.decision, func.count()).group_by(f.c.station, f.c.decision)
        ):
            flags.setdefault(station, {})[decision] = int(n)
        latest = conn.execute(select(a).order_by(a.c.id.desc()).limit(alarms)).all()
        guards = {(r.station, r.model_id): r for r in conn.execute(select(g)).all()}
    stations = []
    for name in config.station_names:
        model = active_model(store, name)
        cp = checkpoints.get(name)
        guard = None if model is None else guards.get((name, model["id"]))
        stations.append(
            {
                "station": name,
                "active_model": None if model is None else model["id"],
                "scorer_model": None if cp is None else cp.model_id,
                "batches_behind": (
                    None if cp is None or newest is None else int(newest.commit_seq - cp.commit_seq)
                ),
                "checkpoint_at": None if cp is None else cp.updated_at,
                "pending_sticks": int(pending.get(name, 0)),
                "flags": flags.get(name, {}),
                "lockout_suspended": None if guard is None else guard.reason,
            }
        )
    return {
        "database": store.display_url,
        "newest_batch": None
        if newest is None
        else {"seq": newest.commit_seq, "at": newest.finished_at},
        "stations": stations,
        "alarms": [
            {"at": r.created_at, "station": r.station, "kind": r.kind, "message": r.message}
            for r in latest
        ],
    }
