"""Judging a shadow trial: what a station's ``shadow`` model would have saved, and whether its
lock-outs may act on the line.

A model on a shadow trial (:func:`qcllp.station.registry.promote_shadow`) is scored beside the
active one; its would-be decisions are rows of ``shadow_flags`` and the line acts on none of
them. Some of its would-be lock-outs are taken aside and inspected (audit samples,
``inspections``), and final QC counts the failures of every charge days later
(``defect_counts``). Over the charges it scored *whose counts are in* (since the trial began:
the model's ``promoted_at``), :func:`trial_figures` gives the sticks scored, the would-be
lock-outs ``k`` and the would-be saving per 1,000 sticks in three kinds, each labelled:

* **measured**: the would-be lock-outs that were inspected, ``f`` failing of ``m``; their
  precision ``f / m`` with one-sided Clopper-Pearson bounds at ``shadow_confirm_level``
  (:func:`qcllp.station.lockout_rule.precision_bounds`: scipy's exact binomial test rather
  than a normal approximation that fails at the few dozen inspections a trial has), and the
  saving this implies, ``1000 * k / sticks * (P * fail_cost - (1 - P) * good_cost -
  inspection_cost)`` at ``P`` and at both bounds (every lock-out is looked at at the bay:
  :mod:`qcllp.plant.lockout_costs`). Every inspection of a would-be lock-out counts (an
  audit, or the bay's inspection of a stick the active model locked out too); where the bay
  inspects the active model's lock-outs more often than audits sample the rest, the sample
  leans towards the sticks both models lock out.
* **bounded by the counts**: which sticks reached final QC is known per charge as
  :mod:`qcllp.station.final_qc` knows it: the sticks scored minus those locked out at any
  station or inspected failing (scrapped) when that leaves exactly QC's ``n_sticks``, or all
  of them when they are exactly ``n_sticks`` (nothing was taken off the line); otherwise the
  charge's counted sticks are unknown. Among a charge's counted sticks not inspected here
  (``u`` of them, ``c`` failures of the model's target once the inspected ones are taken
  off), its ``k'`` uninspected would-be lock-outs hold ``[max(0, c - (u - k')), min(k', c)]``
  failures; inspected would-be lock-outs are known; those neither counted nor inspected hold
  ``[0, k'']``. Summed, the failures ``F`` give the worst and best saving ``fail_cost * F -
  good_cost * (k - F) - inspection_cost * k``. No model enters: it is what the counts
  prove, however wide.
* **model-based (expected)**: ``sum over the would-be lock-outs of p * fail_cost - (1 - p) *
  good_cost - inspection_cost`` with the model's own probabilities: its claim, no evidence.

**The confirmation rule** (:func:`judge_trial`; ``retrainer.shadow_*``): judged once at
least ``shadow_min_charges`` charges are counted (default 25: a week of an ordinary line, so
a trial sees the week's recipes and shifts) and ``shadow_min_audits`` would-be lock-outs were
inspected (default 20: below it a one-sided 90 % bound is too wide to clear a break-even
near 0.7 unless nearly every lock-out fails). Confirmed when the lower bound of the inspected
precision reaches the station's break-even (:attr:`qcllp.plant.config.Station.break_even`),
rejected when the upper bound is below it, else it waits for more. The level (default 0.90)
is the one the lock-out rule uses for its saving bound (:mod:`qcllp.station.lockout_rule`):
a model that would scrap steel at a loss is confirmed with at most 10 % chance. A trial runs
until it is decided (the promotion gate puts no other candidate on trial meanwhile,
:mod:`qcllp.retraining.promotion`), but not for ever: one still waiting once
``shadow_max_charges`` of its charges are counted (default 100, four weeks of an ordinary
line) is **inconclusive** and ends like a rejected one, so that a station whose would-be
lock-outs are too rare to inspect, or whose precision sits at break-even, can try the next
candidate. A lock-out
rule acts on measured evidence: the model-based figure never decides, and the count bounds
are shown beside it (they are often too wide to decide a small trial). A shadow model that
locks out nothing (threshold above 1) has nothing to try and is confirmed at once.

**Cost**: the trial's rows are read by station and model (``shadow_flags``), everything else
by the trial's charges (the indexes' (station, charge) prefixes): in proportion to the trial,
not the plant's history. ``qcllp.learn``-free and without side effects; the daemon's job that
acts on the verdict is :func:`check_trial`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.plant.config import PlantConfig, Retrainer, Station
from qcllp.station.final_qc import read_flags
from qcllp.station.precision import precision_bounds
from qcllp.store import (
    IN_CHUNK,
    Charge,
    DefectCount,
    Inspection,
    ShadowFlag,
    Store,
    rows_frame,
    stored_utc,
)

__all__ = [
    "TrialFigures",
    "TrialVerdict",
    "count_bounds",
    "judge_trial",
    "longest_trial",
    "precision_bounds",
    "trial_figures",
]

OK = "ok"


@dataclass(frozen=True)
class TrialFigures:
    """A shadow model's trial so far (module docstring); savings per 1,000 sticks scored,
    ``None`` where there is nothing to base them on."""

    station: str
    model_id: int
    since: datetime | None
    threshold: float
    charges: int
    sticks: int
    lockouts: int
    inspected: int
    inspected_failing: int
    level: float
    precision: float | None
    precision_low: float | None
    precision_high: float | None
    measured_per_1000: float | None
    measured_low_per_1000: float | None
    measured_high_per_1000: float | None
    bounded_low_per_1000: float | None
    bounded_high_per_1000: float | None
    expected_per_1000: float | None
    failing_low: int = 0
    failing_high: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``since`` as ISO 8601)."""
        out = asdict(self)
        out["since"] = None if self.since is None else self.since.isoformat()
        return out

    def line(self, currency: str = "") -> str:
        """What people read: ``shadow trial since ...: N charges, k would-be lock-outs;
        measured ...; bounded by the counts ...; expected ... (model-based)``."""
        unit = f" {currency}" if currency else ""
        since = "-" if self.since is None else f"{self.since:%Y-%m-%d %H:%M} UTC"
        head = (
            f"shadow trial of model {self.model_id} since {since}: {self.charges} charges "
            f"counted, {self.lockouts} would-be lock-outs of {self.sticks} sticks"
        )
        if self.measured_per_1000 is None:
            measured = "measured: none inspected yet"
        else:
            measured = (
                f"measured {_signed(self.measured_per_1000)} [{_signed(self.measured_low_per_1000)}"
                f", {_signed(self.measured_high_per_1000)}]{unit} per 1,000 on "
                f"{self.inspected} inspected ({self.inspected_failing} failing)"
            )
        bounded = (
            "bounded by the counts: -"
            if self.bounded_low_per_1000 is None
            else f"bounded by the counts [{_signed(self.bounded_low_per_1000)}, "
            f"{_signed(self.bounded_high_per_1000)}]{unit}"
        )
        expected = f"expected {_signed(self.expected_per_1000)}{unit} (model-based)"
        return f"{head}; {measured}; {bounded}; {expected}"


