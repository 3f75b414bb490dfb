"""The lock-out guard's third rule: final QC's counts against what the model predicted.

The share and excess rules (:mod:`qcllp.station.guard_bounds`) see only how much a model locks out.
Whether
its lock-outs are right, only final QC can say: days after a charge passed the station, the
plant reports how many of its sticks failed, among those that reached QC (a locked-out stick
never does). The scorer already knows each decided stick's probability (``flags``), so when
a charge's counts arrive it compares the failures the model that decided them predicted
among that charge's sticks with those reported, and suspends the model's lock-outs once it
over-predicts on this plant (:func:`qcllp.station.guard_bounds.count_excess_path`). On 60
reseeded simulated plants this stopped both models that lost money, which the share rules
had let through (``benchmarks/bench_lockout_rules.py``, docs/benchmarks.md).

Which sticks reached QC: a charge is compared only when that is certain from the flags.

* **the line acted on the flags**: QC's ``n_sticks`` equals the sticks this station decided
  minus those locked out here or at any other station -- their probabilities are the
  prediction;
* **the line did not act on them** (a trial in shadow mode, or a gateway that is down):
  ``n_sticks`` equals all sticks decided here -- all their probabilities are the prediction;
* otherwise (an unscorable stick that reached QC, sticks decided by another model or by this
  one before its latest promotion, a stick missing at this station), the charge is *skipped*
  and counted, so ``qcllp status`` shows how much of QC's word the guard could use. Charges
  this model never decided are none of its business and are not counted.

Which of both is chosen depends on the decisions and the line, never on the outcome, so a
calibrated model's comparison stays unbiased.

When: in the scorer's step, for the ``defect_counts`` batches the step takes in (the same
``commit_seq`` checkpoint as the sticks), before deciding, so a trip holds the step's own
lock-outs. The charges are found through ``charges.counts_batch_id`` (indexed): a step reads
only the counts that are new, never the history. Everything is stored in the step's
transaction, so a crash never counts a charge twice or loses it. Not covered: counts that
arrive before this station has decided all of the charge's sticks (or before another
station's scorer has written its lock-outs) are used then, and the charge is skipped; final
QC reports days after the stations decide, so this needs a scorer that was down for days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.scoring.share_guard import guard_state, write_guard
from qcllp.station.final_qc import read_flags, taken_off
from qcllp.station.guard_bounds import count_excess_path
from qcllp.store import (
    IN_CHUNK,
    Charge,
    DefectCount,
    Model,
    rows_frame,
    stored_utc,
)

__all__ = ["CountCheck", "check_counts", "compare_counts"]


@dataclass(frozen=True)
class CountCheck:
    """Per compared charge (in the order QC reported them): failures ``predicted`` among its
    sticks that reached QC, the ``variance`` of that count, failures ``observed``; and the
    charges that could not be compared (``skipped``, with the reason)."""

    charges: pd.Index
    predicted: np.ndarray
    variance: np.ndarray
    observed: np.ndarray
    skipped: dict[str, str]


def compare_counts(
    charges: pd.DataFrame,
    here: pd.DataFrame,
    locked_elsewhere: pd.DataFrame,
    observed: pd.Series,
    model_id: int,
    audits: pd.DataFrame | None = None,
) -> CountCheck:
    """What the model predicted against what QC reported, per charge (module docstring).

    ``charges``: ``charge_id, n_sticks`` in report order; ``here``: this station's flags of
    those charges (``charge_id, stick_id, model_id, probability, decision``);
    ``locked_elsewhere``: ``charge_id, stick_id`` locked out at other stations; ``observed``:
    failures of the model's target reported per charge; ``audits``: ``charge_id, stick_id,
    fate`` of the audit samples at any station (:func:`qcllp.station.final_qc.taken_off`).
    """
    ours = charges[charges["charge_id"].isin(here.loc[here["model_id"] == model_id, "charge_id"])]
    flags = here[here["charge_id"].isin(ours["charge_id"])]
    per = _per_stick(flags, locked_elsewhere, model_id, audits)
    sums = per.groupby("charge_id", sort=False).sum().reindex(ours["charge_id"])
    n = ours.set_index("charge_id")["n_sticks"].astype(float)
    acted = (sums["stayed"] == n) & (sums["foreign_stayed"] == 0)
    shadow = ~acted & (sums["all"] == n) & (sums["foreign"] == 0) & (sums["audited"] == 0)
    usable = (acted | shadow) & (sums["pending"] == 0)
    skipped = _skip_reasons(sums, n, usable, model_id)
    use = sums.index[usable]
    a = acted[use].to_numpy()
    return CountCheck(
        charges=use,
        predicted=np.where(a, sums.loc[use, "q_stayed"], sums.loc[use, "q_all"]),
        variance=np.where(a, sums.loc[use, "v_stayed"], sums.loc[use, "v_all"]),
        observed=observed.reindex(use, fill_value=0.0).to_numpy(dtype=float),
        skipped=skipped,
    )


def _per_stick(
    flags: pd.DataFrame,
    locked_elsewhere: pd.DataFrame,
    model_id: int,
    audits: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per flag, the terms summed per charge: the stick counted (``all``), still on the line
    at QC (``stayed``: locked out nowhere, not scrapped after an audit), without this model's
    probability (``foreign``), an audit sample whose result is known (``audited``) or still to
    come (``pending``), and its predicted failure probability and variance, over all sticks
    and over those that stayed.

    An audit sample's outcome is known, so it is no prediction: a failing one was scrapped
    (``gone``), an ``ok`` one went back and counts in QC's ``n_sticks`` but adds no failure
    and no predicted probability. Left in the prediction, the ok ones would count ``q`` each
    against a known 0 and make a calibrated model look as if it over-predicts."""
    keys = pd.MultiIndex.from_frame(flags[["charge_id", "stick_id"]])
    fate = _audit_fates(keys, audits)
    gone = (
        (flags["decision"] == "lock_out").to_numpy()
        | keys.isin(pd.MultiIndex.from_frame(locked_elsewhere[["charge_id", "stick_id"]]))
        | (fate == "gone")
    )
    known = gone | (fate == "back")
    q = flags["probability"].to_numpy(dtype=float)
    foreign = (  # no probability of this model: fine only for a stick that never reached QC
        (flags["model_id"] != model_id).to_numpy()
        | ~np.isfinite(q)
        | (flags["decision"] == "unscorable").to_numpy()
    )
    return pd.DataFrame(
        {
            "charge_id": flags["charge_id"].to_numpy(),
            "all": 1,
            "stayed": (~gone).astype(int),
            "foreign": foreign,
            "foreign_stayed": foreign & ~known,
            "audited": (fate == "gone") | (fate == "back"),
            "pending": fate == "pending",
            "q_all": np.nan_to_num(q),
            "q_stayed": np.where(known, 0.0, np.nan_to_num(q)),
            "v_all": np.nan_to_num(q * (1 - q)),
            "v_stayed": np.where(known, 0.0, np.nan_to_num(q * (1 - q))),
        }
    )


