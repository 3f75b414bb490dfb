"""Vectorized validation of one chunk of input: which rows are valid, and why the others are not.

Every function takes a whole chunk (a pandas frame, typically 100k-500k rows) and decides for all
rows at once with array operations; Python-level work happens only for the rejected rows'
detail messages. Each rejected row gets exactly one reason, the first that applies in the order
of :data:`MEASUREMENT_CHECKS` (a row with an unknown station is not also checked for its value).

Choices made (and why):

* Ids and names are stripped of surrounding whitespace (exports pad them); ids are compared
  as strings, so ``"007"`` and ``"7"`` are different sticks. An id longer than the store's id
  columns take (:data:`MAX_ID_LENGTH`, read from the schema) is quarantined here, so SQLite
  (which would keep it) and PostgreSQL (which would refuse the whole batch) treat it alike.
* Timestamps are ISO 8601. A timestamp with an offset (``Z``, ``+01:00``) is taken as is; one
  without is local time of the plant (``config.timezone``). A local time that does not exist
  or is ambiguous (the hour of a DST change) cannot be placed on the time line and is
  quarantined with that explanation rather than guessed. Timestamps outside 1970..2200 are
  treated as unparseable (typos such as year 20244; they would not fit nanosecond pandas
  timestamps downstream). A reading stamped later than the time of ingestion plus
  ``connectors.future_tolerance_s`` (default a day) cannot have been measured yet: it is
  quarantined as ``future_timestamp`` rather than stored (where, on PostgreSQL, it would also
  create a monthly partition decades ahead).
* Integer fields (the defect counts) are checked against :func:`largest_storable` of their
  columns before anything is inserted: PostgreSQL's ``INTEGER`` is 32-bit and refuses the
  whole batch for one larger value, SQLite would keep it; both quarantine it here alike.
* Values must be finite numbers; ``NaN``/``inf`` text is "not a finite number". Range bounds
  from the config are inclusive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import BigInteger, SmallInteger

from qcllp.plant.config import PlantConfig
from qcllp.store import Charge, Series

__all__ = [
    "KEY",
    "MAX_ID_LENGTH",
    "SERIES_KEY",
    "MEASUREMENT_CHECKS",
    "SensorTable",
    "as_text",
    "id_length_detail",
    "largest_storable",
    "future_limit_us",
    "too_long",
    "parse_timestamps_us",
    "validate_readings",
]

KEY = ["station", "charge_id", "stick_id", "sensor", "ts_us"]  # natural key of a reading
SERIES_KEY = KEY[:4]  # one time series: a sensor of a stick at a station
LONG_COLUMNS = ["charge_id", "stick_id", "station", "timestamp", "sensor", "value"]
#: longest charge or stick id the store takes (its ``String(n)`` columns)
MAX_ID_LENGTH: int = min(
    column.type.length for column in (Series.charge_id, Series.stick_id, Charge.charge_id)
)
MEASUREMENT_CHECKS = (
    "missing_id",
    "id_too_long",
    "missing_timestamp",
    "unknown_station",
    "unknown_sensor",
    "missing_value",
    "non_numeric_value",
    "unparseable_timestamp",
    "future_timestamp",
    "value_out_of_range",
)
_MIN_US = 0  # 1970-01-01
_MAX_US = int(pd.Timestamp("2200-01-01", tz="UTC").value // 1000)
_AWARE = r"(?:[zZ]|[+-]\d\d(?::?\d\d)?)$"


def largest_storable(*columns) -> int:  # noqa: ANN002
    """The largest integer every one of these (integer) columns holds on both engines.

    ``Integer`` is a 32-bit ``INTEGER`` on PostgreSQL; SQLite would store 64 bits, but the
    smaller bound keeps the engines alike.
    """

    def bound(column) -> int:  # noqa: ANN001
        if isinstance(column.type, BigInteger):
            return 2**63 - 1
        return 2**15 - 1 if isinstance(column.type, SmallInteger) else 2**31 - 1

    return min(bound(column) for column in columns)


@dataclass(frozen=True)
class SensorTable:
    """The plant's stations and sensors as arrays, for lookups by integer code.

    ``pair = station_code * n_sensor_names + sensor_code`` indexes ``low``/``high``/``known``.
    """

    stations: pd.Index
    sensor_names: pd.Index
    low: np.ndarray
    high: np.ndarray
    known: np.ndarray
    units: np.ndarray

    @classmethod
    def from_config(cls, config: PlantConfig) -> SensorTable:
        stations = pd.Index([s.name for s in config.stations])
        names = pd.Index(sorted({x.name for s in config.stations for x in s.sensors}))
        size = len(stations) * len(names)
        low, high = np.full(size, np.nan), np.full(size, np.nan)
        known, units = np.zeros(size, bool), np.full(size, "", dtype=object)
        for i, station in enumerate(config.stations):
            for sensor in station.sensors:
                pair = i * len(names) + names.get_loc(sensor.name)
                low[pair], high[pair], known[pair] = sensor.min, sensor.max, True
                units[pair] = sensor.unit
        return cls(stations, names, low, high, known, units)

    def codes(self, station: pd.Series, sensor: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """(station code or -1, pair code or -1) for each row."""
        st = _indexer(self.stations, station)
        se = _indexer(self.sensor_names, sensor)
        pair = st * len(self.sensor_names) + se
        ok = (st >= 0) & (se >= 0)
        pair = np.where(ok, pair, -1)
        pair[ok] = np.where(self.known[pair[ok]], pair[ok], -1)
        return st, pair


def _indexer(known: pd.Index, column: pd.Series) -> np.ndarray:
    """Position of each value in ``known`` (-1 if absent), via the column's few distinct values."""
    codes, uniques = pd.factorize(column)
    return known.get_indexer(uniques)[codes] if len(codes) else np.zeros(0, dtype=np.intp)


