"""Per-stick feature tables per station: what a station-``s`` model may see, one row per stick.

The station-``s`` model predicts, while a stick is at station ``s``, whether it will fail; it may
only use readings from stations up to and including ``s`` (``DESIGN.md``). This module turns the
long-format readings into one row per stick with, per station up to ``s`` and per configured
sensor, aggregates of the sensor's short time series:

``<station>.<sensor>.mean``, ``.std`` (population, ddof=0: one reading has spread 0),
``.min``, ``.max``, ``.last`` (value at the latest timestamp), ``.count`` (number of readings)
and ``.slope`` (least-squares slope of value over time, per second; undefined with fewer than
two distinct timestamps), plus per station ``<station>.dwell_s`` (last minus first reading time
at the station, any sensor) and ``<station>.missing`` (1.0 when at least one configured sensor
of the station has no reading for the stick, else 0.0).

Choices made (and why):

* **No leakage** is enforced here, not by the caller: readings of later stations, unknown
  stations and unconfigured sensors are dropped before anything is computed, so the table for
  ``s`` is a function of the readings up to ``s`` only.
* Rows are the sticks with at least one reading at the stations up to ``s``; the bag of a row is
  its ``charge_id``. Stick ids are only assumed unique within a charge.
* **Missing values** (a sensor without readings, ``std``/``slope`` of a too-short series) are
  imputed with the per-feature median of the data the table is built from (the training data)
  and the fill values are returned in ``StationFeatures.imputation``, so that a model records
  them and scoring applies the same (:func:`apply_imputation`). A feature that is missing in all
  training rows is filled with 0. Counts are never missing (0 readings is a count).
* Vectorized: ids are factorized to integer codes (``pd.factorize``), the readings sorted once
  by (stick, sensor, time) with ``np.lexsort``, then every aggregate is an ``np.bincount`` sum
  or a ``ufunc.reduceat`` over the contiguous runs -- the same group-by as pandas', without its
  per-aggregate overhead, and no Python loop over sticks or readings (~0.4 s for 1M readings,
  ``benchmarks/bench_features.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

from qcllp.plant.config import PlantConfig

__all__ = [
    "SENSOR_STATS",
    "StationFeatures",
    "apply_imputation",
    "build_station_features",
    "feature_names",
    "station_features",
]

SENSOR_STATS = ("mean", "std", "min", "max", "last", "count", "slope")
STATION_STATS = ("dwell_s", "missing")
READING_COLUMNS = ("charge_id", "stick_id", "station", "timestamp", "sensor", "value")
CHUNK_CHARGES = 100  # charges read at a time by station_features (~5k sticks, ~335k readings)
_NO_FILL: Mapping[str, float] = MappingProxyType({})  # a chunk's holes wait for all sticks' medians


@dataclass(frozen=True, eq=False)
class StationFeatures:
    """Feature table of one station.

    X: index MultiIndex ``(charge_id, stick_id)``, float64 feature columns, no NaN.
    bags: ``charge_id`` per row, same index.
    imputation: feature -> fill value used for missing values (record it with the model).
    """

    station: str
    X: pd.DataFrame
    bags: pd.Series
    imputation: dict[str, float] = field(default_factory=dict)

    @property
    def feature_names(self) -> list[str]:
        return list(self.X.columns)

    def of_charges(self, charges) -> StationFeatures:  # noqa: ANN001 - charge ids
        """The rows of the given charges, with the same imputation."""
        keep = self.bags.isin(set(charges)).to_numpy()
        return StationFeatures(self.station, self.X.loc[keep], self.bags.loc[keep], self.imputation)


def feature_names(config: PlantConfig, station: str) -> list[str]:
    """The feature columns of the station-``station`` table, in order."""
    names = []
    for st in config.stations_up_to(station):
        for sensor in st.sensors:
            names += [f"{st.name}.{sensor.name}.{stat}" for stat in SENSOR_STATS]
        names += [f"{st.name}.{stat}" for stat in STATION_STATS]
    return names


def build_station_features(
    readings: pd.DataFrame,
    config: PlantConfig,
    station: str,
    *,
    imputation: Mapping[str, float] | None = None,
) -> StationFeatures:
    """One row per stick with the features of the stations up to and including ``station``.

    ``readings``: long format (``charge_id, stick_id, station, timestamp, sensor, value``), as
    returned by ``Store.read_readings`` or the simulator. With ``imputation=None`` missing
    values are filled with the per-feature median of these readings (training); pass a recorded
    ``imputation`` to fill new sticks the same way (scoring).
    """
    _check_columns(readings)
    stations = config.stations_up_to(station)  # raises ConfigError for an unknown station
    names = feature_names(config, station)
    pairs = [(st.name, se.name) for st in stations for se in st.sensors]
    n_pairs = len(pairs)
    keep, pair, v, t = _configured_readings(readings, pairs)

    # stick codes, sorted by (charge_id, stick_id)
    stick_codes, stick_index = _stick_codes(readings["charge_id"], readings["stick_id"], keep)
    n_sticks = len(stick_index)

    # per (stick, pair) aggregates; sort by time so "last" is the latest reading
    group = stick_codes.astype(np.int64) * n_pairs + pair
    order = np.lexsort((t, group))
    group, t, v = group[order], t[order], v[order]
    table = _aggregate(group, t, v, n_sticks * n_pairs)
    counts = table[:, SENSOR_STATS.index("count")]
    sensor_block = table.reshape(n_sticks, n_pairs, len(SENSOR_STATS))

    # per (stick, station): dwell time and missing indicator
    station_of_pair = np.repeat(np.arange(len(stations)), [len(s.sensors) for s in stations])
    sgroup = stick_codes[order].astype(np.int64) * len(stations) + station_of_pair[pair[order]]
    dwell = _dwell(sgroup, t, n_sticks, len(stations))
    missing = _missing(counts.reshape(n_sticks, n_pairs) > 0, station_of_pair, len(stations))

    values = _in_feature_order(stations, sensor_block, dwell, missing)
    return _imputed(station, pd.DataFrame(values, index=stick_index, columns=names), imputation)


def _check_columns(readings: pd.DataFrame) -> None:
    """Readings must have every column of :data:`READING_COLUMNS`; the error lists those
    lacking."""
    missing_cols = [c for c in READING_COLUMNS if c not in readings.columns]
    if missing_cols:
        raise ValueError(f"readings lack column(s) {', '.join(missing_cols)}")


def _configured_readings(
    readings: pd.DataFrame, pairs: list[tuple[str, str]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The readings of the configured (station, sensor) ``pairs`` with a value: no leakage of
    later stations, unknown stations or unconfigured sensors. Returns their row positions in
    ``readings``, the index of each one's pair in ``pairs``, their values and their times
    (seconds)."""
    st_codes, st_uniques = pd.factorize(readings["station"])
    se_codes, se_uniques = pd.factorize(readings["sensor"])
    lookup = np.full((len(st_uniques) + 1, len(se_uniques) + 1), -1, dtype=np.int64)
    st_pos = {v: i for i, v in enumerate(st_uniques)}
    se_pos = {v: i for i, v in enumerate(se_uniques)}
    for p, (st, se) in enumerate(pairs):
        if st in st_pos and se in se_pos:
            lookup[st_pos[st], se_pos[se]] = p
    pair = lookup[st_codes, se_codes]  # code -1 (missing) hits the extra last row/column
    v = readings["value"].to_numpy(dtype=np.float64, na_value=np.nan)
    keep = np.flatnonzero((pair >= 0) & ~np.isnan(v))
    pair, v = pair[keep], v[keep]
    t = _seconds(readings["timestamp"])[keep]
    return keep, pair, v, t


