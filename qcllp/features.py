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
* Vectorized: ids are factorized to integer codes (``pd.factorize``), the readings reduced
  to their series' mergeable statistics (:mod:`qcllp.store.series_stats`: one sort by
  (series, time), ``np.bincount`` sums and ``ufunc.reduceat`` over the runs), and every
  feature is then a function of those few numbers per series -- no Python loop over sticks
  or readings (``benchmarks/bench_features.py``). The same statistics merge exactly across
  batches, so they can be kept as readings arrive (:func:`build_station_features_from_stats`
  builds the same table from them). Times stay integer microseconds until they are
  differences within a series: epoch seconds as floats resolve only about 0.24 µs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

from qcllp.plant.config import PlantConfig
from qcllp.store.kept_stats import SERIES_COLUMNS
from qcllp.store.series_stats import STAT_COLUMNS, SeriesStats, series_stats

__all__ = [
    "SENSOR_STATS",
    "StationFeatures",
    "apply_imputation",
    "build_station_features",
    "build_station_features_from_stats",
    "feature_names",
    "features_of_sticks",
    "station_pairs",
    "station_features",
]

SENSOR_STATS = ("mean", "std", "min", "max", "last", "count", "slope")
STATION_STATS = ("dwell_s", "missing")
READING_COLUMNS = ("charge_id", "stick_id", "station", "timestamp", "sensor", "value")
CHUNK_CHARGES = 100  # charges read at a time by station_features (~5k sticks, ~60k series)
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
    ``imputation`` to fill new sticks the same way (scoring). The readings are first reduced to
    their series' statistics (:func:`qcllp.store.series_stats.series_stats`), from which every
    feature follows, as it does in :func:`build_station_features_from_stats`.
    """
    _check_columns(readings, READING_COLUMNS, "readings")
    stations = config.stations_up_to(station)  # raises ConfigError for an unknown station
    v = readings["value"].to_numpy(dtype=np.float64, na_value=np.nan)
    keep, group, stick_index = _series_codes(readings, stations, ~np.isnan(v))
    stats = series_stats(group, _microseconds(readings["timestamp"])[keep], v[keep])
    return _table(stats, stick_index, config, station, imputation)


def build_station_features_from_stats(
    stats: pd.DataFrame,
    config: PlantConfig,
    station: str,
    *,
    imputation: Mapping[str, float] | None = None,
) -> StationFeatures:
    """The table of :func:`build_station_features` from the series' statistics rather than
    their readings: ``stats`` has one row per series, columns ``charge_id, stick_id, station,
    sensor`` and :data:`qcllp.store.series_stats.STAT_COLUMNS` (a series without readings has
    no row). The same features up to rounding (1e-9 relative, ``tests/features``)."""
    _check_columns(stats, (*SERIES_COLUMNS, *STAT_COLUMNS), "series statistics")
    stations = config.stations_up_to(station)
    keep, group, stick_index = _series_codes(stats, stations, stats["n"].to_numpy() > 0)
    order = np.argsort(group, kind="stable")
    columns = {c: stats[c].to_numpy()[keep][order] for c in STAT_COLUMNS}
    series = SeriesStats(ids=group[order], **columns)
    return _table(series, stick_index, config, station, imputation)


def station_pairs(config: PlantConfig, station: str) -> list[tuple[str, str]]:
    """The configured ``(station, sensor)`` pairs of the stations up to ``station``, in the
    order of the feature table: the pair codes of :func:`features_of_sticks`."""
    return _pairs(config.stations_up_to(station))


def _pairs(stations: Sequence) -> list[tuple[str, str]]:
    """The ``(station, sensor)`` pairs of these stations, in order."""
    return [(st.name, se.name) for st in stations for se in st.sensors]


def features_of_sticks(
    stats: SeriesStats,
    sticks: Sequence[tuple[str, str]],
    config: PlantConfig,
    station: str,
    *,
    imputation: Mapping[str, float],
) -> StationFeatures:
    """The table of :func:`build_station_features_from_stats` for the given ``sticks``, one
    row each in their order, from their series' statistics coded as
    :func:`qcllp.store.kept_stats.fetch_stick_stats` returns them (``stats.ids`` = the
    stick's position in ``sticks``, its (charge_id, stick_id), x the number of
    :func:`station_pairs` + the pair's position). A stick
    without any series gets a row of holes, filled by the recorded ``imputation``.

    The scorer's entry: the sticks come coded from the database, so nothing is factorized
    or reordered here (the names' codes and a reindex into the decided order cost a
    backlog's drain a sixth of its time, ``benchmarks/bench_scorer.py``, issue 34). The
    features are computed by the same code as the other two entries, so they are the same
    (``tests/features``)."""
    charges = np.array([charge for charge, _ in sticks], dtype=object)
    ids = np.array([stick for _, stick in sticks], dtype=object)
    return _table(stats, _sorted_index(charges, ids), config, station, imputation)


def _check_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """``frame`` (``what`` it holds, for the message) must have every one of ``columns``;
    the error lists those lacking."""
    lacking = [c for c in columns if c not in frame.columns]
    if lacking:
        raise ValueError(f"{what} lack column(s) {', '.join(lacking)}")


def _series_codes(
    frame: pd.DataFrame, stations: Sequence, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, pd.MultiIndex]:
    """Of the rows of ``frame`` (readings or series statistics) that are ``valid`` and of a
    configured (station, sensor) of ``stations``: their positions, their series code (stick
    code x pairs + pair, the ids :func:`_feature_values` reads) and the sticks' index."""
    pairs = _pairs(stations)
    pair = _pair_codes(frame["station"], frame["sensor"], pairs)
    keep = np.flatnonzero((pair >= 0) & valid)
    stick_codes, stick_index = _stick_codes(frame["charge_id"], frame["stick_id"], keep)
    return keep, stick_codes.astype(np.int64) * len(pairs) + pair[keep], stick_index


def _table(
    stats: SeriesStats,
    stick_index: pd.MultiIndex,
    config: PlantConfig,
    station: str,
    imputation: Mapping[str, float] | None,
) -> StationFeatures:
    """The station's feature table from its series' statistics, imputed."""
    stations = config.stations_up_to(station)
    values = _feature_values(stats, len(stick_index), stations)
    frame = pd.DataFrame(values, index=stick_index, columns=feature_names(config, station))
    return _imputed(station, frame, imputation)


def _pair_codes(stations: pd.Series, sensors: pd.Series, pairs: list[tuple[str, str]]):
    """Per row the index of its (station, sensor) in ``pairs``; -1 for a later or unknown
    station or an unconfigured sensor (no leakage: such rows are dropped)."""
    st_codes, st_uniques = pd.factorize(stations)
    se_codes, se_uniques = pd.factorize(sensors)
    lookup = np.full((len(st_uniques) + 1, len(se_uniques) + 1), -1, dtype=np.int64)
    st_pos = {v: i for i, v in enumerate(st_uniques)}
    se_pos = {v: i for i, v in enumerate(se_uniques)}
    for p, (st, se) in enumerate(pairs):
        if st in st_pos and se in se_pos:
            lookup[st_pos[st], se_pos[se]] = p
    return lookup[st_codes, se_codes]  # code -1 (missing) hits the extra last row/column


def _feature_values(stats: SeriesStats, n_sticks: int, stations: Sequence) -> np.ndarray:
    """The feature matrix in :func:`feature_names` order from the statistics of the series
    ``stats.ids`` = stick code x pairs + pair: per stick and pair the SENSOR_STATS, per stick
    and station its dwell and missing."""
    n_pairs = sum(len(st.sensors) for st in stations)
    station_of_pair = np.repeat(np.arange(len(stations)), [len(s.sensors) for s in stations])
    sensor_block = _sensor_stats(stats, n_sticks * n_pairs)
    counts = sensor_block[:, SENSOR_STATS.index("count")]
    sensor_block = sensor_block.reshape(n_sticks, n_pairs, len(SENSOR_STATS))
    sgroup = (stats.ids // max(n_pairs, 1)) * len(stations) + station_of_pair[
        stats.ids % max(n_pairs, 1)
    ]
    dwell = _dwell(sgroup, stats, n_sticks, len(stations))
    missing = _missing(counts.reshape(n_sticks, n_pairs) > 0, station_of_pair, len(stations))
    return _in_feature_order(stations, sensor_block, dwell, missing)


def _sensor_stats(stats: SeriesStats, n_groups: int) -> np.ndarray:
    """Per series (``stats.ids`` < ``n_groups``) the SENSOR_STATS columns; a series without
    readings NaN with count 0. std is the population one, sqrt(m2_v / n); the slope is the
    least-squares c_tv / m2_t, per second, NaN without two distinct times."""
    out = np.full((n_groups, len(SENSOR_STATS)), np.nan)
    out[:, SENSOR_STATS.index("count")] = 0.0
    g = stats.ids
    out[g, SENSOR_STATS.index("count")] = stats.n
    out[g, SENSOR_STATS.index("mean")] = stats.mean_v
    out[g, SENSOR_STATS.index("std")] = np.sqrt(stats.m2_v / stats.n)
    out[g, SENSOR_STATS.index("min")] = stats.min_v
    out[g, SENSOR_STATS.index("max")] = stats.max_v
    out[g, SENSOR_STATS.index("last")] = stats.v_last
    with np.errstate(invalid="ignore", divide="ignore"):
        out[g, SENSOR_STATS.index("slope")] = np.where(
            stats.m2_t > 0, stats.c_tv / stats.m2_t, np.nan
        )
    return out


def _dwell(sgroup: np.ndarray, stats: SeriesStats, n_sticks: int, n_stations: int) -> np.ndarray:
    """Per stick and station (``sgroup``: stick code x stations + station of each series), its
    last minus first reading time in seconds, from integer microseconds; NaN where the stick
    has no reading at the station."""
    size = n_sticks * n_stations
    t_first = np.full(size, np.iinfo(np.int64).max)
    t_last = np.full(size, np.iinfo(np.int64).min)
    np.minimum.at(t_first, sgroup, stats.t0_us)
    np.maximum.at(t_last, sgroup, stats.t1_us)
    dwell = np.full(size, np.nan)
    seen = np.unique(sgroup)
    dwell[seen] = (t_last[seen] - t_first[seen]) / 1e6
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
    cols, present = list(imputation), list(X.columns)
    known = set(present)
    absent = [c for c in cols if c not in known]
    extra = [c for c in present if c not in imputation]
    if absent or extra:
        raise ValueError(
            "features do not match the recorded imputation: "
            f"missing {absent[:5]}{'...' if len(absent) > 5 else ''}, "
            f"unknown {extra[:5]}{'...' if len(extra) > 5 else ''}"
        )
    ordered = X if present == cols else X[cols]  # a scorer's table is in order already
    values = ordered.to_numpy(dtype=np.float64, copy=True)
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
    """The table of the stations up to ``station`` for these charges (all: ``None``), from
    the statistics the store keeps per series (``store.read_series_stats``,
    :mod:`qcllp.store.kept_stats`): one record per series, not its readings
    (:func:`build_station_features_from_stats`).

    They are read ``chunk_charges`` charges at a time (every feature is one stick's own;
    only the training imputation, the medians, needs all sticks, and it is taken once over
    the assembled table), so the peak memory is that of one chunk plus the feature table.
    The table is the same for any chunk size: charges are taken in sorted order, which is
    the table's own. ``chunk_charges=None``: all at once.
    """
    names = [s.name for s in config.stations_up_to(station)]
    if chunk_charges is not None and chunk_charges < 1:
        raise ValueError(f"chunk_charges must be >= 1 or None, got {chunk_charges}")
    ids = sorted(map(str, charge_ids)) if charge_ids is not None else None
    if chunk_charges is not None and ids is None:
        ids = list(store.read_charge_times().index)
    chunks = (
        [ids]
        if chunk_charges is None or len(ids) <= chunk_charges
        else [ids[i : i + chunk_charges] for i in range(0, len(ids), chunk_charges)]
    )
    if len(chunks) == 1:
        stats = store.read_series_stats(names, chunks[0])
        return build_station_features_from_stats(stats, config, station, imputation=imputation)
    parts = [
        build_station_features_from_stats(
            store.read_series_stats(names, chunk), config, station, imputation=_NO_FILL
        ).X
        for chunk in chunks
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
    return rank[pair_codes], _sorted_index(charges[order], sticks[order])


def _sorted_index(charges: np.ndarray, sticks: np.ndarray) -> pd.MultiIndex:
    """The (charge_id, stick_id) index of these pairs, in their order: what
    ``MultiIndex.from_arrays`` builds (levels sorted, text of pandas' ``str`` dtype), built
    from the levels' distinct values and their codes. ``from_arrays`` converted every row's
    text to pandas' Arrow-backed strings before factorizing; here only the distinct values
    are converted, a third of the cost for a line step's few dozen sticks, where the index
    was a twentieth of the step (``benchmarks/bench_step.py``, issue 35)."""
    levels, codes = [], []
    for values in (charges, sticks):
        distinct, code = np.unique(values, return_inverse=True)
        levels.append(pd.Index(distinct, dtype="str"))
        codes.append(code.reshape(-1))
    return pd.MultiIndex(
        levels=levels, codes=codes, names=["charge_id", "stick_id"], verify_integrity=False
    )


def _microseconds(ts: pd.Series) -> np.ndarray:
    """Timestamps as int64 microseconds since the epoch (UTC for aware, as-is for naive),
    the store's unit; finer parts are dropped."""
    return pd.DatetimeIndex(pd.to_datetime(ts)).as_unit("us").asi8
