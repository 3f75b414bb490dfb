"""The scorer's lock-out guard: a model that locks out far more than in training is suspended.

A station model is trained on one stretch of the plant's history. When the plant changes -- a
sensor replaced or recalibrated, a new recipe, drift -- its probabilities shift, and a
threshold that paid on the training charges locks out good sticks by the hundred (on a
differently seeded simulated plant, one station locked out 19 % of the sticks instead of 3 %
and lost 42,000 per 1,000 sticks; ``benchmarks/bench_plant_quality.py``). Final QC reveals that
only days later. The share of sticks a model locks out is visible at once, and training knows
how large it may be (:mod:`qcllp.station.guard_bounds`, bounds stored with the model). So the
scorer counts, per station and model, the sticks it decided and locked out (table
``lockout_guards``, updated in the step's transaction, so a crash never counts twice), and its
recent excess of lock-outs, and the guard trips when either the share locked out since
promotion exceeds the bound by more than three binomial standard deviations (after
``scorer.guard_min_sticks`` decisions) or the recent excess exceeds what a healthy model
reaches (:mod:`qcllp.station.guard_bounds`); final QC's counts, days later, can trip it too
(:mod:`qcllp.scoring.count_guard`). Then the model's lock-outs are **suspended**: from
that stick on, a stick the model would lock out passes with the reason given, an alarm is
raised once, and ``qcllp status`` shows it. A newly promoted model starts with a fresh count; a
suspension is lifted by promoting a model (retrained, or the same one again after the cause is
fixed).

Why suspend rather than carry on: a suspended station loses only what locking out would have
saved; a model that no longer fits the plant can lose many times that.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.station.guard_bounds import GuardCounts, excess_path, guard_step
from qcllp.store import (
    LockoutGuard,
    Model,
    Store,
    fetch_tuples,
    placeholders,
    stored_utc,
    upsert_row,
)

__all__ = [
    "GuardState",
    "Suspension",
    "apply_guard",
    "guard_state",
    "suspended_models",
    "updated_state",
    "write_guard",
]


@dataclass(frozen=True)
class GuardState:
    """Counts of one model at one station; ``suspended_at`` set once the guard tripped;
    ``qc_*``: final QC's word (:mod:`.count_guard`): charges compared and skipped, failures
    predicted and reported, and the CUSUM of the over-prediction; ``inspect_*``: the
    inspections of its lock-outs (:mod:`.inspection_guard`): the cursor (highest inspection
    id taken in), lock-outs inspected failing and good, the CUSUM of their shortfall."""

    decided: int = 0
    locked: int = 0
    suspended_at: datetime | None = None
    reason: str | None = None
    excess: float = 0.0
    qc_charges: int = 0
    qc_skipped: int = 0
    qc_predicted: float = 0.0
    qc_reported: int = 0
    qc_excess: float = 0.0
    inspect_id: int = 0
    inspect_fail: int = 0
    inspect_good: int = 0
    inspect_excess: float = 0.0


_G = LockoutGuard.__table__
_STATE_COLUMNS = (
    _G.c.decided,
    _G.c.locked,
    _G.c.suspended_at,
    _G.c.reason,
    _G.c.excess,
    _G.c.count_charges,
    _G.c.count_skipped,
    _G.c.count_predicted,
    _G.c.count_observed,
    _G.c.count_excess,
    _G.c.inspect_id,
    _G.c.inspect_fail,
    _G.c.inspect_good,
    _G.c.inspect_excess,
)


# the guard row of a model at a station, through the driver's own cursor: SQLAlchemy's select
# cost a line step some 0.25 ms of building and caching a statement (benchmarks/bench_step.py)
_SELECT_STATE = (
    f"SELECT {', '.join(c.name for c in _STATE_COLUMNS)} FROM {_G.name} "
    "WHERE station = {marks} AND model_id = {marks}"
)

# the GuardState field of each column of _STATE_COLUMNS (same order)
_FIELD_OF = {c.name: f.name for c, f in zip(_STATE_COLUMNS, fields(GuardState), strict=True)}


def guard_state(conn: Connection, station: str, model_id: int) -> GuardState:
    """The guard row of the model at the station (a fresh state before its first step);
    ``suspended_at`` zone-aware on both engines."""
    rows = fetch_tuples(
        conn, _SELECT_STATE.format(marks=placeholders(conn, 1)), [station, model_id]
    )
    if not rows:
        return GuardState()
    state = GuardState(*rows[0])
    if state.suspended_at is None:
        return state
    return replace(state, suspended_at=stored_utc(state.suspended_at))


def updated_state(state: GuardState, values: dict) -> GuardState:
    """``state`` after :func:`write_guard` stored ``values`` (columns of ``lockout_guards``;
    those the state does not hold are left out). A step reads its guard row once and carries
    it through its three rules in memory: the row was read four times a step before, a
    statement each on a line's every step (``benchmarks/bench_line_latency.py``, issue 35)."""
    return replace(state, **{_FIELD_OF[k]: v for k, v in values.items() if k in _FIELD_OF})