@dataclass(frozen=True)
class TrialVerdict:
    """The confirmation rule's word: ``confirm``, ``reject``, ``wait`` or ``inconclusive``
    (waited too long), and why."""

    outcome: str
    reason: str


def _signed(value: float | None) -> str:
    """A saving with its sign and thousands separator, ``-`` when there is none."""
    return "-" if value is None else f"{value:+,.0f}"


def count_bounds(rows: pd.DataFrame, n_sticks: pd.Series, failures: pd.Series) -> tuple[int, int]:
    """The least and most failures among the would-be lock-outs (module docstring).

    ``rows``: one per stick the model scored in the counted charges: ``charge_id``,
    ``lockout`` (a would-be lock-out), ``gone`` (locked out at some station or inspected
    failing: it never reached QC), ``inspected`` (here) and ``failing`` (inspected, failing in
    the model's target); ``n_sticks`` / ``failures``: QC's sticks and target failures per
    charge."""
    charge = rows["charge_id"]
    sizes = charge.map(charge.value_counts())
    stayed = (~rows["gone"]).groupby(charge).transform("sum")
    n = charge.map(n_sticks).astype(float)
    whole = (sizes == n) & (stayed != n)  # nothing taken off the line: QC counted them all
    counted = ((stayed == n) & ~rows["gone"]) | whole
    lock, ins, fail = rows["lockout"], rows["inspected"], rows["failing"]
    terms = pd.DataFrame(
        {
            "placed": ((stayed == n) | whole).astype(int),  # its counted sticks are known
            "size": counted.astype(int),
            "known": (counted & ins).astype(int),
            "known_failing": (counted & fail).astype(int),
            "k": (counted & lock & ~ins).astype(int),
        }
    )
    per = terms.groupby(charge.to_numpy()).sum()
    per = per[per["placed"] > 0]
    c = (failures.reindex(per.index).fillna(0.0) - per["known_failing"]).clip(lower=0.0)
    u = per["size"] - per["known"]
    low = np.maximum(0.0, c - (u - per["k"])).sum()
    high = np.minimum(per["k"], c).sum()
    sure = int((lock & fail).sum())
    unplaced = int((lock & ~ins & ~counted).sum())
    return sure + int(low), sure + int(high) + unplaced