def _dwell(sgroup: np.ndarray, t: np.ndarray, n_sticks: int, n_stations: int) -> np.ndarray:
    """Per stick and station (``sgroup``: stick code x stations + station of each reading),
    its last minus first reading time; NaN where the stick has no reading at the station."""
    t_first = np.full(n_sticks * n_stations, np.inf)
    t_last = np.full(n_sticks * n_stations, -np.inf)
    np.minimum.at(t_first, sgroup, t)
    np.maximum.at(t_last, sgroup, t)
    dwell = np.where(np.isfinite(t_first), t_last - t_first, np.nan)
    return dwell.reshape(n_sticks, n_stations)


def _missing(has: np.ndarray, station_of_pair: np.ndarray, n_stations: int) -> np.ndarray:
    """Per stick and station, 1.0 when a configured sensor of the station has no reading
    (``has``: per stick and pair, whether it has one), else 0.0."""
    missing = np.ones((has.shape[0], n_stations))
    for i in range(n_stations):
        cols = station_of_pair == i
        missing[:, i] = 0.0 if not cols.any() else (~has[:, cols]).any(axis=1)
    return missing


def _in_feature_order(
    stations: Sequence, sensor_block: np.ndarray, dwell: np.ndarray, missing: np.ndarray
) -> np.ndarray:
    """The feature matrix in :func:`feature_names` order: per station its sensors' stats, then
    its dwell and missing columns."""
    n_sticks = sensor_block.shape[0]
    blocks, start = [], 0
    for i, st in enumerate(stations):
        k = len(st.sensors)
        blocks.append(
            sensor_block[:, start : start + k, :].reshape(n_sticks, k * len(SENSOR_STATS))
        )
        blocks.append(np.column_stack([dwell[:, i], missing[:, i]]))
        start += k
    return np.hstack(blocks) if blocks else np.empty((n_sticks, 0))


