"""Assemble the engineers' report from the plant database: registry, artifacts and flags.

First what needs a person: the stations whose lock-outs the scorer suspended (since when and
why) and the latest alarms. Then the summary, one row per station, its state first (locking
out, suspended, locking out nothing, a candidate not on the line, or a shadow trial, whose
figures get a column of their own: :func:`qcllp.reporting.status.shadow_trial_state`): the
active model (or, before any promotion, the newest candidate) with its method and target, the
share of sticks it locks out (out of fold in training, and on the line from the scorer's
flags), the expected saving per 1,000 sticks with its 90 % prediction interval for a week in
the plant's currency (held-out charges, :mod:`qcllp.station.lockout_rule`,
:mod:`qcllp.station.saving_estimate`; while suspended, the line gets none of it, and the row
says so) and -- when the per-stick truth is given (a simulator's truth file,
hand-inspected sticks) -- the ROC AUC and the realized saving of the flags the line got. Then
per station the out-of-fold predicted-vs-counted shares per charge, the feature importances
recorded at training and the lock-out rate per hour of production; last the comparison of all
models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from qcllp.plant.config import PlantConfig
from qcllp.reporting.report import StationSection, write_report
from qcllp.reporting.status import latest_alarms, shadow_trial_state
from qcllp.scoring.share_guard import Suspension, suspended_models
from qcllp.scoring.step import flags_frame
from qcllp.station.artifacts import ArtifactError
from qcllp.station.lockout_rule import LockoutCosts
from qcllp.station.realized import decisions_saving
from qcllp.station.registry import list_models, load_model
from qcllp.store import Store
from qcllp.training.train import station_costs

__all__ = [
    "attention_lines",
    "build_plant_report",
    "comparison_table",
    "fresh_figures",
    "station_state",
    "summary_row",
]

SHOWN_METRICS = (
    "bag_error",
    "calibration_error",
    "roc_auc",
    "threshold",
    "lockout_rate",
    "expected_saving_per_1000",
)


def comparison_table(models: list[dict]) -> pd.DataFrame:
    """One row per registered model: what it is and how it validated (a figure no model has,
    e.g. ROC AUC without per-stick truth, is left out rather than shown empty)."""
    rows = []
    for m in models:
        row = {
            "id": m["id"],
            "station": m["station"],
            "method": m["method"],
            "target": m["target"],
            "status": m["status"],
            "charges": m["n_charges"],
            "sticks": m["n_sticks"],
        }
        row.update({k: (m["metrics"] or {}).get(k) for k in SHOWN_METRICS})
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows).set_index("id")
    return table.dropna(axis=1, how="all")


def fresh_figures(decided: pd.DataFrame, failing: pd.Series, costs: LockoutCosts) -> dict:
    """What the flags of a station were worth against the per-stick truth ``failing`` (bool,
    index charge_id, stick_id): ROC AUC of the probabilities, lock-out precision and recall,
    the audit samples taken aside, and the realized saving per 1,000 sticks of the decisions
    the line got: a stick locked out or scrapped after its audit that fails saves
    ``fail_cost``, a good one locked out costs ``good_cost``, every stick looked at (each
    lock-out and audit sample) costs ``costs.inspection_cost``. Unscorable sticks and sticks
    without truth are counted apart."""
    unscorable = int((decided["decision"] == "unscorable").sum())
    scored = decided[decided["decision"] != "unscorable"]
    truth = failing.reindex(pd.MultiIndex.from_frame(scored[["charge_id", "stick_id"]]))
    known = truth.notna().to_numpy()
    scored, t = scored[known], truth.to_numpy()[known].astype(bool)
    locked = (scored["decision"] == "lock_out").to_numpy()
    audited = (scored["decision"] == "inspect").to_numpy()
    saving = 0.0
    if len(t):
        saving = 1000 * decisions_saving(locked, audited, t, costs) / len(t)
    return {
        "sticks": len(scored),
        "unscorable": unscorable,
        "defective_share": float(t.mean()) if len(t) else float("nan"),
        "roc_auc": float(roc_auc_score(t, scored["probability"]))
        if 0 < t.sum() < len(t)
        else float("nan"),
        "locked_out": int(locked.sum()),
        "precision": float((locked & t).sum() / max(locked.sum(), 1)),
        "recall": float((locked & t).sum() / max(t.sum(), 1)),
        "audited": int(audited.sum()),
        "audits_failing": int((audited & t).sum()),
        "saving_per_1000": saving,
    }


def summary_row(
    station: str,
    model: dict | None,
    flags: pd.DataFrame,
    fresh: dict | None,
    currency: str,
    suspension: Suspension | None = None,
    trial: dict | None = None,
) -> dict:
    """The summary's row of one station (display strings): its state first, so a suspended
    station never reads as one that saves what its rule expected; ``trial``: its shadow trial
    (:func:`qcllp.reporting.status.shadow_trial_state`), named in the state, its figures in a
    column of their own."""
    row = _summary_row(station, model, flags, fresh, currency, suspension)
    if trial is not None:
        on_trial = f"shadow trial (model {trial['model']})"
        active = model is not None and model["status"] == "active"
        row["state"] = f"{row['state']}; {on_trial}" if active else on_trial
        row["shadow trial"] = f"{trial['line']}; rule: {trial['state']}"
    return row


def _summary_row(
    station: str,
    model: dict | None,
    flags: pd.DataFrame,
    fresh: dict | None,
    currency: str,
    suspension: Suspension | None,
) -> dict:
    """:func:`summary_row` without the shadow trial."""
    if model is None:
        return {"station": station, "state": "no model", "model": "none trained yet"}
    m = model["metrics"] or {}
    declined = bool(m.get("lockout_declined"))
    expected = m.get("expected_saving_per_1000")
    if declined:
        saving = "0 (locks out nothing: no threshold whose saving bound is positive)"
    elif expected is None:
        saving = "n/a"
    else:
        low, high = m.get("saving_low_per_1000"), m.get("saving_high_per_1000")
        interval = f" [{low:+,.0f}, {high:+,.0f}]" if low is not None and high is not None else ""
        saving = f"{expected:+,.0f}{interval} {currency}"
        if m.get("saving_in_sample"):
            saving += " (in-sample: no held-out figure)"
        if m.get("threshold_inspected"):
            saving += (
                f" (threshold from inspected precision {m['threshold_inspected_failing']:.0f}/"
                f"{m['threshold_inspected']:.0f})"
            )
        if suspension is not None:
            saving = f"0 on the line while suspended (its rule expected {saving})"
    on_line = (flags["decision"] == "lock_out").mean() if len(flags) else None
    row = {
        "station": station,
        "state": station_state(model, declined, suspension),
        "model": f"{model['id']} ({model['status']})",
        "method / target": f"{model['method']} / {model['target']}",
        "locked out in training": _pct(m.get("lockout_rate")),
        "locked out on the line": "no flags yet"
        if on_line is None
        else f"{_pct(on_line)} of {len(flags):,}",
        "expected saving per 1,000 sticks (90 % interval)": saving,
    }
    if fresh is not None:
        row["fresh ROC AUC"] = "n/a" if np.isnan(fresh["roc_auc"]) else f"{fresh['roc_auc']:.3f}"
        row[f"realized saving per 1,000 ({currency})"] = (
            f"{fresh['saving_per_1000']:+,.0f} on {fresh['sticks']:,} sticks"
        )
    return row


def station_state(model: dict, declined: bool, suspension: Suspension | None) -> str:
    """One phrase for what the station's model does on the line now."""
    if model["status"] != "active":
        return f"{model['status']}: not on the line"
    if suspension is not None:
        return f"SUSPENDED since {suspension.suspended_at:%Y-%m-%d %H:%M} UTC"
    return "locks out nothing" if declined else "locking out"


