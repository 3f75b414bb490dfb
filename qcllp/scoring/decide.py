"""Deciding a station's due sticks: their series' statistics read, their features built, the
model asked.

The part of a scoring step (:mod:`.step`, step 2) that needs the sensors and the model: the
statistics the store keeps per series of the due sticks at the stations up to this one
(:func:`read_stick_stats`, in proportion to the sticks asked for), the sensors of this
station each stick still lacks (:func:`read_due` postpones a stick that may still get them,
and decides one that cannot as ``unscorable`` with the sensors named), and the model's
``lock_out`` or ``pass`` on the features built exactly as at training time, from the same
statistics by the same code (:func:`qcllp.features.features_of_sticks`) -- for the active
model and a shadow model alike, from one read (:func:`decide_due`). Runs inside the step's
transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection

from qcllp.features import features_of_sticks, station_pairs
from qcllp.plant.config import PlantConfig, Station
from qcllp.scoring.pending import postpone
from qcllp.station.registry import LoadedModel
from qcllp.store import seconds_since
from qcllp.store.kept_stats import fetch_stick_stats
from qcllp.store.series_stats import SeriesStats

__all__ = ["DueSticks", "decide_due", "read_due", "read_stick_stats"]


def read_stick_stats(
    conn: Connection, sticks: list[tuple[str, str]], pairs: list[tuple[str, str]]
) -> SeriesStats:
    """The kept statistics of the given sticks' series (their (charge_id, stick_id)) of the
    given (station, sensor) pairs, coded by the sticks' and the pairs' positions
    (:func:`qcllp.store.kept_stats.fetch_stick_stats`; ``benchmarks/bench_scorer.py`` puts
    the raw readings' path in its place to compare). One record per series, a row per stick
    and station, not the series' ~11 readings: the ingester keeps the rows in the
    transaction that stores the readings, so a stick whose readings the step sees has its
    statistics too (issue 34)."""
    return fetch_stick_stats(conn, sticks, pairs)


def _stick_keys(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The (charge_id, stick_id) of each row, as text. Python tuples rather than a pandas
    index: building one of a few sticks cost a step more than its model
    (``benchmarks/bench_line_latency.py``, issue 35); the columns converted by ``tolist``,
    as iterating pandas' Arrow-backed text one value at a time took a backlog's drain a
    tenth of its time (``benchmarks/bench_scorer.py`` backlog, issue 34), and taken as they
    are when they hold Python strings already (:func:`~qcllp.store.kept_stats.
    read_series_stats`' columns)."""
    charges, sticks = frame["charge_id"], frame["stick_id"]
    if charges.dtype != object or sticks.dtype != object:
        charges, sticks = charges.astype(str), sticks.astype(str)
    return list(zip(charges.tolist(), sticks.tolist(), strict=True))


@dataclass(frozen=True)
class DueSticks:
    """The due sticks that completed the station, ready for a model: ``base`` (one row per
    stick: ``charge_id, stick_id, probability, decision, reason, arrived_at``; ``unscorable``
    with the missing sensors named until a model decides the ``scorable`` ones), ``keys`` the
    (charge_id, stick_id) of ``base``'s rows and ``stats`` their series' statistics at the
    stations up to this one, coded by ``keys``' positions
    (:func:`qcllp.features.features_of_sticks`). Read once, decided by the active and the
    shadow model alike."""

    base: pd.DataFrame
    scorable: np.ndarray
    stats: SeriesStats
    keys: list[tuple[str, str]]


def read_due(
    conn: Connection,
    config: PlantConfig,
    st: Station,
    due: pd.DataFrame,
    now: datetime,
    assume_complete: bool,
) -> DueSticks:
    """The due sticks that have completed, with their series' statistics; sticks still waiting
    for a missing sensor (before the timeout) get a later ``due_at`` and are left out.
    ``due``: :func:`qcllp.scoring.pending.due_sticks`' frame, its times already UTC."""
    pairs = station_pairs(config, st.name)
    due_keys = _stick_keys(due)
    stats = read_stick_stats(conn, due_keys, pairs)
    missing = _missing_sensors(stats, len(due_keys), pairs, st)
    first = due["first_arrived_at"]
    timed_out = seconds_since(first, now) >= st.timeout_s
    complete = due["later_seen"].to_numpy(bool) | timed_out | assume_complete
    has_all = np.array([not m for m in missing], dtype=bool)
    waiting = ~has_all & ~complete
    if waiting.any():
        postpone(conn, st, due.loc[waiting], first[waiting])
        stats = _without(stats, waiting, len(pairs))
        due_keys = [key for key, w in zip(due_keys, waiting, strict=True) if not w]
    decided = due.loc[~waiting].reset_index(drop=True) if waiting.any() else due
    n = len(decided)
    base = pd.DataFrame(
        {
            "charge_id": decided["charge_id"],
            "stick_id": decided["stick_id"],
            "probability": np.full(n, np.nan),
            "decision": pd.Series(["unscorable"] * n, dtype=object),
            "reason": pd.Series(
                [
                    f"no reading from sensor(s) {', '.join(m)} at {st.name}" if m else None
                    for m, w in zip(missing, waiting, strict=True)
                    if not w
                ],
                dtype=object,
            ),
            "arrived_at": decided["arrived_at"],
        }
    )
    return DueSticks(base, has_all[~waiting], stats, due_keys)


def _without(stats: SeriesStats, left_out: np.ndarray, n_pairs: int) -> SeriesStats:
    """``stats`` (coded by the sticks' positions) without the sticks ``left_out``, the
    others' positions closed up (their order kept, so the ids stay sorted)."""
    width = max(n_pairs, 1)
    position = stats.ids // width
    kept = np.flatnonzero(~left_out[position])
    moved = np.cumsum(~left_out) - 1
    taken = stats.take(kept)
    return replace(taken, ids=moved[position[kept]] * width + taken.ids % width)


def decide_due(
    config: PlantConfig,
    st: Station,
    due: DueSticks,
    models: list[LoadedModel | None],
) -> list[pd.DataFrame | None]:
    """Each model's decisions (``None`` for no model) on the same completed sticks, in the
    order of ``due.base``. The features are built once per distinct (feature list,
    imputation): an active and a shadow model trained alike share them."""
    built: list[tuple[tuple, pd.DataFrame]] = []
    out: list[pd.DataFrame | None] = []
    for loaded in models:
        if loaded is None:
            out.append(None)
            continue
        model = loaded.model
        key = (tuple(model.features), tuple(sorted(dict(model.imputation).items())))
        X = next((x for k, x in built if k == key), None)
        if X is None and due.scorable.any():
            X = features_of_sticks(
                due.stats, due.keys, config, st.name, imputation=model.imputation
            ).X
            built.append((key, X))
        out.append(_model_decisions(due, loaded, X))
    return out


def _model_decisions(due: DueSticks, loaded: LoadedModel, X: pd.DataFrame | None) -> pd.DataFrame:
    """One model's ``lock_out`` or ``pass`` (``unscorable`` without a probability) for the
    scorable sticks of ``due`` on their features ``X`` (a row per stick of ``due.base``, in
    its order). The three columns are filled as arrays and the frame built once: masked
    ``.loc`` writes cost a line step more than building it
    (``benchmarks/bench_line_latency.py``, issue 35). Its text stays Python strings
    (``object``), as in :func:`read_due`'s ``base``: compared as pandas' inferred
    Arrow-backed text, each of the guard's and the audits' tests of a decision cost a few
    times more (``benchmarks/bench_step.py``)."""
    base, scorable = due.base, due.scorable
    if X is None or not scorable.any():
        return base.copy()
    model = loaded.model
    p = model.failure_probability(X if scorable.all() else X.iloc[np.flatnonzero(scorable)])
    finite = np.isfinite(p)
    probability = base["probability"].to_numpy(dtype=np.float64, copy=True)
    probability[scorable] = p
    decision = base["decision"].to_numpy(dtype=object, copy=True)
    decision[scorable] = np.where(
        ~finite, "unscorable", np.where(model.flagged(p), "lock_out", "pass")
    ).tolist()  # Python's str, not NumPy's, into the flags and the sink
    reason = base["reason"].to_numpy(dtype=object, copy=True)
    reason[scorable] = np.where(finite, None, "the model gave no probability").tolist()
    columns = {c: base[c] for c in base.columns}
    columns |= {
        "probability": probability,
        "decision": pd.Series(decision, index=base.index, dtype=object, copy=False),
        "reason": pd.Series(reason, index=base.index, dtype=object, copy=False),
    }
    return pd.DataFrame(columns, index=base.index)


def _missing_sensors(
    stats: SeriesStats, n_sticks: int, pairs: list[tuple[str, str]], st: Station
) -> list[list[str]]:
    """Per stick (its position in ``stats``' coding), the sensors of station ``st`` without
    any reading (a series without readings has no row of statistics)."""
    width = max(len(pairs), 1)
    seen = np.zeros(n_sticks * width, dtype=bool)
    seen[stats.ids[stats.n > 0]] = True
    here = [k for k, (station, _) in enumerate(pairs) if station == st.name]
    names = [pairs[k][1] for k in here]
    seen_here = seen.reshape(n_sticks, width)[:, here]
    missing: list[list[str]] = [[] for _ in range(n_sticks)]
    for i in np.flatnonzero(~seen_here.all(axis=1)):  # few: a loop over every row cost 3 %
        missing[i] = [n for n, has in zip(names, seen_here[i], strict=True) if not has]
    return missing
