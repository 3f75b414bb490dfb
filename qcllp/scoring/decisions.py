"""A scoring step's decisions (:mod:`.step`, step 2 and the flags of step 3): the guards
checked before deciding, the due sticks decided by the active model and a shadow model
(:mod:`.decide`), the active's lock-outs guarded (:mod:`.share_guard`), the audit samples
drawn (:mod:`.audits`), the flags and the shadow's decisions inserted, the decided sticks
forgotten -- all in the step's transaction.

A shadow model's would-be decisions go to ``shadow_flags`` only; the line acts on the active
model's decisions (and on the audits drawn from either). With a shadow model and no active
one, the due sticks are decided by the shadow alone: the line gets flags for its audit samples
only, and the other decided sticks are forgotten, as the line acts on nothing else. With
neither, sticks are only taken in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd
from sqlalchemy import Connection

from qcllp.plant.config import PlantConfig, Station
from qcllp.scoring.audits import AUDIT, draw_audits, shadow_audits
from qcllp.scoring.count_guard import check_counts
from qcllp.scoring.decide import decide_due, read_due
from qcllp.scoring.flag_writes import insert_alarm, write_flags, write_shadow_flags
from qcllp.scoring.inspection_guard import InspectionIntake, check_inspections
from qcllp.scoring.pending import Intake, due_with_complete, forget_pending, park
from qcllp.scoring.share_guard import GuardState, apply_guard, guard_state
from qcllp.station.registry import LoadedModel

__all__ = ["SCORE_COLUMNS", "Decided", "decide_and_write", "shadow_fields"]

SCORE_COLUMNS = ["charge_id", "stick_id", "probability", "decision", "reason", "arrived_at"]


@dataclass(frozen=True)
class Decided:
    """What a step decided and wrote (the part of :func:`score_step` that needs a model):
    ``scores`` the line's flags (the active model's decisions with its audits drawn; with a
    shadow model alone, the audits of its decisions), ``shadow`` the shadow's decisions."""

    scores: pd.DataFrame
    written: int
    alarms: list[tuple[str, str]]
    due: int
    inspected: InspectionIntake
    shadow: pd.DataFrame | None = None
    shadow_written: int = 0
    shadow_audits: int = 0
    guard: GuardState | None = None  # the active model's guard row after the step


def decide_and_write(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    models: tuple[LoadedModel | None, LoadedModel | None],
    intake: Intake,
    now: datetime,
    assume_complete: bool,
    limit: int,
) -> Decided:
    """Check final QC's counts and the inspections, decide the due sticks (active and shadow
    model), guard the active's lock-outs, draw the audits, insert the flags and the shadow's
    decisions, forget the decided sticks and store the step's alarms (all in the step's
    transaction)."""
    model, shadow = models
    alarms, inspected, guard = _checks_before(conn, config, st, model, intake, now)
    scores, shadow_scores = None, None
    written, shadow_written, shadow_audited, n_due = 0, 0, 0, 0
    if model is not None or shadow is not None:
        due = due_with_complete(conn, st, now, limit, assume_complete, intake.complete)
        n_due = len(due)
    else:  # nothing decides: the complete sticks wait with the others
        park(conn, st, intake.complete)
    if n_due:
        decided = read_due(conn, config, st, due, now, assume_complete)
        active_scores, shadow_scores = decide_due(config, st, decided, [model, shadow])
        if model is not None:
            active_scores, tripped, guard = _guarded(
                conn, config, st, model, active_scores, now, guard
            )
            alarms += [("lockout_suspended", tripped)] if tripped else []
            flags = draw_audits(st, model, active_scores, shadow, shadow_scores)
        else:
            flags = shadow_audits(st, shadow, shadow_scores)
        written = write_flags(conn, st.name, model or shadow, flags, now)
        if shadow is not None:
            shadow_written = write_shadow_flags(conn, st.name, shadow, shadow_scores, now)
        forget_pending(conn, st.name, decided.base)
        shadow_audited = _shadow_sampled(flags, model, shadow_scores)
        scores = flags
    for kind, message in alarms:
        insert_alarm(conn, "scorer", st.name, kind, message)
    return Decided(
        pd.DataFrame(columns=SCORE_COLUMNS) if scores is None else scores,
        written,
        alarms,
        n_due,
        inspected,
        shadow_scores,
        shadow_written,
        shadow_audited,
        guard,
    )


def _shadow_sampled(
    flags: pd.DataFrame, model: LoadedModel | None, shadow_scores: pd.DataFrame | None
) -> int:
    """The line's audit samples of sticks the shadow would lock out: all of them with the
    shadow alone; beside an active model (same rows, same order) those where its decision is
    a lock-out (their flags carry the active model's id, :mod:`.audits`)."""
    if shadow_scores is None:
        return 0
    audits = flags["decision"].to_numpy() == AUDIT
    if model is None:
        return int(audits.sum())
    return int((audits & (shadow_scores["decision"].to_numpy() == "lock_out")).sum())


def _checks_before(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    model: LoadedModel | None,
    intake: Intake,
    now: datetime,
) -> tuple[list[tuple[str, str]], InspectionIntake, GuardState | None]:
    """Before deciding: final QC's counts taken in with the batches (every model that
    decided those sticks) and the active model's inspections; their alarms (a trip holds
    this step's lock-outs), the inspections taken in, and the active model's guard row after
    them (read once here, after the counts wrote theirs)."""
    alarms = [
        ("lockout_suspended", message)
        for message in check_counts(
            conn,
            st.name,
            list(config.station_names),
            intake.count_batches,
            config.scorer.count_guard_interval,
            now,
        )
    ]
    if model is None:
        return alarms, InspectionIntake(), None
    interval = config.scorer.inspection_guard_interval
    state = guard_state(conn, st.name, model.id)
    inspected, tripped, state = check_inspections(conn, st, model.id, interval, now, state=state)
    alarms += [("lockout_suspended", tripped)] if tripped else []
    return alarms, inspected, state


def _guarded(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    model: LoadedModel,
    scores: pd.DataFrame,
    now: datetime,
    state: GuardState | None,
) -> tuple[pd.DataFrame, str | None, GuardState]:
    """The active model's decisions through its lock-out share guard (:func:`apply_guard`),
    from its guard row as the step holds it."""
    return apply_guard(
        conn,
        st.name,
        model.id,
        model.model.lockout_rate_bound,
        config.scorer.guard_min_sticks,
        scores,
        now,
        model.model.lockout_excess_bound,
        state,
    )


def shadow_fields(shadow: LoadedModel | None, done: Decided) -> dict:
    """The step result's account of the shadow model: its id, decisions per decision, rows
    written to ``shadow_flags`` and the line's audit flags of its decisions."""
    if shadow is None:
        return {}
    decided = done.shadow if done.shadow is not None else pd.DataFrame(columns=SCORE_COLUMNS)
    counts = decided["decision"].value_counts()
    return {
        "shadow_id": shadow.id,
        "shadow_counts": {d: int(counts.get(d, 0)) for d in ("lock_out", "pass", "unscorable")},
        "shadow_written": done.shadow_written,
        "shadow_audits": done.shadow_audits,
    }