def attention_lines(suspensions: list[Suspension], alarms: list[dict]) -> list[str]:
    """What needs a person, first in the report: each suspension with its reason, then the
    latest alarms (newest first; :func:`qcllp.reporting.status.latest_alarms`)."""
    lines = [
        f"{s.station}: lock-outs of model {s.model_id} suspended since "
        f"{s.suspended_at:%Y-%m-%d %H:%M} UTC: {s.reason}"
        for s in suspensions
    ]
    lines += [
        f"alarm {a['at']:%Y-%m-%d %H:%M} UTC, {a['station'] or 'plant'} ({a['kind']}): "
        f"{a['message']}"
        for a in alarms
    ]
    return lines


def _pct(value: float | None) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{100 * value:.1f} %"


def build_plant_report(
    store: Store, config: PlantConfig, path: str | Path, *, truth: pd.Series | None = None
) -> Path:
    """Write the report of every station to ``path``; returns the path. ``truth``: the
    defect of each stick (a defect type or ``ok``; index charge_id, stick_id), for the
    fresh-charge figures."""
    models = list_models(store)
    flags = flags_frame(store)
    times = store.read_charge_times() if len(flags) else pd.Series(dtype="datetime64[ns, UTC]")
    failing = None if truth is None else truth != "ok"
    suspensions = suspended_models(store)
    with store.engine.connect() as conn:
        alarms = latest_alarms(conn, 10)
    suspended = {s.station: s for s in suspensions}
    sections, summary = [], []
    for station in config.station_names:
        chosen = _chosen_model(models, station)
        station_flags = flags[flags["station"] == station]
        fresh = None
        if failing is not None and len(station_flags):
            fresh = fresh_figures(
                station_flags,
                failing,
                station_costs(config, station),
            )
        trial = shadow_trial_state(store, config, station)
        summary.append(
            summary_row(
                station,
                chosen,
                station_flags,
                fresh,
                config.currency,
                suspended.get(station),
                trial,
            )
        )
        if chosen is None:
            sections.append(
                StationSection(station, {"model": "none trained yet"}, notes=["No model."])
            )
            continue
        sections.append(_station_section(store, station, chosen, station_flags, times))
    return write_report(
        Path(path),
        config.name,
        sections,
        comparison_table(models),
        summary=pd.DataFrame(summary),
        with_truth=failing is not None,
        attention=attention_lines(suspensions, alarms),
    )


