"""The text of ``qcllp status`` (and ``qcllp watch``): the plant block, the stations' table
with their notes (realized savings, guards, shadow trials), the retraining daemon's jobs and
decisions, and the alarms -- by the rules of :mod:`qcllp.cli.render`, whose helpers it uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from qcllp.cli.render import (
    Column,
    audits_declined_note,
    is_missing,
    key_values,
    signed,
    stamped,
    table,
    text,
)

# ----------------------------------------------------------------------------- status
JOB_COLUMNS = (
    Column("job", "job"),
    Column("next run", "next_run"),
    Column("last run", lambda j: stamped(j.get("last"))),
    Column("queued because", lambda j: stamped(j.get("why"))),
)

STATION_COLUMNS = (
    Column("station", "station"),
    Column("model", "active_model"),
    Column("scorer", "scorer_model"),
    Column("batches behind", "batches_behind"),
    Column("pending", "pending_sticks"),
    Column("flags", lambda s: ", ".join(f"{k} {v}" for k, v in sorted(s["flags"].items()))),
    Column("age h", "model_age_h", ".1f"),
    Column("saving/1,000", lambda s: s["model_metrics"].get("expected_saving_per_1000"), "+.0f"),
    Column("90 % interval", lambda s: _interval(s["model_metrics"])),
    Column("realized (inspected)", lambda s: _realized(s, "since_promotion"), "+,.0f"),
    Column("bag error", lambda s: s["model_metrics"].get("calibration_error"), ".4f"),
)

DECISION_COLUMNS = (
    Column("decided at", "at"),
    Column("station", "station"),
    Column("model", "model_id"),
    Column("outcome", "outcome"),
    Column("reason", "reason"),
)

ALARM_COLUMNS = (
    Column("alarm at", "at"),
    Column("station", "station"),
    Column("kind", "kind"),
    Column("message", "message"),
)


def _interval(metrics: Mapping[str, Any]) -> str | None:
    """The 90 % interval of the expected saving, ``[low, high]``, marked ``in-sample`` when
    it stands on the training charges (:func:`qcllp.station.lockout_rule.held_out_saving`);
    ``None`` without one."""
    low, high = metrics.get("saving_low_per_1000"), metrics.get("saving_high_per_1000")
    if is_missing(low) and is_missing(high):
        return None
    label = " in-sample" if metrics.get("saving_in_sample") else ""
    return f"[{signed(low)}, {signed(high)}]{label}"


def _realized(s: Mapping[str, Any], span: str) -> float | None:
    """The station's realized (inspected) saving over ``span``; ``None`` without a model or
    before anything of it was inspected (not a saving of 0)."""
    realized = s.get("realized_inspected")
    return realized[span]["saving"] if _inspected(realized) else None


def _inspected(realized: Mapping[str, Any] | None) -> bool:
    """Whether anything of the active model was inspected since its promotion."""
    if not realized:
        return False
    counts = realized["since_promotion"]
    return bool(counts["lockouts_failing"] + counts["lockouts_good"] + counts["audit_samples"])


def status_text(result: Mapping[str, Any]) -> str:
    """``qcllp status``: the plant block, then the tables of the retrainer's jobs, the
    stations, what to know about each station, the promotion decisions and the alarms (a
    table without rows is left out)."""
    parts = [
        _plant_block(result),
        result["retrainer"]["jobs"] and table(result["retrainer"]["jobs"], JOB_COLUMNS),
        result["stations"] and table(result["stations"], STATION_COLUMNS),
        _station_notes(result["stations"]),
        result["decisions"] and table(result["decisions"], DECISION_COLUMNS),
        result["alarms"] and table(result["alarms"], ALARM_COLUMNS),
    ]
    return "\n\n".join(part for part in parts if part)


def _plant_block(result: Mapping[str, Any]) -> str:
    """The database, its newest batch, the readings stored and who runs the retrainer."""
    newest = result["newest_batch"]
    pairs: list[tuple[str, Any]] = [
        ("database", result["database"]),
        ("newest batch", newest and f"{newest['seq']} at {text(newest['at'])}"),
    ]
    stored = result["readings"]
    if stored["months"] or stored["retention_days"]:
        pairs.append(("readings", _readings(stored)))
    leader = result["retrainer"]["leader"]
    pairs.append(("retrainer", leader or "not running (no lease held)"))
    return key_values(pairs)


def _readings(stored: Mapping[str, Any]) -> str:
    """The monthly partitions of readings, how long they are kept and which are going."""
    months, keep = stored["months"], stored["retention_days"]
    span = f"{months[0]} .. {months[-1]}" if months else "none"
    dropping = stored["being_dropped"]
    return (
        f"{len(months)} monthly partitions ({span}); kept "
        + (f"{keep} days" if keep else "for ever")
        + (f"; being dropped: {', '.join(dropping)}" if dropping else "")
    )


def _station_notes(stations: Sequence[Mapping[str, Any]]) -> str:
    """What else to know of each station (training, drift, its lock-out guard), one line a
    note, as a table of station and note; empty if there is nothing."""
    rows = [{"station": s["station"], "note": note} for s in stations for note in _notes(s)]
    return table(rows, (Column("station", "station"), Column("note", "note"))) if rows else ""


def _notes(s: Mapping[str, Any]) -> list[str]:
    """One station's notes: who trains it, its drift checks, its lock-out guard, what its
    training asks of an operator, its lock-out bay's volume, its realized saving and its
    shadow trial."""
    notes = [] if not s["training_by"] else [f"being trained by {s['training_by']}"]
    notes += [f"{kind} {line}" for kind, line in s["drift"].items()]
    if s["lockout_suspended"]:
        notes.append(s["lockout_suspended"])
    elif s["lockout_guard"]:
        notes += _guard_notes(s["lockout_guard"])
    notes += _training_notes(s["model_metrics"])
    notes += _bay_note(s.get("bay"), s["active_model"])
    if _inspected(s.get("realized_inspected")):
        notes.append(_realized_note(s["realized_inspected"]))
    trial = s.get("shadow_trial")
    if trial:
        notes.append(f"{trial['line']}; rule ({trial['confirm']}): {trial['state']}")
    return notes


def _bay_note(bay: Mapping[str, Any] | None, active: Any) -> list[str]:
    """What the station sent to the lock-out bay lately, as a share of what it decided: the
    volume the bay has to look at; nothing when it sent none. Without an active model the
    line gets flags only for a shadow trial's audit samples: no share then."""
    if not bay or not bay["lock_out"] + bay["inspect"]:
        return []
    looked = bay["lock_out"] + bay["inspect"]
    head = f"lock-out bay, last {bay['days']} days: {looked:,} sticks to look at"
    if active is None:
        return [f"{head} (audit samples of its shadow model's would-be lock-outs)"]
    return [
        f"{head} ({bay['lock_out']:,} lock-outs, {bay['inspect']:,} audit samples) of "
        f"{bay['decided']:,} decided ({looked / bay['decided']:.1%})"
    ]


