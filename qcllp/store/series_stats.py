"""Mergeable sufficient statistics of a series: what every per-series feature follows from.

A *series* is the readings of one sensor for one stick at one station (:class:`qcllp.store.
Series`). Every feature :mod:`qcllp.features` computes of it -- mean, std, min, max, last,
count, slope, and with the station's other series dwell and missing -- is a function of these
few numbers (:data:`STAT_COLUMNS`):

* ``n``: the readings; ``t0_us``, ``t1_us``: the first and last time (epoch microseconds,
  integers: exact); ``v_last``: the value at ``t1_us``; ``min_v``, ``max_v``;
* ``mean_t``: the mean time, in seconds after ``t0_us``; ``mean_v``: the mean value;
* ``m2_t``, ``m2_v``, ``c_tv``: the centred second moments, sum((t - mean_t)**2),
  sum((v - mean_v)**2) and sum((t - mean_t)(v - mean_v)).

Two sets of statistics of the same series, from readings split any way (batches, files, a
series spanning both), merge exactly into those of all its readings (:meth:`SeriesStats.
merge`) by the pairwise update of Chan, Golub & LeVeque (1979, "Updating formulae and a
pairwise algorithm for computing sample variances"): the means move by the difference of
the two means weighted by the other side's count, and each centred moment gains
``delta_a * delta_b * n_a * n_b / n``. It is numerically stable where the textbook
sum-of-squares form is not, and the merge is symmetric, so the order of batches does not
matter beyond rounding. Times are kept as integers and only differences within a series
become floats: epoch seconds as floats carry only about 0.24 microseconds of resolution
(the spacing of float64 near 1.7e9), which would cost a 60 s series' slope its ninth digit.

A series' readings never share a time (``readings``' primary key is ``(series_id,
ts_us)``), so ``v_last`` is well defined; for raw frames that do repeat a time the larger
value is taken, which is the same whichever side it arrives in.

:data:`STATS_VERSION` names this definition: statistics kept under another version are
rebuilt from the raw readings, which stay the truth.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "COUNT_COLUMNS",
    "MOMENT_COLUMNS",
    "RECORD",
    "STATS_VERSION",
    "STAT_COLUMNS",
    "SeriesStats",
    "from_records",
    "series_stats",
    "to_records",
]

STATS_VERSION = 1
COUNT_COLUMNS = ("n", "t0_us", "t1_us")  # integers
MOMENT_COLUMNS = ("v_last", "min_v", "max_v", "mean_t", "mean_v", "m2_t", "m2_v", "c_tv")
STAT_COLUMNS = COUNT_COLUMNS + MOMENT_COLUMNS
RECORD = np.dtype(
    [("series_id", "<i8"), ("sensor", "<i8")]
    + [(c, "<i8") for c in COUNT_COLUMNS]
    + [(c, "<f8") for c in MOMENT_COLUMNS]
)
"""One series' statistics as the store keeps them: its id, its sensor's code and
:data:`STAT_COLUMNS`, little-endian whatever the machine's (104 bytes). A stick's series at
a station are one value of such records (:mod:`qcllp.store.kept_stats`), which NumPy reads
back in one ``frombuffer``."""
_US = 1e6  # microseconds a second


@dataclass(frozen=True, eq=False)
class SeriesStats:
    """The statistics of some series, one entry per series id in ``ids`` (sorted, unique):
    the columns of :data:`STAT_COLUMNS` as arrays (``n``, ``t0_us``, ``t1_us`` int64, the rest
    float64)."""

    ids: np.ndarray
    n: np.ndarray
    t0_us: np.ndarray
    t1_us: np.ndarray
    v_last: np.ndarray
    min_v: np.ndarray
    max_v: np.ndarray
    mean_t: np.ndarray
    mean_v: np.ndarray
    m2_t: np.ndarray
    m2_v: np.ndarray
    c_tv: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, positions: np.ndarray) -> SeriesStats:
        """The entries at ``positions``, in that order."""
        return SeriesStats(*(getattr(self, f.name)[positions] for f in fields(self)))

    def merge(self, other: SeriesStats) -> SeriesStats:
        """The statistics of both sets of readings: a series in one of them is kept as it is,
        one in both is merged exactly (module docstring). The readings of the two must not
        overlap: a reading counted on both sides is counted twice."""
        ids = np.union1d(self.ids, other.ids)
        a = _aligned(self, ids)
        b = _aligned(other, ids)
        return _merged(ids, a, b)


def to_records(stats: SeriesStats, sensors: np.ndarray) -> np.ndarray:
    """``stats`` as an array of :data:`RECORD` (``sensors``: each entry's sensor code)."""
    records = np.empty(len(stats), dtype=RECORD)
    records["series_id"] = stats.ids
    records["sensor"] = sensors
    for column in STAT_COLUMNS:
        records[column] = getattr(stats, column)
    return records


def from_records(records: np.ndarray, ids: np.ndarray | None = None) -> SeriesStats:
    """The statistics held in ``records`` (:data:`RECORD`), in their order, under ``ids``
    (default: the records' series ids); the caller keeps ``ids`` sorted and unique."""
    return SeriesStats(
        ids=records["series_id"].astype(np.int64) if ids is None else ids,
        **{c: records[c].astype(np.float64 if c in MOMENT_COLUMNS else np.int64)
           for c in STAT_COLUMNS},
    )  # fmt: skip


def series_stats(series: np.ndarray, ts_us: np.ndarray, value: np.ndarray) -> SeriesStats:
    """The statistics of each series among these readings (any order): ``series`` its id (any
    integers), ``ts_us`` its time in epoch microseconds (int64), ``value`` a float without NaN.

    Vectorized: one stable sort by series (readings in time order within a series, as the
    store returns them, stay so; otherwise a second key sorts them by time), then
    ``np.bincount`` sums and ``ufunc.reduceat`` over each series' run, in two passes (means
    first, then the centred moments about them).
    """
    series = np.asarray(series, dtype=np.int64)
    ts_us = np.asarray(ts_us, dtype=np.int64)
    value = np.asarray(value, dtype=np.float64)
    order = np.argsort(series, kind="stable")
    series, ts_us, value = series[order], ts_us[order], value[order]
    if np.any((series[1:] == series[:-1]) & (ts_us[1:] < ts_us[:-1])):
        order = np.lexsort((ts_us, series))
        series, ts_us, value = series[order], ts_us[order], value[order]
    if not len(series):
        return _empty()
    starts = np.flatnonzero(np.r_[True, series[1:] != series[:-1]])
    ends = np.r_[starts[1:], len(series)] - 1
    run = np.repeat(np.arange(len(starts)), ends - starts + 1)
    n = (ends - starts + 1).astype(np.int64)
    t0 = ts_us[starts]
    dt = (ts_us - t0[run]) / _US
    mean_t = np.bincount(run, weights=dt) / n
    mean_v = np.bincount(run, weights=value) / n
    ct, cv = dt - mean_t[run], value - mean_v[run]
    return SeriesStats(
        ids=series[starts],
        n=n,
        t0_us=t0,
        t1_us=ts_us[ends],
        v_last=_last_values(ts_us, value, starts, ends),
        min_v=np.minimum.reduceat(value, starts),
        max_v=np.maximum.reduceat(value, starts),
        mean_t=mean_t,
        mean_v=mean_v,
        m2_t=np.bincount(run, weights=ct * ct),
        m2_v=np.bincount(run, weights=cv * cv),
        c_tv=np.bincount(run, weights=ct * cv),
    )


def _last_values(
    ts_us: np.ndarray, value: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Per run (sorted by time) the value at its last time; of several at that time, the
    largest (only a raw frame repeats a time: the store's key forbids it)."""
    last = value[ends].copy()
    tied = np.flatnonzero((ends > starts) & (ts_us[ends] == ts_us[np.maximum(ends - 1, 0)]))
    for k in tied:
        at_end = np.flatnonzero(ts_us[starts[k] : ends[k] + 1] == ts_us[ends[k]]) + starts[k]
        last[k] = value[at_end].max()
    return last


def _empty() -> SeriesStats:
    ints, floats = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    return SeriesStats(ints, ints, ints, ints, *([floats] * 8))


def _aligned(s: SeriesStats, ids: np.ndarray) -> SeriesStats:
    """``s`` spread over ``ids`` (a superset of its own): ``n`` 0 where it has no entry."""
    at = np.searchsorted(ids, s.ids)
    out = {}
    for f in fields(s):
        if f.name == "ids":
            continue
        column = getattr(s, f.name)
        full = np.zeros(len(ids), dtype=column.dtype)
        full[at] = column
        out[f.name] = full
    return SeriesStats(ids=ids, **out)


def _merged(ids: np.ndarray, a: SeriesStats, b: SeriesStats) -> SeriesStats:
    """Chan et al.'s pairwise update of two aligned sets (module docstring); an entry with
    ``n`` 0 on one side is the other side's, as it is."""
    has_a, has_b = a.n > 0, b.n > 0
    both = has_a & has_b
    n = a.n + b.n
    t0 = np.where(both, np.minimum(a.t0_us, b.t0_us), np.where(has_a, a.t0_us, b.t0_us))
    ta = a.mean_t + (a.t0_us - t0) / _US  # both means in seconds after the common t0
    tb = b.mean_t + (b.t0_us - t0) / _US
    w = np.divide(b.n, n, out=np.zeros(len(ids)), where=both)  # the weight of b's side
    cross = a.n * w  # n_a * n_b / n where both have readings, else 0
    d_t, d_v = tb - ta, b.mean_v - a.mean_v
    b_last = ~has_a | (
        has_b & ((b.t1_us > a.t1_us) | ((b.t1_us == a.t1_us) & (b.v_last > a.v_last)))
    )

    def pick(merged: np.ndarray, of_a: np.ndarray, of_b: np.ndarray) -> np.ndarray:
        return np.where(both, merged, np.where(has_a, of_a, of_b))

    return SeriesStats(
        ids=ids,
        n=n,
        t0_us=t0,
        t1_us=np.where(b_last, b.t1_us, a.t1_us),
        v_last=np.where(b_last, b.v_last, a.v_last),
        min_v=pick(np.minimum(a.min_v, b.min_v), a.min_v, b.min_v),
        max_v=pick(np.maximum(a.max_v, b.max_v), a.max_v, b.max_v),
        mean_t=pick(ta + d_t * w, ta, tb),
        mean_v=pick(a.mean_v + d_v * w, a.mean_v, b.mean_v),
        m2_t=a.m2_t + b.m2_t + d_t * d_t * cross,
        m2_v=a.m2_v + b.m2_v + d_v * d_v * cross,
        c_tv=a.c_tv + b.c_tv + d_t * d_v * cross,
    )
