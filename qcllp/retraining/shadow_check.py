"""The retraining daemon's shadow-trial job: each station's shadow model judged
(:mod:`.shadow_trial`), the verdict acted on and recorded.

* **waiting** (too few charges counted or lock-outs inspected, or bounds that straddle
  break-even): an event ``shadow`` / ``waiting`` with the figures, written only when what it
  says changed (a new counted charge, a new inspection), not at every check;
* **confirmed** (``retrainer.shadow_confirm: auto``): the model is promoted active and the
  event ``confirmed`` written in the same transaction, so a crash leaves both or neither;
* **rejected** (auto): the model is retired (``shadow`` to ``retired``) and the event
  ``rejected`` written with the reason, in one transaction;
* **inconclusive** (auto; still undecided once ``retrainer.shadow_max_charges`` of its charges
  are counted): retired like a rejected model, the event ``rejected`` with outcome
  ``inconclusive``, so the station's next candidate may go on trial;
* with ``shadow_confirm: manual`` the daemon does none of these: the event ``shadow`` says
  ``confirm_due``, ``reject_due`` or ``inconclusive_due`` and ``qcllp status`` shows it until
  an operator acts.

Nothing is done twice: the promotion or retirement happens only while the model is still the
station's shadow model (checked inside the transaction that changes it), so a second daemon,
an operator's ``qcllp models promote`` or a retraining that put a newer model in shadow
between the read and the write leaves the job with nothing to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, update

from qcllp.plant.config import PlantConfig
from qcllp.retraining.shadow_trial import TrialFigures, judge_trial, trial_figures
from qcllp.station.artifacts import ArtifactError
from qcllp.station.registry import RegistryError, promote, shadow_model
from qcllp.store import Model, Store
from qcllp.store.events import events, insert_event, record_event

__all__ = ["TrialCheck", "check_trial"]


@dataclass(frozen=True)
class TrialCheck:
    """What one check of a station's shadow trial did: ``outcome`` is ``waiting``,
    ``confirmed``, ``rejected``, ``inconclusive``, ``confirm_due``, ``reject_due``,
    ``inconclusive_due`` (manual) or ``failed``."""

    station: str
    model_id: int
    outcome: str
    reason: str
    figures: TrialFigures

    def state(self) -> str:
        """One line for ``/healthz``."""
        return f"model {self.model_id}: {self.outcome}: {self.reason}"


class _NoLongerShadow(Exception):
    """The model left the shadow trial between the read and the write."""


def check_trial(store: Store, config: PlantConfig, station: str) -> TrialCheck | None:
    """Judge the station's shadow trial and act on it (module docstring); ``None`` when the
    station has no shadow model (or it left the trial meanwhile)."""
    model = shadow_model(store, station)
    if model is None:
        return None
    figures = trial_figures(store, config, station, model)
    verdict = judge_trial(figures, config.station(station).break_even, config.retrainer)
    detail = {"figures": figures.as_dict(), "line": figures.line(config.currency)}
    model_id = int(model["id"])
    if verdict.outcome == "wait":
        return _note(store, figures, "waiting", verdict.reason, detail)
    if config.retrainer.shadow_confirm == "manual":
        todo = (
            f"promote it with: qcllp models promote {model_id}"
            if verdict.outcome == "confirm"
            else "it stays in shadow until an operator replaces it"
        )
        reason = f"{verdict.reason}; retrainer.shadow_confirm is manual: {todo}"
        return _note(store, figures, f"{verdict.outcome}_due", reason, detail)
    try:
        if verdict.outcome == "confirm":
            _confirm(store, station, model_id, verdict.reason, detail)
            return TrialCheck(station, model_id, "confirmed", verdict.reason, figures)
        outcome = "inconclusive" if verdict.outcome == "inconclusive" else "rejected"
        _reject(store, station, model_id, verdict.reason, detail, outcome)
        return TrialCheck(station, model_id, outcome, verdict.reason, figures)
    except _NoLongerShadow:
        return None
    except (ArtifactError, RegistryError) as exc:
        return _note(store, figures, "failed", f"cannot be promoted: {exc}", detail)


def _confirm(store: Store, station: str, model_id: int, reason: str, detail: dict) -> None:
    """Promote the model active with its event ``confirmed``, in one transaction."""

    def record(conn: Connection) -> None:
        _still_shadow(conn, model_id)
        insert_event(
            conn, "confirmed", "promoted", reason, station=station, model_id=model_id, detail=detail
        )

    promote(store, model_id, also=record)


def _reject(
    store: Store, station: str, model_id: int, reason: str, detail: dict, outcome: str
) -> None:
    """Retire the model with its event ``rejected`` (outcome ``retired`` or
    ``inconclusive``), in one transaction."""
    m = Model.__table__
    with store.writing() as conn:
        done = conn.execute(
            update(m).where(m.c.id == model_id, m.c.status == "shadow").values(status="retired")
        )
        if done.rowcount != 1:
            raise _NoLongerShadow(model_id)
        insert_event(
            conn,
            "rejected",
            "retired" if outcome == "rejected" else outcome,
            reason,
            station=station,
            model_id=model_id,
            detail=detail,
        )


def _still_shadow(conn: Connection, model_id: int) -> None:
    """Raise :class:`_NoLongerShadow` unless the model is still on its shadow trial (the row
    locked on PostgreSQL until the promotion commits)."""
    m = Model.__table__
    status = conn.execute(
        select(m.c.status).where(m.c.id == model_id).with_for_update()
    ).scalar_one_or_none()
    if status != "shadow":
        raise _NoLongerShadow(model_id)


def _note(
    store: Store, figures: TrialFigures, outcome: str, reason: str, detail: dict[str, Any]
) -> TrialCheck:
    """Record the event ``shadow`` unless the newest one of this trial says the same."""
    station, model_id = figures.station, figures.model_id
    last = events(store, ["shadow"], station=station, limit=1)
    said = last and (last[0]["model_id"], last[0]["outcome"], last[0]["reason"])
    if said != (model_id, outcome, reason):
        record_event(
            store, "shadow", outcome, reason, station=station, model_id=model_id, detail=detail
        )
    return TrialCheck(station, model_id, outcome, reason, figures)
