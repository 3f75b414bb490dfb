"""The scorer's lock-out guard: a model that locks out far more than in training is suspended.

A station model is trained on one stretch of the plant's history. When the plant changes --
a sensor replaced or recalibrated, a new recipe, drift -- its probabilities shift, and a
threshold that paid on the training charges locks out good sticks by the hundred (on a
differently seeded simulated plant, one station locked out 19 % of the sticks instead of 3 %
and lost 42,000 per 1,000 sticks; ``benchmarks/bench_plant_quality.py``). Final QC reveals
that only days later. The share of sticks a model locks out is visible at once, and training
knows how large it may be: :func:`qcllp.pipeline.thresholds.lockout_rate_bound`, stored with
the model. So the scorer counts, per station and model, the sticks it decided and locked out
(table ``lockout_guards``, updated in the step's transaction, so a crash never counts twice),
and once at least ``scorer.guard_min_sticks`` sticks are decided and the share locked out
exceeds the bound by more than three binomial standard deviations
(:func:`qcllp.pipeline.thresholds.guard_trip`), the model's lock-outs are **suspended**: from
that stick on, a stick the model would lock out passes with the reason given, an alarm is
raised once, and ``qcllp status`` shows it. A newly promoted model starts with a fresh count;
a suspension is lifted by promoting a model (retrained, or the same one again after the cause
is fixed).

Why suspend rather than carry on: a suspended station loses only what locking out would have
saved; a model that no longer fits the plant can lose many times that.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.store import LockoutGuard, dialect_insert

from .thresholds import guard_trip

__all__ = ["GuardState", "apply_guard", "guard_state"]


@dataclass(frozen=True)
class GuardState:
    """Counts of one model at one station; ``suspended_at`` set once the guard tripped."""

    decided: int = 0
    locked: int = 0
    suspended_at: datetime | None = None
    reason: str | None = None


def guard_state(conn: Connection, station: str, model_id: int) -> GuardState:
    g = LockoutGuard.__table__
    row = conn.execute(
        select(g.c.decided, g.c.locked, g.c.suspended_at, g.c.reason).where(
            g.c.station == station, g.c.model_id == model_id
        )
    ).first()
    return GuardState() if row is None else GuardState(*row)


def apply_guard(
    conn: Connection,
    station: str,
    model_id: int,
    bound: float | None,
    min_sticks: int,
    scores: pd.DataFrame,
    now: datetime,
) -> tuple[pd.DataFrame, str | None]:
    """The step's decisions (in decision order) with the guard applied, and the alarm message
    when the guard tripped in this step. Counts are stored in the step's transaction.

    ``bound`` ``None`` (a model trained before the guard existed): decisions pass unchanged.
    """
    if bound is None or scores.empty:
        return scores, None
    state = guard_state(conn, station, model_id)
    scored = scores["decision"].isin(["lock_out", "pass"]).to_numpy()
    wants = (scores["decision"] == "lock_out").to_numpy()
    alarm = None
    suspended_from = 0 if state.suspended_at is not None else None
    reason = state.reason
    if suspended_from is None:
        at = guard_trip(
            wants[scored], bound, min_sticks, decided=state.decided, locked_before=state.locked
        )
        if at is not None:
            suspended_from = int(np.flatnonzero(scored)[at])
            decided = state.decided + at + 1
            locked = state.locked + int(wants[scored][: at + 1].sum())
            reason = (
                f"lock-out suspended at {station}: model {model_id} locked out {locked} of "
                f"{decided} sticks ({locked / decided:.1%}), a healthy model at most "
                f"{bound:.1%}; the plant has changed since training: retrain, or promote the "
                "model again once the cause is fixed"
            )
            alarm = reason
    out = scores
    if suspended_from is not None:
        held = wants & (np.arange(len(scores)) >= suspended_from)
        out = scores.copy()
        out.loc[held, "decision"] = "pass"
        out.loc[held, "reason"] = reason
    _store(conn, station, model_id, state, int(scored.sum()), int(wants.sum()), reason, alarm, now)
    return out, alarm


def _store(
    conn: Connection,
    station: str,
    model_id: int,
    state: GuardState,
    decided: int,
    wanted: int,
    reason: str | None,
    alarm: str | None,
    now: datetime,
) -> None:
    """Counts what the model decided (its wishes, also while suspended: what it would do)."""
    values = {
        "station": station,
        "model_id": model_id,
        "decided": state.decided + decided,
        "locked": state.locked + wanted,
        "suspended_at": now if alarm else state.suspended_at,
        "reason": reason,
    }
    stmt = dialect_insert(conn, LockoutGuard.__table__).values(**values)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["station", "model_id"],
            set_={k: v for k, v in values.items() if k not in ("station", "model_id")},
        )
    )