def _imputed(
    station: str, X: pd.DataFrame, imputation: Mapping[str, float] | None
) -> StationFeatures:
    """The table with its holes filled: by ``imputation``, or by the per-feature medians of
    these sticks (training), which then become the recorded imputation; ``_NO_FILL``: as it
    is (one chunk of :func:`station_features`)."""
    if imputation is None:
        values = X.to_numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column -> NaN median
            medians = np.nanmedian(values, axis=0) if len(values) else np.full(X.shape[1], np.nan)
        imputation = {
            c: float(m) if np.isfinite(m) else 0.0 for c, m in zip(X.columns, medians, strict=True)
        }
    filled = X if imputation is _NO_FILL else apply_imputation(X, imputation)
    bags = pd.Series(filled.index.get_level_values("charge_id"), index=filled.index, name="bag")
    return StationFeatures(station=station, X=filled, bags=bags, imputation=dict(imputation))


def apply_imputation(X: pd.DataFrame, imputation: Mapping[str, float]) -> pd.DataFrame:
    """Fill missing values of ``X`` with the recorded fill values; columns in recorded order.

    Raises ``ValueError`` when ``X`` lacks a recorded feature or has one the imputation does not
    know (a model trained on other features must not silently score these).
    """
    cols = list(imputation)
    absent = [c for c in cols if c not in X.columns]
    extra = [c for c in X.columns if c not in imputation]
    if absent or extra:
        raise ValueError(
            "features do not match the recorded imputation: "
            f"missing {absent[:5]}{'...' if len(absent) > 5 else ''}, "
            f"unknown {extra[:5]}{'...' if len(extra) > 5 else ''}"
        )
    values = X[cols].to_numpy(dtype=np.float64, copy=True)
    fill = np.array([imputation[c] for c in cols], dtype=np.float64)
    holes = np.isnan(values)
    values[holes] = np.broadcast_to(fill, values.shape)[holes]
    return pd.DataFrame(values, index=X.index, columns=cols)