def _training_notes(m: Mapping[str, Any]) -> list[str]:
    """What the active model's training says an operator should act on: charges it could not
    learn from because their audit samples were never entered, audits it stopped."""
    notes = []
    if m.get("held_back_charges"):
        notes.append(
            f"its training held back {m['held_back_charges']:,.0f} labeled charges: their "
            "audit samples await inspection (enter them: qcllp ingest inspections)"
        )
    if m.get("audits_declined"):
        notes.append(audits_declined_note(m))
    return notes


def _realized_note(realized: Mapping[str, Any]) -> str:
    """The realized (inspected) saving since promotion and lately, with the counts."""
    spans = [(k, v) for k, v in realized.items() if isinstance(v, Mapping)]
    parts = [
        f"{span.replace('_', ' ')} {v['saving']:+,.0f} {realized['currency']} "
        f"({v['lockouts_failing']} failing and {v['lockouts_good']} good lock-outs inspected, "
        f"{v['audit_samples']} audit samples{_scrapped(v)})"
        for span, v in spans
    ]
    return "realized (inspected): " + "; ".join(parts)


def _scrapped(v: Mapping[str, Any]) -> str:
    n = v.get("audit_samples_scrapped", 0)
    return f", {n} of them failing and scrapped" if n else ""


def _guard_notes(g: Mapping[str, Any]) -> list[str]:
    """The lock-out guard: the share locked out and final QC's counts against the model."""
    share = g["locked"] / g["decided"] if g["decided"] else 0.0
    rule = (
        f"(suspends above {text(g['qc_interval'], 'g')})"
        if g["locks_out"]
        else "(the model locks out nothing: nothing to suspend)"
    )
    skipped = (
        f"; {g['qc_skipped']} not comparable, latest {text(g['qc_skip_reason'])}"
        if g["qc_skipped"]
        else ""
    )
    return [
        f"lock-out guard: {g['locked']} of {g['decided']} sticks locked out ({share:.1%}); "
        f"recent excess {g['excess']:.0f} sticks (suspends above {text(g['excess_bound'], '.0f')})",
        f"final QC: {g['qc_charges']} charges compared, {g['qc_predicted']:.1f} failures "
        f"predicted, {g['qc_reported']} reported; over-prediction {g['qc_excess']:.1f} {rule}"
        + skipped,
        _inspection_note(g),
    ]


def _inspection_note(g: Mapping[str, Any]) -> str:
    """The lock-outs inspected at the bay against break-even."""
    fail, good = g["inspected_failing"], g["inspected_good"]
    precision = f" ({fail / (fail + good):.1%})" if fail + good else ""
    return (
        f"inspected lock-outs: {fail} failing of {fail + good}{precision}, break-even "
        f"{g['break_even']:.1%}; shortfall {g['inspection_shortfall']:.1f} failing sticks "
        f"(suspends above {text(g['inspection_interval'], 'g')})"
    )
