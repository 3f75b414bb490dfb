"""``qcllp status``: what an operator on call reads first, from the plant database alone.

Per station: the active model with its age and headline figures, who is training it, the
scorer's checkpoint (last batch taken in, when, with which model), sticks pending and flags
written by decision, the last drift checks; the newest batch committed; the retraining
daemon (which process leads, its jobs' next runs from APScheduler's job table, the last run
of each); the recent promotion decisions with their reasons; the latest alarms; per
active model its realized (inspected) saving, since its promotion and over the last
:data:`REALIZED_DAYS` days (:func:`qcllp.scoring.inspection_guard.realized_saving`); and a
station's shadow trial with its figures and what the confirmation rule says of it now
(:func:`shadow_trial_state`); and what each station sent to the lock-out bay over those days
(``bay``: lock-outs and audit samples of the sticks it decided). It works whether or not
the services are running.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, case, func, select

from qcllp.plant.config import PlantConfig
from qcllp.retraining.shadow_trial import judge_trial, trial_figures
from qcllp.scoring.inspection_guard import model_realized
from qcllp.station.registry import active_model, shadow_model
from qcllp.store import (
    RETRAINER_JOBS,
    Alarm,
    Flag,
    IngestionBatch,
    LockoutGuard,
    ScorerCheckpoint,
    ScorerPending,
    Store,
    stored_utc,
)
from qcllp.store.events import QUEUED_PREFIX, WANTED_KINDS, events
from qcllp.store.leases import RETRAINER_LEASE, lease_holder, station_lease_name
from qcllp.store.partitions import list_partitions

__all__ = ["latest_alarms", "plant_status", "shadow_trial_state"]


REALIZED_DAYS = 7  # the recent window of the realized (inspected) saving

HEADLINE_METRICS = (
    "expected_saving_per_1000",
    "saving_low_per_1000",
    "saving_high_per_1000",
    "calibration_error",
    "lockout_declined",
    "held_back_charges",
    "audits_declined",
    "audit_inspected",
    "audit_inspected_failing",
    "saving_in_sample",
)


@dataclass(frozen=True)
class _Tables:
    """What one read of the plant database's tables gives: the newest batch, the scorers'
    checkpoints, sticks pending and flags by station, the latest alarms, the lock-out guards
    and the months of readings stored (and being dropped)."""

    newest: Row | None
    checkpoints: dict[str, Row]
    pending: dict[str, int]
    flags: dict[str, dict[str, int]]
    recent_flags: dict[str, dict[str, int]]
    alarms: list[dict[str, Any]]
    guards: dict[tuple[str, int], Row]
    months: list[str]
    detached: list[str]


def plant_status(store: Store, config: PlantConfig, *, alarms: int = 10) -> dict[str, Any]:
    """A JSON-ready summary of the scorers, the retrainer, the ingestion and the alarms."""
    now = datetime.now(UTC)
    tables = _read_tables(store, alarms, now - timedelta(days=REALIZED_DAYS))
    stations = [_station(store, config, name, tables, now) for name in config.station_names]
    return {
        "database": store.display_url,
        "retrainer": _retrainer(store),
        "decisions": _decisions(store),
        "readings": {
            "partitioned": store.dialect == "postgresql",
            "months": tables.months,
            "retention_days": config.retention.readings_days,
            "being_dropped": tables.detached,
        },
        "newest_batch": None
        if tables.newest is None
        else {"seq": tables.newest.commit_seq, "at": tables.newest.finished_at},
        "stations": stations,
        "alarms": tables.alarms,
    }


def latest_alarms(conn: Connection, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest alarms, newest first: ``at, station, kind, message``."""
    a = Alarm.__table__
    rows = conn.execute(
        select(a.c.created_at, a.c.station, a.c.kind, a.c.message)
        .order_by(a.c.id.desc())
        .limit(limit)
    ).all()
    return [
        {"at": r.created_at, "station": r.station, "kind": r.kind, "message": r.message}
        for r in rows
    ]


