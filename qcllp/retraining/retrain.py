"""One retraining of a station, as the daemon runs it: train a candidate on the labeled
charges before the holdout window, register it, and let the promotion gate decide
(:mod:`.promotion`). And the recovery a daemon runs when it starts.

Order of what is written, so that a ``kill -9`` at any moment leaves a consistent registry:

1. the artifact file (a temporary name, renamed when complete: :mod:`qcllp.station.artifacts`);
2. the ``models`` row (status ``candidate``) -- only while the station's lease is still held --
   together with the event ``trained`` (one transaction);
3. the promotion (one transaction) and the event ``promotion``.

A kill between 1 and 2 leaves a file no row points at: :func:`recover` removes such files
once they are older than a lease's time to live (nobody can still be about to register
them). A kill between 2 and 3 leaves a candidate without a decision: :func:`recover` takes
the decision. Nothing is ever half registered: a row is one insert.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from qcllp.plant.config import PlantConfig
from qcllp.retraining.charge_windows import recent_charges
from qcllp.retraining.promotion import PromotionDecision, decide_promotion
from qcllp.store import Model, RetrainerEvent, Store
from qcllp.store.events import WANTED_KINDS, events, insert_event, record_event
from qcllp.store.leases import HeldLease, LeaseBusy, station_lease_name
from qcllp.training.cluster import compute_on
from qcllp.training.train import TrainingError, train_station

__all__ = [
    "Abandoned",
    "RetrainOutcome",
    "decide_undecided",
    "recover",
    "retrain_station",
    "unanswered_want",
]

ANSWER_WINDOW = 20  # a station's newest retraining events searched for the answer to a want


class Abandoned(RuntimeError):
    """The daemon is stopping: the training was abandoned before anything was registered."""


@dataclass(frozen=True)
class RetrainOutcome:
    """What one retraining did: ``outcome`` is ``promoted``, ``shadow`` (put on a shadow
    trial), ``kept`` (candidate refused), ``skipped`` (nothing to do, or the station is being
    trained elsewhere) or ``failed``."""

    station: str
    outcome: str
    reason: str
    model_id: int | None = None
    decision: PromotionDecision | None = field(default=None, repr=False)


def retrain_station(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    force: bool = False,
    holder: str | None = None,
    progress: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RetrainOutcome:
    """Train a candidate for ``station`` on the newest ``retrainer.training_charges`` labeled
    charges before the holdout window and run the promotion gate.

    Skipped when no labeled charge arrived since the station's last daemon training (unless
    ``force``: a drift alarm), when the station's lease is held elsewhere, or when there are
    too few labeled charges for training plus holdout. ``should_stop`` is asked between the
    phases of the training; when it says yes, :class:`Abandoned` is raised before anything is
    registered. With the config's ``cluster`` the training runs on that Dask scheduler
    (:mod:`qcllp.training.cluster`); one that cannot be reached makes the training ``failed``,
    with the reason.
    """
    settings = config.retrainer
    config.station(station)
    say = _reporter(station, progress, should_stop)
    try:
        lease = HeldLease.take(
            store, station_lease_name(station), ttl_s=settings.lease_ttl_s, holder=holder
        )
    except LeaseBusy as exc:
        return RetrainOutcome(station, "skipped", str(exc))
    with lease:
        plan = _plan(store, config, station, force)
        if isinstance(plan, RetrainOutcome):
            return plan
        try:
            # an unreachable scheduler: failed, with why
            with compute_on(config.cluster, n_jobs=config.training.n_jobs):
                result = train_station(
                    store,
                    config,
                    station,
                    since=plan.since,
                    until=plan.until,
                    progress=say,
                    lease=lease,
                    also=_trained_event(station, plan, force),
                )
        except TrainingError as exc:
            detail = plan.answers
            record_event(store, "trained", "failed", str(exc), station=station, detail=detail)
            return RetrainOutcome(station, "failed", str(exc))
        lease.check()
        decision = decide_promotion(store, config, station, result.model_id)
    outcome = "kept" if not decision.promoted else "shadow" if decision.shadow else "promoted"
    return RetrainOutcome(station, outcome, decision.reason, result.model_id, decision)


def _reporter(
    station: str,
    progress: Callable[[str], None] | None,
    should_stop: Callable[[], bool] | None,
) -> Callable[[str], None]:
    """The training's progress callback: passes each phase on to ``progress`` and raises
    :class:`Abandoned` at a phase boundary once ``should_stop`` says so."""

    def say(message: str) -> None:
        if should_stop is not None and should_stop():
            raise Abandoned(f"{station}: training abandoned (the daemon is stopping)")
        if progress is not None:
            progress(message)

    return say


@dataclass(frozen=True)
class _Plan:
    """What a retraining trains on (labeled charges from ``since``, ``None``: the first, up
    to ``until``), the ``detail`` of its ``trained`` event and the want it ``answers``."""

    since: datetime | None
    until: datetime
    detail: dict[str, Any]
    answers: dict[str, Any]


def _plan(store: Store, config: PlantConfig, station: str, force: bool) -> _Plan | RetrainOutcome:
    """The training window before the holdout, or the skip (recorded) when there are too
    few labeled charges or, unless ``force``, none new since the last training."""
    settings = config.retrainer
    # the wanted retrainings this one answers: those written before it took the lease
    wanted = events(store, WANTED_KINDS, station=station, limit=1)
    answers = {"answers": wanted[0]["id"]} if wanted else {}
    labeled = recent_charges(store, labeled=True)
    size = min(settings.holdout_charges, len(labeled) // 2)
    if size < settings.min_holdout_charges:
        reason = (
            f"{len(labeled)} labeled charges: too few to train and keep "
            f"{settings.min_holdout_charges} for the promotion holdout"
        )
        return _skipped(store, station, reason, answers)
    fingerprint = {"labeled_charges": len(labeled), "newest": str(labeled.index[-1])}
    last = events(store, ["trained"], station=station, limit=1)
    if not force and last and _same(last[0]["detail"], fingerprint):
        reason = f"no new final-QC counts since model {last[0]['model_id']} was trained"
        return _skipped(store, station, reason)
    until = labeled.iloc[-size].to_pydatetime()
    window = settings.training_charges
    first = len(labeled) - size - window
    since = labeled.iloc[first].to_pydatetime() if window and first > 0 else None
    detail = {**fingerprint, "since": since, "until": until, "forced": force, **answers}
    return _Plan(since, until, detail, answers)


def _trained_event(station: str, plan: _Plan, force: bool) -> Callable[[Connection, int], None]:
    """The ``trained`` event, written in the transaction that registers the candidate."""
    since, until = plan.since, plan.until

    def trained(conn: Connection, model_id: int) -> None:
        insert_event(
            conn,
            "trained",
            "candidate",
            "trained on the labeled charges "
            + (f"from {since:%Y-%m-%d %H:%M} " if since else "")
            + f"before {until:%Y-%m-%d %H:%M} UTC"
            + (" (drift)" if force else ""),
            station=station,
            model_id=model_id,
            detail=plan.detail,
        )

    return trained


def _skipped(
    store: Store, station: str, reason: str, detail: dict[str, Any] | None = None
) -> RetrainOutcome:
    """A skipped retraining, recorded as a ``job`` event with its reason."""
    record_event(store, "job", "skipped", reason, station=station, detail=detail)
    return RetrainOutcome(station, "skipped", reason)


def unanswered_want(store: Store, station: str) -> dict[str, Any] | None:
    """The newest event that wanted a retraining of ``station`` (a count-drift alarm's
    ``drift_retrain``, a suspension's ``guard_retrain``) when no retraining has answered it:
    a ``trained`` event (also a failed training) or a skip for too few charges whose
    ``answers`` (the newest want it saw when it took the station's lease) reaches it.

    By cause, not by order: a training that was already running when the want was written
    finishes after it but trained on what was there before, and a skip because nothing new
    arrived does not answer a forced retraining. Only the station's last
    :data:`ANSWER_WINDOW` retraining events are read: a want is answered by the retraining
    after it, or not at all."""
    wanted = events(store, WANTED_KINDS, station=station, limit=1)
    if not wanted:
        return None
    for e in events(store, ["trained", "job"], station=station, limit=ANSWER_WINDOW):
        if (e["detail"] or {}).get("answers", -1) >= wanted[0]["id"]:
            return None
    return wanted[0]


def _same(detail: dict[str, Any] | None, fingerprint: dict[str, Any]) -> bool:
    detail = detail or {}
    return all(detail.get(k) == v for k, v in fingerprint.items())


def recover(store: Store, config: PlantConfig, *, min_age_s: float | None = None) -> list[str]:
    """What a starting daemon puts right after a crash; returns what it did, one line each:
    undecided candidates get their decision (:func:`decide_undecided`), and artifact files no
    model row points at, older than ``min_age_s`` (default: the lease time to live), are
    removed."""
    done = decide_undecided(store, config)
    age = config.retrainer.lease_ttl_s if min_age_s is None else min_age_s
    for path in _orphan_artifacts(store, config, age):
        path.unlink(missing_ok=True)
        line = f"removed artifact {path.name}: no model row points at it (a training was killed)"
        record_event(store, "recovery", "removed", line, detail={"path": str(path)})
        done.append(line)
    return done


def decide_undecided(store: Store, config: PlantConfig) -> list[str]:
    """Candidates the daemon trained (event ``trained``) that never got a promotion decision
    (the daemon died, or the database went away, in between) get one now.

    The list is read first and each candidate checked again once its station's lease is held:
    its trainer (a retraining in another thread) may have decided it and let the lease go in
    between, and a candidate is decided once."""
    done: list[str] = []
    for station, model_id in _undecided(store):
        if station not in config.station_names:
            continue
        try:
            lease = HeldLease.take(
                store, station_lease_name(station), ttl_s=config.retrainer.lease_ttl_s
            )
        except LeaseBusy:  # being trained right now: its trainer decides
            continue
        with lease:
            if (station, model_id) not in _undecided(store, model_id):
                continue
            decision = decide_promotion(store, config, station, model_id)
        line = f"{station}: candidate {model_id} left undecided; decided now: {decision.reason}"
        record_event(store, "recovery", "decided", line, station=station, model_id=model_id)
        done.append(line)
    return done


def _undecided(store: Store, model_id: int | None = None) -> list[tuple[str, int]]:
    """(station, model id) of the daemon's candidates without a promotion decision (only
    ``model_id``'s, if given)."""
    e = RetrainerEvent.__table__
    trained = select(e.c.station, e.c.model_id).where(
        e.c.kind == "trained", e.c.outcome == "candidate"
    )
    decided = select(e.c.model_id).where(e.c.kind == "promotion")
    statuses = select(Model.id, Model.status)
    if model_id is not None:
        trained = trained.where(e.c.model_id == model_id)
        decided = decided.where(e.c.model_id == model_id)
        statuses = statuses.where(Model.id == model_id)
    with store.engine.connect() as conn:
        candidates = conn.execute(trained).all()
        done = set(conn.execute(decided).scalars())
        status = dict(conn.execute(statuses).all())
    return [(s, m) for s, m in candidates if m not in done and status.get(m) == "candidate"]


def _orphan_artifacts(store: Store, config: PlantConfig, min_age_s: float) -> list[Path]:
    folder = store.models_dir or config.models_dir
    if not folder.is_dir():
        return []
    with store.engine.connect() as conn:
        known = {Path(p).name for p in conn.execute(select(Model.artifact_path)).scalars()}
    cutoff = time.time() - min_age_s
    return sorted(
        path
        for path in folder.iterdir()
        if path.is_file()
        and path.suffix in (".skops", ".joblib", ".tmp")  # .tmp: killed mid-write
        and path.name not in known
        and path.stat().st_mtime < cutoff
    )