def _chosen_model(models: list[dict], station: str) -> dict | None:
    """The station's model the report shows: the active one, else the newest candidate."""
    candidates = [m for m in models if m["station"] == station]
    chosen = next((m for m in candidates if m["status"] == "active"), None)
    return chosen or (candidates[0] if candidates else None)


def _station_section(
    store: Store, station: str, chosen: dict, station_flags: pd.DataFrame, times: pd.Series
) -> StationSection:
    """A station's section: its model's details and validation figures, the methods
    ``--method auto`` tried, the per-charge shares and importances from the artifact (a note
    when it cannot be read) and the lock-out rate per hour of the flags."""
    figures = {k: v for k, v in (chosen["metrics"] or {}).items() if k in SHOWN_METRICS}
    details = {
        "model": f"{chosen['id']} ({chosen['method']}, {chosen['status']})",
        "target": chosen["target"],
        "trained on": f"{chosen['n_charges']} charges, {chosen['n_sticks']} sticks",
        **{k: v for k, v in figures.items() if v is not None},
    }
    section = StationSection(station, details)
    for trial in (chosen["params"] or {}).get("auto", []):  # trained with --method auto
        section.notes.append(
            f"auto tried {trial['method']}: CV bag error {trial['cv_bag_error']:.4f}, "
            f"expected saving {trial['expected_saving_per_1000']:+.0f} per 1,000 sticks"
            + (" (kept)" if trial["method"] == chosen["method"] else "")
        )
    try:
        model = load_model(store, chosen["id"]).model
        section.per_charge = model.per_charge
        section.importances = model.importances
    except ArtifactError as exc:
        section.notes.append(f"Artifact not readable: {exc}")
    if len(station_flags):
        when = times.reindex(station_flags["charge_id"]).to_numpy()
        hourly = (
            pd.Series(station_flags["flagged"].to_numpy(), index=pd.DatetimeIndex(when))
            .sort_index()
            .resample("h")
            .mean()
            .dropna()
        )
        section.lockout_over_time = hourly
    return section