def trial_figures(
    store: Store, config: PlantConfig, station: str, model: dict[str, Any]
) -> TrialFigures:
    """The figures of ``model``'s (a registry row) shadow trial at ``station``."""
    since = None if model.get("promoted_at") is None else stored_utc(model["promoted_at"])
    with store.engine.connect() as conn:
        rows, n_sticks, failures = _trial_rows(conn, config, station, model, since)
    threshold = (model["metrics"] or {}).get("threshold")
    threshold = np.inf if threshold is None else float(threshold)
    st = config.station(station)
    return _figures(st, config.retrainer, model, since, threshold, rows, n_sticks, failures)


def _figures(
    st: Station,
    settings: Retrainer,
    model: dict[str, Any],
    since: datetime | None,
    threshold: float,
    rows: pd.DataFrame,
    n_sticks: pd.Series,
    failures: pd.Series,
) -> TrialFigures:
    """The three kinds of saving from the trial's rows (module docstring)."""
    sticks, lock = len(rows), rows["lockout"].to_numpy(bool)
    k = int(lock.sum())
    m = int((lock & rows["inspected"].to_numpy(bool)).sum())
    f = int((lock & rows["failing"].to_numpy(bool)).sum())
    level = settings.shadow_confirm_level
    low, high = precision_bounds(f, m, level)
    per = 1000.0 / sticks if sticks else 0.0

    def implied(precision: float) -> float:
        return per * k * st.lockout_value(precision)

    def counted(failing: int) -> float | None:
        return (implied(failing / k) if k else 0.0) if sticks else None

    worst, best = count_bounds(rows, n_sticks, failures) if sticks else (0, 0)
    p = rows["probability"].to_numpy(float)[lock]
    expected = per * float(np.sum(st.lockout_value(p)))
    return TrialFigures(
        station=st.name,
        model_id=int(model["id"]),
        since=since,
        threshold=threshold,
        charges=int(rows["charge_id"].nunique()),
        sticks=sticks,
        lockouts=k,
        inspected=m,
        inspected_failing=f,
        level=level,
        precision=f / m if m else None,
        precision_low=low if m else None,
        precision_high=high if m else None,
        measured_per_1000=implied(f / m) if m else None,
        measured_low_per_1000=implied(low) if m else None,
        measured_high_per_1000=implied(high) if m else None,
        bounded_low_per_1000=counted(worst),
        bounded_high_per_1000=counted(best),
        expected_per_1000=expected if sticks else None,
        failing_low=worst,
        failing_high=best,
    )


def _trial_rows(
    conn: Connection,
    config: PlantConfig,
    station: str,
    model: dict[str, Any],
    since: datetime | None,
) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """The model's scored sticks in its counted charges, each with what :func:`count_bounds`
    needs, and QC's sticks and target failures per counted charge."""
    scored = _shadow_rows(conn, station, int(model["id"]), since)
    charges = pd.unique(scored["charge_id"]).tolist()
    n_sticks = _counted_charges(conn, charges)
    scored = scored[scored["charge_id"].isin(n_sticks.index)].reset_index(drop=True)
    charges = n_sticks.index.tolist()
    stations = list(config.station_names)
    keys = pd.MultiIndex.from_frame(scored[["charge_id", "stick_id"]])
    locked = read_flags(conn, stations, charges, ["charge_id", "stick_id"], locked_only=True)
    seen = _inspections(conn, stations, charges)
    scrapped = seen[seen["result"] != OK]
    here = seen[seen["station"] == station].drop_duplicates(["charge_id", "stick_id"])
    result = pd.Series(
        here["result"].to_numpy(), index=pd.MultiIndex.from_frame(here[["charge_id", "stick_id"]])
    ).reindex(keys)
    inspected = result.notna().to_numpy()
    rows = scored.assign(
        lockout=(scored["decision"] == "lock_out").to_numpy(),
        gone=keys.isin(_index(locked)) | keys.isin(_index(scrapped)),
        inspected=inspected,
        failing=inspected & _fails(result, model["target"]).to_numpy(),
    )
    return rows, n_sticks, _target_failures(conn, charges, model["target"])


def _index(frame: pd.DataFrame) -> pd.MultiIndex:
    """The (charge_id, stick_id) of each row."""
    return pd.MultiIndex.from_frame(frame[["charge_id", "stick_id"]].astype(str))


def _fails(result: pd.Series, target: str) -> pd.Series:
    """An inspection result failing in the model's target: any defect for the any-defect and
    multiclass targets, the target's own defect type for a per-type model."""
    if target in ("defective", "multiclass"):
        return result.notna() & (result != OK)
    return result == target