def _read_tables(store: Store, alarms: int, recent: datetime) -> _Tables:
    """The plant-wide figures, read on one connection: the newest batch, every checkpoint,
    the pending sticks and flags counted by station (all of them, and those scored since
    ``recent``), the ``alarms`` latest alarms, every lock-out guard and the months of
    readings."""
    b, c, p, f, g = (
        IngestionBatch.__table__,
        ScorerCheckpoint.__table__,
        ScorerPending.__table__,
        Flag.__table__,
        LockoutGuard.__table__,
    )
    with store.engine.connect() as conn:
        newest = conn.execute(
            select(b.c.commit_seq, b.c.finished_at).order_by(b.c.commit_seq.desc()).limit(1)
        ).first()
        checkpoints = {r.station: r for r in conn.execute(select(c)).all()}
        pending = dict(conn.execute(select(p.c.station, func.count()).group_by(p.c.station)).all())
        flags: dict[str, dict[str, int]] = {}
        recent_flags: dict[str, dict[str, int]] = {}
        since = func.sum(case((f.c.scored_at >= recent, 1), else_=0))
        for station, decision, n, n_recent in conn.execute(
            select(f.c.station, f.c.decision, func.count(), since).group_by(
                f.c.station, f.c.decision
            )
        ):
            flags.setdefault(station, {})[decision] = int(n)
            recent_flags.setdefault(station, {})[decision] = int(n_recent or 0)
        latest = latest_alarms(conn, alarms)
        guards = {(r.station, r.model_id): r for r in conn.execute(select(g)).all()}
        months = [p.month for p in list_partitions(conn)]
        detached = [p.month for p in list_partitions(conn, archiving=True)]
    return _Tables(
        newest, checkpoints, pending, flags, recent_flags, latest, guards, months, detached
    )


def _station(
    store: Store, config: PlantConfig, name: str, tables: _Tables, now: datetime
) -> dict[str, Any]:
    """One station: its active model, who trains it, its drift checks, its scorer's
    checkpoint, its pending sticks and flags, and its model's lock-out guard."""
    model = active_model(store, name)
    cp = tables.checkpoints.get(name)
    guard = None if model is None else tables.guards.get((name, model["id"]))
    training = lease_holder(store, station_lease_name(name))
    newest = tables.newest
    return {
        "station": name,
        "active_model": None if model is None else model["id"],
        "model_age_h": None if model is None else _age_h(model, now),
        "model_metrics": {}
        if model is None
        else {k: model["metrics"].get(k) for k in HEADLINE_METRICS},
        "training_by": None if training is None else training[0],
        "drift": _drift(store, name),
        "scorer_model": None if cp is None else cp.model_id,
        "batches_behind": (
            None if cp is None or newest is None else int(newest.commit_seq - cp.commit_seq)
        ),
        "checkpoint_at": None if cp is None else cp.updated_at,
        "pending_sticks": int(tables.pending.get(name, 0)),
        "flags": tables.flags.get(name, {}),
        "bay": _bay(tables.recent_flags.get(name, {})),
        "lockout_suspended": None if guard is None else guard.reason,
        "lockout_guard": None if guard is None else _guard(guard, model, config),
        "realized_inspected": None if model is None else _realized(store, config, name, model, now),
        "shadow_trial": shadow_trial_state(store, config, name),
    }


def shadow_trial_state(store: Store, config: PlantConfig, station: str) -> dict[str, Any] | None:
    """The station's shadow trial, or ``None``: its model, since when, the figures
    (:func:`qcllp.retraining.shadow_trial.trial_figures`), their line for people and what the
    confirmation rule says now (``state``: ``wait``, ``confirm`` or ``reject`` with why)."""
    model = shadow_model(store, station)
    if model is None:
        return None
    figures = trial_figures(store, config, station, model)
    verdict = judge_trial(figures, config.station(station).break_even, config.retrainer)
    return {
        "model": int(model["id"]),
        "since": figures.since,
        "state": f"{verdict.outcome}: {verdict.reason}",
        "confirm": config.retrainer.shadow_confirm,
        "figures": figures.as_dict(),
        "line": figures.line(config.currency),
    }


