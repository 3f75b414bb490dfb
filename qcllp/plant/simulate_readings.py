"""The simulator's readings: what each sensor reads while a stick passes its station.

Step 3 of :mod:`.simulate`'s generative model: 3-8 readings per stick and station (the same
times for every sensor of the station), the first on arrival, the last on departure, each
value the stick's latent level plus the sensor's trend over the dwell and noise, clipped into
the sensor's range; sensor dropouts remove whole (stick, sensor) series. The draws come from
the caller's generator, station by station, in a fixed order (a seed gives the same plant).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from qcllp.plant.config import PlantConfig, Station

__all__ = ["READINGS_PER_STATION", "draw_readings", "readings_frame"]

READINGS_PER_STATION = (3, 8)


def draw_readings(
    config: PlantConfig,
    rng: np.random.Generator,
    levels: list[np.ndarray],
    trends: list[np.ndarray],
    entry: np.ndarray,
    dwell: np.ndarray,
    missing_rate: float,
) -> list[tuple[np.ndarray, ...]]:
    """Every station's readings as flat arrays (stick, time in ms, station index, sensor index,
    value); vectorized over sticks and readings (loops over stations only). ``levels`` and
    ``trends``: per station, each stick's latent sensor levels and each sensor's trend over
    the dwell; ``entry`` and ``dwell``: seconds, per stick and station."""
    n = len(entry)
    parts = []
    for i, station in enumerate(config.stations):
        if len(station.sensors) == 0:
            continue
        part = _station_readings(station, levels[i], trends[i], entry[:, i], dwell[:, i], rng)
        if missing_rate > 0:  # sensor dropouts: whole (stick, sensor) series at this station
            lost = rng.random((n, len(station.sensors))) < missing_rate
            keep = ~lost[part[0], part[2]]
            part = tuple(a[keep] for a in part)
        stick, t_ms, sensor, values = part
        parts.append((stick, t_ms, np.full(len(stick), i), sensor, values))
    return parts


def _station_readings(
    station: Station,
    levels: np.ndarray,
    trends: np.ndarray,
    entry: np.ndarray,
    dwell: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, ...]:
    """One station's readings as flat arrays (stick, time in ms, sensor index, value): 3-8
    per stick, the first on arrival, the last on departure (module docstring, step 3)."""
    n, n_sens = len(entry), len(station.sensors)
    lo_r, hi_r = READINGS_PER_STATION
    r = rng.integers(lo_r, hi_r + 1, size=n)
    stick = np.repeat(np.arange(n), r)
    k = np.arange(len(stick)) - np.repeat(np.cumsum(r) - r, r)
    # first reading on arrival, last on departure, the others in between (jittered)
    span = r[stick] - 1
    frac = np.clip((k + rng.uniform(-0.2, 0.2, size=len(stick))) / span, 0.0, 1.0)
    frac = np.where(k == 0, 0.0, np.where(k == span, 1.0, frac))
    t = entry[stick] + dwell[stick] * frac
    lo = np.array([s.min for s in station.sensors])
    hi = np.array([s.max for s in station.sensors])
    z = levels[stick] + trends * (frac[:, None] - 0.5)
    z += 0.35 * rng.standard_normal(z.shape)
    values = np.clip((lo + hi) / 2 + (hi - lo) / 12 * z, lo, hi)
    m = len(stick)
    return (
        np.repeat(stick, n_sens),
        np.repeat(np.round(t * 1000).astype(np.int64), n_sens),
        np.tile(np.arange(n_sens), m),
        values.ravel(),
    )


def readings_frame(
    config: PlantConfig,
    parts: list[tuple[np.ndarray, ...]],
    start: pd.Timestamp,
    charge_of: np.ndarray,
    charge_ids: np.ndarray,
    stick_ids: np.ndarray,
) -> pd.DataFrame:
    """The stations' flat arrays (:func:`draw_readings`) as one long frame
    (:class:`.simulate.SimulatedPlant`'s ``readings``) with categorical ids and UTC
    timestamps counted from ``start``."""
    stick, t_ms, st, se, values = (np.concatenate(c) for c in zip(*parts, strict=True))
    sensor_offsets = np.cumsum([0] + [len(s.sensors) for s in config.stations])
    flat_sensors = [se.name for s in config.stations for se in s.sensors]
    sensor_codes, sensor_names = pd.factorize(pd.Index(flat_sensors, dtype="str"))
    ts = pd.DatetimeIndex((start.value // 1_000_000 + t_ms).astype("datetime64[ms]"))
    return pd.DataFrame(
        {
            "charge_id": _categorical(charge_of[stick], charge_ids),
            "stick_id": _categorical(stick, stick_ids),
            "station": _categorical(st, config.station_names),
            "timestamp": ts.as_unit("ns").tz_localize("UTC"),
            "sensor": _categorical(sensor_codes[sensor_offsets[st] + se], sensor_names),
            "value": values,
        }
    )


def _categorical(codes: np.ndarray, names: Sequence[str]) -> pd.Categorical:
    """``names[codes]`` as a categorical of strings (decoding to a string column is ~5x slower)."""
    return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype="str"))