def _to_float(text: pd.Series) -> np.ndarray:
    """Text -> float64, NaN where not a number (fast Arrow cast when the whole chunk is clean)."""
    try:
        array = pa.array(text.array)  # Arrow-backed strings: no copy
        return pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pd.to_numeric(text, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def as_text(column: pd.Series) -> pd.Series:
    """A column as stripped strings; missing values become ``""``."""
    if column.dtype != "str":
        missing = column.isna().to_numpy()
        column = column.astype("str")
        if missing.any():
            column = column.where(~missing, "")
    return column.fillna("").str.strip()


def too_long(ids: pd.Series) -> np.ndarray:
    """Which ids (stripped text) are longer than :data:`MAX_ID_LENGTH` characters."""
    return (ids.str.len() > MAX_ID_LENGTH).to_numpy(dtype=bool)


def id_length_detail(name: str, value: str) -> str:
    """The quarantine detail of an id that is too long (without the id itself)."""
    return f"{name} is {len(value):,} characters long; ids may have at most {MAX_ID_LENGTH}"


def parse_timestamps_us(column: pd.Series, timezone: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse timestamps to epoch microseconds (UTC).

    Returns ``(ts_us, status)``: status 0 = ok, 1 = not parseable / out of range, 2 = local time
    that does not exist or is ambiguous in ``timezone``. ``ts_us`` is 0 where status != 0.
    """
    n = len(column)
    status = np.zeros(n, dtype=np.int8)
    utc = None
    if isinstance(column.dtype, pd.DatetimeTZDtype):
        utc = column.dt.tz_convert("UTC")
    elif pd.api.types.is_datetime64_dtype(column.dtype):
        utc = _localize(column, timezone, status, column.notna().to_numpy())
    else:
        text = as_text(column)
        utc = _all_with_offset(text)
    if utc is None:
        aware = text.str.contains(_AWARE, regex=True).to_numpy(dtype=bool)
        utc = pd.Series(pd.NaT, index=column.index, dtype="datetime64[us, UTC]")
        if aware.any():
            parsed = pd.to_datetime(text[aware], format="ISO8601", utc=True, errors="coerce")
            utc[aware] = parsed.dt.as_unit("us")
        naive = ~aware
        if naive.any():
            parsed = pd.to_datetime(text[naive], format="ISO8601", errors="coerce")
            utc[naive] = _localize(parsed, timezone, status, naive, parsed.notna().to_numpy())
    values = utc.dt.as_unit("us")
    bad = values.isna().to_numpy().copy()
    ts_us = np.where(bad, 0, values.to_numpy(dtype="int64", na_value=0))
    bad |= (ts_us < _MIN_US) | (ts_us >= _MAX_US)
    status[bad & (status == 0)] = 1
    ts_us[status != 0] = 0
    return ts_us, status


def _all_with_offset(text: pd.Series) -> pd.Series | None:
    """Fast path: Arrow's ISO 8601 parser, when *every* timestamp of the chunk is valid and has
    a UTC offset (the usual historian export); ``None`` sends the chunk to the general path."""
    try:
        parsed = pc.cast(pa.array(text.array), pa.timestamp("us", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return pd.Series(parsed.to_pandas(), index=text.index)


def _localize(parsed, timezone, status, rows, parsed_ok=None):  # noqa: ANN001
    """Naive local times -> UTC; marks nonexistent/ambiguous local times with status 2."""
    local = parsed.dt.tz_localize(timezone, ambiguous="NaT", nonexistent="NaT")
    if parsed_ok is None:
        parsed_ok = parsed.notna().to_numpy()
    lost = parsed_ok & local.isna().to_numpy()
    if lost.any():
        positions = np.flatnonzero(rows)[lost]
        status[positions] = 2
    return local.dt.tz_convert("UTC").dt.as_unit("us")


def future_limit_us(config: PlantConfig) -> int:
    """The latest timestamp (epoch µs, UTC) a reading ingested now may carry: the time of
    ingestion plus ``connectors.future_tolerance_s``."""
    return int((time.time() + config.connectors.future_tolerance_s) * 1_000_000)


def _numeric_values(raw_value: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(values as float64, NaN where not a number; which values are empty)."""
    if pd.api.types.is_numeric_dtype(raw_value.dtype) and raw_value.dtype != bool:
        value = raw_value.to_numpy(dtype="float64", na_value=np.nan)
        return value, np.isnan(value)
    value_text = as_text(raw_value)
    return _to_float(value_text), (value_text == "").to_numpy(dtype=bool)


def _empty_timestamps(raw_ts: pd.Series) -> np.ndarray:
    """Which timestamps are missing (NaT, or empty text)."""
    if isinstance(raw_ts.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(raw_ts):
        return raw_ts.isna().to_numpy()
    return (as_text(raw_ts) == "").to_numpy(dtype=bool)


def _first_reason(failing: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Per row the first of :data:`MEASUREMENT_CHECKS` it fails, ``""`` if none."""
    reason = np.full(n, "", dtype=object)
    open_rows = np.ones(n, dtype=bool)
    for name in MEASUREMENT_CHECKS:
        hit = failing[name] & open_rows
        reason[hit] = name
        open_rows &= ~hit
    return reason


def validate_readings(
    chunk: pd.DataFrame, config: PlantConfig, table: SensorTable
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split a long-format chunk into valid readings and rejects.

    ``chunk`` has the :data:`LONG_COLUMNS` (any dtypes). Returns ``(valid, rejects)``:
    ``valid`` with columns ``pos`` (row position in ``chunk``), the :data:`KEY` columns and
    ``value``; ``rejects`` with ``pos``, ``reason``, ``detail``.
    """
    text = {c: as_text(chunk[c]) for c in ("charge_id", "stick_id", "station", "sensor")}
    charge, stick, station, sensor = text.values()
    raw_ts, raw_value = chunk["timestamp"], chunk["value"]
    value, value_empty = _numeric_values(raw_value)
    st_code, pair = table.codes(station, sensor)
    ts_us, ts_status = parse_timestamps_us(raw_ts, config.timezone)
    limit_us = future_limit_us(config)
    finite = np.isfinite(value)
    safe_pair = np.maximum(pair, 0)
    in_range = (value >= table.low[safe_pair]) & (value <= table.high[safe_pair])
    failing = {
        "missing_id": ((charge == "") | (stick == "")).to_numpy(dtype=bool),
        "id_too_long": too_long(charge) | too_long(stick),
        "missing_timestamp": _empty_timestamps(raw_ts),
        "unknown_station": st_code < 0,
        "unknown_sensor": pair < 0,
        "missing_value": value_empty & ~finite,
        "non_numeric_value": ~finite,
        "unparseable_timestamp": ts_status != 0,
        "future_timestamp": ts_us > limit_us,
        "value_out_of_range": ~in_range,
    }
    reason = _first_reason(failing, len(chunk))
    ok = reason == ""
    valid = pd.DataFrame(text)[["station", "charge_id", "stick_id", "sensor"]]
    valid["ts_us"] = ts_us
    valid["value"] = value
    valid = valid[ok].reset_index(drop=True)  # strings stay Arrow-backed: no per-row objects
    valid.insert(0, "pos", np.flatnonzero(ok))
    bad = np.flatnonzero(~ok)
    rows = {name: column.iloc[bad].to_numpy(dtype=object) for name, column in text.items()}
    rows["timestamp"] = as_text(raw_ts.iloc[bad]).to_numpy(dtype=object)
    rows["value"] = as_text(raw_value.iloc[bad]).to_numpy(dtype=object)
    rows["ts_status"], rows["pair"] = ts_status[bad], pair[bad]
    detail = _details(reason[bad], rows, config, table, limit_us)
    rejects = pd.DataFrame({"pos": bad, "reason": reason[bad], "detail": detail})
    return valid, rejects


def _details(
    reason: np.ndarray,
    rows: dict[str, np.ndarray],
    config: PlantConfig,
    table: SensorTable,
    limit_us: int,
) -> np.ndarray:
    """Row-specific, human-readable detail for each rejected row (only rejects are touched),
    built per reason over its rows; ``rows`` holds the rejected rows' fields as text, their
    ``ts_status`` and ``pair``."""
    out = np.full(len(reason), "", dtype=object)
    charge, stick, station, sensor = (
        rows[k] for k in ("charge_id", "stick_id", "station", "sensor")
    )
    ts, value, ts_status, pair = (rows[k] for k in ("timestamp", "value", "ts_status", "pair"))
    known_stations = ", ".join(table.stations)
    sensors_of = {s.name: ", ".join(x.name for x in s.sensors) for s in config.stations}
    limit = datetime.fromtimestamp(limit_us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tolerance = config.connectors.future_tolerance_s
    texts = {
        "missing_id": lambda i: np.where(
            charge[i] == "", "charge_id is empty", "stick_id is empty"
        ),
        "id_too_long": lambda i: [
            _id_too_long(c, s) for c, s in zip(charge[i], stick[i], strict=True)
        ],
        "missing_timestamp": lambda i: "timestamp is empty",
        "unknown_station": lambda i: [
            f"unknown station '{s}'; known: {known_stations}" for s in station[i]
        ],
        "unknown_sensor": lambda i: [
            f"station '{s}' has no sensor '{x}'; known: {sensors_of[s]}"
            for s, x in zip(station[i], sensor[i], strict=True)
        ],
        "missing_value": lambda i: "value is empty",
        "non_numeric_value": lambda i: [f"value '{v}' is not a finite number" for v in value[i]],
        "unparseable_timestamp": lambda i: [
            f"local time '{t}' does not exist or is ambiguous in {config.timezone} "
            "(DST change); give it with a UTC offset"
            if status == 2
            else f"timestamp '{t}' is not an ISO 8601 time between 1970 and 2200"
            for t, status in zip(ts[i], ts_status[i], strict=True)
        ],
        "future_timestamp": lambda i: [
            f"timestamp '{t}' is after {limit} (the time of ingestion plus "
            f"connectors.future_tolerance_s {tolerance:g} s)"
            for t in ts[i]
        ],
        "value_out_of_range": lambda i: [
            f"value {v} outside [{table.low[p]:g}, {table.high[p]:g}] {table.units[p]} of {s}.{x}"
            for v, p, s, x in zip(value[i], pair[i], station[i], sensor[i], strict=True)
        ],
    }
    for why in pd.unique(reason):  # rejects only: at most the bad rows of one chunk
        at = np.flatnonzero(reason == why)
        out[at] = texts[why](at)
    return out


def _id_too_long(charge: str, stick: str) -> str:
    """The detail of a row whose charge or stick id is too long."""
    if len(charge) > MAX_ID_LENGTH:
        return id_length_detail("charge_id", charge)
    return id_length_detail("stick_id", stick)