def write_guard(conn: Connection, station: str, model_id: int, values: dict) -> None:
    """Store ``values`` (columns of ``lockout_guards``) in the guard row of the model at the
    station, in the caller's transaction; a new row starts with no decisions."""
    row = {"station": station, "model_id": model_id, "decided": 0, "locked": 0, **values}
    upsert_row(conn, _G, row, list(values))


@dataclass(frozen=True)
class Suspension:
    """An active model whose lock-outs the scorer suspended, since when and why."""

    station: str
    model_id: int
    suspended_at: datetime
    reason: str


def suspended_models(store: Store) -> list[Suspension]:
    """The active models whose lock-outs are suspended (one small query: a row per station
    and model on ``lockout_guards``, joined with the active models)."""
    g, m = _G, Model.__table__
    query = (
        select(g.c.station, g.c.model_id, g.c.suspended_at, g.c.reason)
        .join(m, (m.c.id == g.c.model_id) & (m.c.station == g.c.station))
        .where(m.c.status == "active", g.c.suspended_at.is_not(None))
        .order_by(g.c.station)
    )
    with store.engine.connect() as conn:
        return [Suspension(*row) for row in conn.execute(query).all()]


def apply_guard(
    conn: Connection,
    station: str,
    model_id: int,
    bound: float | None,
    min_sticks: int,
    scores: pd.DataFrame,
    now: datetime,
    excess_bound: float | None = None,
    state: GuardState | None = None,
) -> tuple[pd.DataFrame, str | None, GuardState]:
    """The step's decisions (in decision order) with the guard applied, the alarm message
    when the guard tripped in this step, and the guard's state after it. Counts are stored in
    the step's transaction. ``state``: the guard row as the step holds it (read if not given).

    ``bound`` ``None`` (a model trained before the guard existed): neither the share nor the
    excess rule applies, only a suspension by final QC's counts (:mod:`.count_guard`);
    ``excess_bound`` ``None``: the share rule alone.
    """
    state = guard_state(conn, station, model_id) if state is None else state
    if scores.empty:
        return scores, None, state
    decision = scores["decision"].to_numpy()
    scored = np.flatnonzero((decision == "lock_out") | (decision == "pass"))
    wants = decision[scored] == "lock_out"
    before = GuardCounts(state.decided, state.locked, state.excess, state.suspended_at is not None)
    allowed, after, at = guard_step(before, wants, bound, min_sticks, excess_bound)
    reason, alarm = state.reason, None
    if at is not None:
        decided, locked = state.decided + at + 1, state.locked + int(wants[: at + 1].sum())
        run = excess_path(wants[: at + 1], bound, state.excess)[-1]
        reason = (
            f"lock-out suspended at {station}: model {model_id} locked out {locked} of "
            f"{decided} sticks ({locked / decided:.1%}), a healthy model at most {bound:.1%}; "
            f"lately {run:.0f} sticks beyond that rate"
            + ("" if excess_bound is None else f" (a healthy model at most {excess_bound:.0f})")
            + "; the plant has changed since training: retrain, or promote the model again "
            "once the cause is fixed"
        )
        alarm = reason
    held = scored[wants & ~allowed]
    out = scores
    if len(held):
        out = scores.copy()
        out.iloc[held, out.columns.get_loc("decision")] = "pass"
        out.iloc[held, out.columns.get_loc("reason")] = reason
    values = {  # the counts after the step: the model's wishes, also while suspended
        "decided": after.decided,
        "locked": after.locked,
        "excess": after.excess,
        "suspended_at": now if alarm else state.suspended_at,
        "reason": reason,
    }
    write_guard(conn, station, model_id, values)
    return out, alarm, updated_state(state, values)