def station_features(
    store,
    config: PlantConfig,
    station: str,
    charge_ids: Sequence[str] | None = None,
    *,
    imputation: Mapping[str, float] | None = None,
    chunk_charges: int | None = CHUNK_CHARGES,
) -> StationFeatures:
    """Read the readings of the stations up to ``station`` from ``store`` and build the table.

    The readings are read and turned into features ``chunk_charges`` charges at a time (every
    feature is one stick's own; only the training imputation, the medians, needs all sticks,
    and it is taken once over the assembled table), so the peak memory is that of one chunk's
    readings plus the feature table, not of all readings at once: the readings are about 66
    rows per stick against one row of features, and reading them costs about 0.5 kB each at
    the peak. 1,000 charges (3.4M readings) at straightening: 1,844 MiB peak all at once, 564
    MiB by 100 charges, in the same time (``benchmarks/bench_feature_memory.py``).
    The table is the same for any chunk size: charges are taken in sorted order, which is the
    table's own. ``chunk_charges=None``: all at once.
    """
    names = [s.name for s in config.stations_up_to(station)]
    if chunk_charges is not None and chunk_charges < 1:
        raise ValueError(f"chunk_charges must be >= 1 or None, got {chunk_charges}")
    ids = sorted(map(str, charge_ids)) if charge_ids is not None else None
    if chunk_charges is not None and ids is None:
        ids = list(store.read_charge_times().index)
    if chunk_charges is None or len(ids) <= chunk_charges:
        readings = store.read_readings(stations=names, charge_ids=ids)
        return build_station_features(readings, config, station, imputation=imputation)
    parts = [
        build_station_features(
            store.read_readings(stations=names, charge_ids=ids[i : i + chunk_charges]),
            config,
            station,
            imputation=_NO_FILL,
        ).X
        for i in range(0, len(ids), chunk_charges)
    ]
    return _imputed(station, pd.concat(parts), imputation)


def _stick_codes(
    charge_id: pd.Series, stick_id: pd.Series, keep: np.ndarray
) -> tuple[np.ndarray, pd.MultiIndex]:
    """Per kept row the code of its (charge_id, stick_id) pair; codes follow the sorted index."""
    c_codes, c_names = pd.factorize(charge_id)
    s_codes, s_names = pd.factorize(stick_id)
    width = max(len(s_names), 1)
    pair_codes, uniq = pd.factorize(c_codes[keep].astype(np.int64) * width + s_codes[keep])
    charges = np.asarray(c_names, dtype=object)[uniq // width].astype(str)
    sticks = np.asarray(s_names, dtype=object)[uniq % width].astype(str)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.lexsort((sticks, charges))] = np.arange(len(uniq))
    order = np.argsort(rank)
    index = pd.MultiIndex.from_arrays(
        [charges[order], sticks[order]], names=["charge_id", "stick_id"]
    )
    return rank[pair_codes], index


def _seconds(ts: pd.Series) -> np.ndarray:
    """Timestamps as float seconds since the epoch (UTC for aware, as-is for naive)."""
    return pd.DatetimeIndex(pd.to_datetime(ts)).as_unit("ns").asi8 / 1e9


def _aggregate(group: np.ndarray, t: np.ndarray, v: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group the SENSOR_STATS columns; rows sorted by (group, t); absent groups NaN, count 0.

    Sums via ``np.bincount``; min/max via ``ufunc.reduceat`` over the contiguous group runs;
    ``last`` is the final element of each run. The slope is ``sum(dt dv) / sum(dt^2)`` with
    ``dt``, ``dv`` centred per group (numerically safe with epoch seconds).
    """
    out = np.full((n_groups, len(SENSOR_STATS)), np.nan)
    n = np.bincount(group, minlength=n_groups).astype(np.float64)
    out[:, SENSOR_STATS.index("count")] = n
    if len(group) == 0:
        return out
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    ends = np.r_[starts[1:], len(group)] - 1
    g = group[starts]
    ng = n[g]
    mean_t = np.bincount(group, weights=t, minlength=n_groups)[g] / ng
    mean_v = np.bincount(group, weights=v, minlength=n_groups)[g] / ng
    run = np.repeat(np.arange(len(g)), ends - starts + 1)
    dt, dv = t - mean_t[run], v - mean_v[run]
    sxx = np.bincount(run, weights=dt * dt)
    sxy = np.bincount(run, weights=dt * dv)
    syy = np.bincount(run, weights=dv * dv)
    out[g, SENSOR_STATS.index("mean")] = mean_v
    out[g, SENSOR_STATS.index("std")] = np.sqrt(syy / ng)
    out[g, SENSOR_STATS.index("min")] = np.minimum.reduceat(v, starts)
    out[g, SENSOR_STATS.index("max")] = np.maximum.reduceat(v, starts)
    out[g, SENSOR_STATS.index("last")] = v[ends]
    with np.errstate(invalid="ignore", divide="ignore"):
        out[g, SENSOR_STATS.index("slope")] = np.where(sxx > 0, sxy / sxx, np.nan)
    return out