def _audit_fates(keys: pd.MultiIndex, audits: pd.DataFrame | None) -> np.ndarray:
    """Per stick of ``keys``: ``gone``, ``pending``, ``back`` (its audit samples' fates at any
    station; ``gone`` before ``pending`` before ``back`` when it has several) or ``""``."""
    if audits is None or audits.empty:
        return np.full(len(keys), "", dtype=object)
    rank = audits["fate"].map({"gone": 0, "pending": 1, "back": 2})
    first = audits.assign(rank=rank).sort_values("rank").drop_duplicates(["charge_id", "stick_id"])
    fates = pd.Series(
        first["fate"].to_numpy(), index=pd.MultiIndex.from_frame(first[["charge_id", "stick_id"]])
    )
    return fates.reindex(keys).fillna("").to_numpy(dtype=object)


def _skip_reasons(
    sums: pd.DataFrame, n: pd.Series, usable: pd.Series, model_id: int
) -> dict[str, str]:
    """Why each charge that cannot be compared is skipped: sticks that reached QC without
    this model's probability, or QC counted other sticks than the line kept."""
    skipped = {}
    for charge in sums.index[~usable]:
        row = sums.loc[charge]
        missing = row["foreign_stayed"] if row["stayed"] == n[charge] else row["foreign"]
        if row["pending"]:
            skipped[charge] = (
                f"{int(row['pending'])} of its audit samples are not inspected yet: whether "
                "final QC counted them is unknown"
            )
        elif missing:
            skipped[charge] = (
                f"{int(missing)} of its sticks that reached QC have no probability from "
                f"model {model_id}"
            )
        else:
            skipped[charge] = (
                f"final QC reported {n[charge]:.0f} sticks; the line kept {int(row['stayed'])} "
                f"of the {int(row['all'])} decided here"
            )
    return skipped


def check_counts(
    conn: Connection,
    station: str,
    stations: list[str],
    count_batches: list[int],
    interval: float,
    now: datetime,
) -> list[str]:
    """Compare the charges whose counts came in ``count_batches`` (ids, in commit order) with
    every model that decided sticks of them here since its promotion, and update each one's
    guard row; returns the alarm messages of the models the rule tripped now.

    Independent of the model the scorer has loaded: counts that arrive while it has none (an
    artifact refused) still reach the model that decided those sticks. Flags a model wrote
    before its latest promotion count as another model's: promoting a model again after its
    suspension starts its comparison afresh, not with the counts of the sticks that made it
    trip. A model whose threshold declined to lock out anything (threshold above 1) is
    compared, for ``qcllp status``, but never suspended: it scraps nothing, so it cannot scrap
    good sticks, and its fit is the drift watch's business. Nor is a model no longer active
    (counts of charges an earlier model decided, reported after a promotion): it scraps
    nothing any more, and an alarm about it would send the operator after the wrong model."""
    if not count_batches:
        return []
    charges = _reported_charges(conn, count_batches)
    if charges.empty:
        return []
    ids = charges["charge_id"].tolist()
    here = _flags(conn, [station], ids)
    if here.empty:
        return []
    others = [s for s in stations if s != station]
    elsewhere = _flags(conn, others, ids, locked_only=True) if others else here.iloc[:0]
    taken = taken_off(conn, stations, ids)
    audits = taken[taken["decision"].to_numpy() == "inspect"]
    counts = _counts(conn, ids)
    scored = pd.to_datetime(here["scored_at"], utc=True)
    alarms = []
    for model_id, target, status, promoted_at in _models(conn, here["model_id"].unique().tolist()):
        since = pd.Timestamp(stored_utc(promoted_at)) if promoted_at is not None else None
        view = here
        if since is not None:
            stale = ((here["model_id"] == model_id) & (scored < since)).to_numpy()
            if stale.any():
                view = here.copy()
                view.loc[stale, "model_id"] = -1  # decided in an earlier term of the model
        mine = view["model_id"] == model_id
        if not mine.any():
            continue
        locks_out = status == "active" and bool((view.loc[mine, "threshold"] <= 1.0).any())
        failures = _failures(counts, target)
        check = compare_counts(charges, view, elsewhere, failures, model_id, audits)
        alarm = _update(conn, station, model_id, check, interval if locks_out else np.inf, now)
        if alarm:
            alarms.append(alarm)
    return alarms