def _shadow_rows(
    conn: Connection, station: str, model_id: int, since: datetime | None
) -> pd.DataFrame:
    """``charge_id, stick_id, probability, decision`` of the model's shadow flags at the
    station written since ``since``."""
    s = ShadowFlag.__table__
    columns = ["charge_id", "stick_id", "probability", "decision"]
    query = select(*(s.c[c] for c in columns)).where(
        s.c.station == station, s.c.model_id == model_id
    )
    if since is not None:
        query = query.where(s.c.scored_at >= since)
    frame = rows_frame(conn.execute(query).all(), columns)
    return frame.astype({"probability": np.float64, "charge_id": str, "stick_id": str})


def _counted_charges(conn: Connection, charges: list[str]) -> pd.Series:
    """QC's ``n_sticks`` of those of ``charges`` whose counts are in, in the order given."""
    c = Charge.__table__
    rows = []
    for start in range(0, len(charges), IN_CHUNK):
        rows += conn.execute(
            select(c.c.charge_id, c.c.n_sticks).where(
                c.c.charge_id.in_(charges[start : start + IN_CHUNK]), c.c.n_sticks.is_not(None)
            )
        ).all()
    found = dict(rows)
    return pd.Series({ch: float(found[ch]) for ch in charges if ch in found}, dtype=float)


def _inspections(conn: Connection, stations: list[str], charges: list[str]) -> pd.DataFrame:
    """``station, charge_id, stick_id, result`` of the inspections of these charges."""
    i = Inspection.__table__
    columns = ["station", "charge_id", "stick_id", "result"]
    rows = []
    for start in range(0, len(charges), IN_CHUNK):
        rows += conn.execute(
            select(*(i.c[c] for c in columns)).where(
                i.c.station.in_(stations), i.c.charge_id.in_(charges[start : start + IN_CHUNK])
            )
        ).all()
    return rows_frame(rows, columns).astype(str)


def _target_failures(conn: Connection, charges: list[str], target: str) -> pd.Series:
    """Final QC's failures of the model's target per charge."""
    d = DefectCount.__table__
    rows = []
    for start in range(0, len(charges), IN_CHUNK):
        query = select(d.c.charge_id, d.c.defect_type, d.c["count"]).where(
            d.c.charge_id.in_(charges[start : start + IN_CHUNK])
        )
        if target not in ("defective", "multiclass"):
            query = query.where(d.c.defect_type == target)
        rows += conn.execute(query).all()
    frame = rows_frame(rows, ["charge_id", "defect_type", "count"])
    return frame.groupby("charge_id")["count"].sum().astype(float)


def longest_trial(settings: Retrainer) -> int:
    """The counted charges after which an undecided trial ends inconclusive:
    ``shadow_max_charges``, never fewer than the ``shadow_min_charges`` it is judged from."""
    return max(settings.shadow_max_charges, settings.shadow_min_charges)


def judge_trial(figures: TrialFigures, break_even: float, settings: Retrainer) -> TrialVerdict:
    """The confirmation rule (module docstring), and its end: a trial still waiting once
    ``shadow_max_charges`` of its charges are counted is ``inconclusive``."""
    verdict = _verdict(figures, break_even, settings)
    if verdict.outcome == "wait" and figures.charges >= longest_trial(settings):
        return TrialVerdict(
            "inconclusive",
            f"undecided after {figures.charges} charges counted (retrainer.shadow_max_charges "
            f"{settings.shadow_max_charges}): {verdict.reason}",
        )
    return verdict


def _verdict(figures: TrialFigures, break_even: float, settings: Retrainer) -> TrialVerdict:
    """Confirm, reject or wait, from the inspected precision's bounds (module docstring)."""
    fig = figures
    if fig.threshold > 1.0:
        return TrialVerdict("confirm", "it locks out nothing: nothing to try in shadow")
    if fig.charges < settings.shadow_min_charges:
        return TrialVerdict(
            "wait", f"{fig.charges} of {settings.shadow_min_charges} charges counted"
        )
    if fig.inspected < settings.shadow_min_audits:
        return TrialVerdict(
            "wait",
            f"{fig.inspected} of {settings.shadow_min_audits} would-be lock-outs inspected",
        )
    low, high = fig.precision_low or 0.0, fig.precision_high or 1.0
    said = (
        f"inspected precision {fig.inspected_failing}/{fig.inspected} = {fig.precision:.1%}, "
        f"{fig.level:.0%} bounds [{low:.1%}, {high:.1%}], break-even {break_even:.1%}"
    )
    if low >= break_even:
        return TrialVerdict("confirm", f"its lock-outs pay: {said}")
    if high < break_even:
        return TrialVerdict("reject", f"its lock-outs lose money: {said}")
    return TrialVerdict("wait", f"not yet decided: {said}")