def _realized(
    store: Store, config: PlantConfig, name: str, model: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """The active model's realized (inspected) saving, since its promotion and over the last
    :data:`REALIZED_DAYS` days, with the counts."""
    st = config.station(name)
    recent = now - timedelta(days=REALIZED_DAYS)
    return {
        "since_promotion": model_realized(store, st, model["id"]).as_dict(),
        f"last_{REALIZED_DAYS}_days": model_realized(store, st, model["id"], recent).as_dict(),
        "currency": config.currency,
    }


def _drift(store: Store, station: str) -> dict[str, str]:
    """The station's last count-drift and feature-drift checks, ``outcome: reason``."""
    return {
        e["kind"]: f"{e['outcome']}: {e['reason']}"
        for kind in ("count_drift", "feature_drift")
        for e in events(store, [kind], station=station, limit=1)
    }


def _guard(guard: Row, model: dict[str, Any], config: PlantConfig) -> dict[str, Any]:
    """The active model's lock-out guard: the share it locks out against its bound, and final
    QC's counts against what it predicted."""
    return {
        "decided": int(guard.decided),
        "locked": int(guard.locked),
        "excess": float(guard.excess),
        "excess_bound": model["metrics"].get("lockout_excess_bound"),
        "qc_charges": int(guard.count_charges),
        "qc_predicted": float(guard.count_predicted),
        "qc_reported": int(guard.count_observed),
        "qc_excess": float(guard.count_excess),
        "qc_interval": config.scorer.count_guard_interval,
        "locks_out": (model["metrics"].get("threshold") or 0.0) <= 1.0,
        "qc_skipped": int(guard.count_skipped),
        "qc_skip_reason": guard.count_skip_reason,
        "inspected_failing": int(guard.inspect_fail),
        "inspected_good": int(guard.inspect_good),
        "inspection_shortfall": float(guard.inspect_excess),
        "inspection_interval": config.scorer.inspection_guard_interval,
        "break_even": config.station(guard.station).break_even,
    }


def _bay(recent: dict[str, int]) -> dict[str, int]:
    """What the station sent to the lock-out bay over the last :data:`REALIZED_DAYS` days:
    its lock-outs and audit samples (each stick of both is looked at there, at the station's
    ``inspection_cost``) of all the sticks it decided. The figure a plant sizes its bay and
    its ``audit_share`` by."""
    return {
        "days": REALIZED_DAYS,
        "decided": sum(recent.values()),
        "lock_out": recent.get("lock_out", 0),
        "inspect": recent.get("inspect", 0),
    }


def _decisions(store: Store) -> list[dict[str, Any]]:
    """The five latest promotion decisions with their reasons (a shadow trial's confirmation
    or rejection is one)."""
    return [
        {
            "at": e["at"],
            "station": e["station"],
            "model_id": e["model_id"],
            "outcome": e["outcome"],
            "reason": e["reason"],
        }
        for e in events(store, ["promotion", "confirmed", "rejected"], limit=5)
    ]


def _age_h(model: dict[str, Any], now: datetime) -> float | None:
    since = model.get("promoted_at") or model.get("created_at")
    if since is None:
        return None
    return round((now - stored_utc(since)).total_seconds() / 3600, 1)


def _retrainer(store: Store) -> dict[str, Any]:
    """The daemon: who leads (lease), next run of each job, the last run of each job."""
    with store.engine.connect() as conn:
        jobs = conn.execute(
            select(RETRAINER_JOBS.c.id, RETRAINER_JOBS.c.next_run_time).order_by(
                RETRAINER_JOBS.c.id
            )
        ).all()
    leader = lease_holder(store, RETRAINER_LEASE)
    last: dict[str, str] = {}
    for e in events(store, ["job"], limit=50):
        job = (e["detail"] or {}).get("job")
        if job and job not in last:
            last[job] = f"{e['at']:%Y-%m-%d %H:%M:%S} {e['outcome']}: {e['reason']}"
    return {
        "leader": None if leader is None else leader[0],
        "jobs": [
            {
                "job": job_id,
                "next_run": None if next_run is None else datetime.fromtimestamp(next_run, tz=UTC),
                "last": last.get(job_id),
                "why": _why_queued(store, job_id),
            }
            for job_id, next_run in jobs
        ],
    }


def _why_queued(store: Store, job_id: str) -> str | None:
    """A queued one-off retraining (it has no last run; its run is logged as ``retrain``): the
    newest event that wanted it, e.g. a count-drift alarm or a suspension of lock-outs."""
    if not job_id.startswith(QUEUED_PREFIX):
        return None
    wanted = events(store, WANTED_KINDS, station=job_id.removeprefix(QUEUED_PREFIX), limit=1)
    return f"{wanted[0]['at']:%Y-%m-%d %H:%M:%S} {wanted[0]['reason']}" if wanted else None