def _models(conn: Connection, ids: list[int]) -> list[tuple[int, str, str, datetime | None]]:
    """``(id, target, status, promoted_at)`` of these models."""
    m = Model.__table__
    columns = (m.c.id, m.c.target, m.c.status, m.c.promoted_at)
    query = select(*columns).where(m.c.id.in_(ids)).order_by(m.c.id)
    return [tuple(row) for row in conn.execute(query).all()]


def _reported_charges(conn: Connection, batches: list[int]) -> pd.DataFrame:
    """``charge_id, n_sticks`` of the charges whose counts these batches brought, in commit
    order (then charge id)."""
    c = Charge.__table__
    rows = conn.execute(
        select(c.c.charge_id, c.c.n_sticks, c.c.counts_batch_id).where(
            c.c.counts_batch_id.in_(batches)
        )
    ).all()
    frame = rows_frame(rows, ["charge_id", "n_sticks", "batch"])
    frame["order"] = frame["batch"].map({b: i for i, b in enumerate(batches)})
    return frame.sort_values(["order", "charge_id"])[["charge_id", "n_sticks"]]


def _flags(
    conn: Connection, stations: list[str], charges: list[str], *, locked_only: bool = False
) -> pd.DataFrame:
    """What the comparison needs of the flags of these charges at these stations."""
    columns = ["charge_id", "stick_id", "model_id", "probability", "decision", "threshold"]
    return read_flags(conn, stations, charges, [*columns, "scored_at"], locked_only=locked_only)


def _counts(conn: Connection, charges: list[str]) -> pd.DataFrame:
    """``charge_id, defect_type, count`` of these charges (final QC)."""
    d = DefectCount.__table__
    rows = []
    for start in range(0, len(charges), IN_CHUNK):
        query = select(d.c.charge_id, d.c.defect_type, d.c["count"]).where(
            d.c.charge_id.in_(charges[start : start + IN_CHUNK])
        )
        rows += conn.execute(query).all()
    return rows_frame(rows, ["charge_id", "defect_type", "count"])


def _failures(counts: pd.DataFrame, target: str) -> pd.Series:
    """Failures of a model's target per charge: one defect type's count, or all types' (any
    defect, multiclass)."""
    if target not in ("defective", "multiclass"):
        counts = counts[counts["defect_type"] == target]
    return counts.groupby("charge_id")["count"].sum().astype(float)


def _update(
    conn: Connection,
    station: str,
    model_id: int,
    check: CountCheck,
    interval: float,
    now: datetime,
) -> str | None:
    state = guard_state(conn, station, model_id)
    path = count_excess_path(check.predicted, check.variance, check.observed, state.qc_excess)
    values = {
        "count_charges": state.qc_charges + len(check.charges),
        "count_skipped": state.qc_skipped + len(check.skipped),
        "count_predicted": state.qc_predicted + float(check.predicted.sum()),
        "count_observed": state.qc_reported + int(check.observed.sum()),
        "count_excess": float(path[-1]) if len(path) else state.qc_excess,
    }
    if check.skipped:
        charge, why = list(check.skipped.items())[-1]
        values["count_skip_reason"] = f"charge {charge}: {why}"
    alarm = None
    over = np.flatnonzero(path > interval)
    if state.suspended_at is None and len(over):
        at = int(over[0]) + 1
        said = state.qc_predicted + check.predicted[:at].sum()
        found = state.qc_reported + check.observed[:at].sum()
        alarm = (
            f"lock-out suspended at {station}: final QC found fewer failures than model "
            f"{model_id} predicted among the sticks that reached it ({found:.0f} reported, "
            f"{said:.1f} predicted over {state.qc_charges + at} charges; over-prediction CUSUM "
            f"{path[at - 1]:.1f} above {interval:g}, last charge {check.charges[at - 1]}): "
            "its lock-outs scrap good sticks on this plant; retrain, or promote the model "
            "again once the cause is fixed"
        )
        values |= {"suspended_at": now, "reason": alarm}
    write_guard(conn, station, model_id, values)
    return alarm
