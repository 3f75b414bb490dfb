"""Plant simulator: charges of sticks passing the stations of a plant config, with known truth.

Real plants never reveal which stick failed (that is the point of LLP), so the learners and the
pipeline are evaluated on a simulated plant whose per-stick truth is kept aside. The simulator
produces exactly what a plant feeds in (``DESIGN.md``, data contract): long-format readings, the
final-QC defect counts per charge, and -- separately -- the truth per stick.

Generative model (all draws from one ``numpy.random.Generator``, vectorized over sticks and
readings; the only Python loops run over stations, sensors and defect types of the config):

1. **Charges** (the bags) have 20-80 sticks. Each charge comes from an alloy batch with a
   latent 2-vector ``a_c ~ N(0, I)`` that shifts every sensor's level through fixed loadings
   (``BATCH_SHIFT * loading . a_c``, loadings ~ N(0, 0.5^2)) and the defect logit directly
   (``BATCH_RATE * a_c[0]``, visible in no sensor). Each charge also runs with its own set
   points, an independent shift ``N(0, SETPOINT_SD^2)`` per sensor (the recipe). So charge
   membership, features and defect rates are correlated, as in a real plant.
2. **Sticks** have a latent standardized level ``z = batch + set point + N(0, STICK_SD^2)`` per
   station and sensor, and a dwell time per station (``nominal * exp(0.2 N + 0.1 a_c[1])``; the
   first station -- the reheating furnace -- has a nominal dwell of 30 min, the others 2 min).
3. **Readings**: 3-8 per stick and station (the same timestamps for all sensors of a station,
   so the wide layout has one row per reading time), the first on arrival, the last on
   departure, the others in between; timestamps advance through the stations.
   ``value = mid + sd * (z + trend * (t_frac - 1/2) + 0.35 eps)`` with ``mid``/``sd`` from the
   configured range (``sd = range / 12``), clipped into the range (a real sensor saturates;
   nothing the simulator writes is quarantined by range).
4. **Defects** depend only on stations up to the *middle* station ``m = n_stations // 2``
   (cooling in the example). Each defect type ``k`` has a contribution ``c_k = (w . z) / |w| +
   relu(z_1) relu(z_2) / 2`` from its driver sensors (the product: both too high is worse than
   either). For the example plant's names the drivers are physical (``NAMED_RULES``): crack <-
   furnace temperature and rolling force, bend <- cooling rate and rolling speed, scale <-
   furnace oxygen and a long furnace dwell. For any other config defect type ``k`` is driven by
   the first sensor of station ``k mod (m+1)`` and the last sensor of station
   ``(k+1) mod (m+1)``. A stick is defective with probability
   ``sigmoid(b + strength * sum_k c_k / sqrt(K) + BATCH_RATE * a_c[0])``, the intercept ``b``
   solved by bisection on the drawn sticks so the mean probability is ``defect_rate``; its type
   is the dominant contribution (``argmax_k c_k + Gumbel noise / 2``). One shared risk rather
   than independent per-type risks keeps "defective vs ok" close to a half-space in feature
   space, which is what the linear LLP learners can represent.
5. **Consequences** show downstream: at stations after ``m`` the first sensor of the station
   reads higher for defective sticks (``+1.2`` sd: a bent stick needs more straightening
   force), so later-station features are informative -- which is what the no-leakage tests of
   :mod:`qcllp.features` rely on.

**Separate mechanisms** (``defect_stations={type: station}``, every defect type named): each
defect type arises at its own station, as in a plant where cracks start in the furnace and
bends in the rolling mill. Type ``k`` at station ``s_k`` has its own risk ``strength * c_k +
BATCH_RATE * a_c[0]`` from the first and the last sensor of ``s_k`` (weights 1.0 and 0.8, plus
their interaction as above), its own intercept solved so that its rate is ``defect_rate / K``,
and its own independent draw; a stick drawn for several types gets the one with the largest
risk (the counts stay exclusive, one defect per stick, as final QC reports them). Consequences
follow per type: after ``s_k`` the first sensor of each later station reads ``+1.2`` sd higher
for sticks with defect ``k``. A model at a station before ``s_k`` cannot see type ``k`` coming,
which is the point: the any-defect decision must combine what each station can know. (Used
by ``benchmarks/bench_plant_quality.py``; the default shared mechanism is unchanged.)

**A charge effect the first station sees** (``charge_effect = e > 0``; default 0, off): the
alloy batch's hidden risk component moves the defect logit by ``(BATCH_RATE + e) * a_c[0]``
and, after the defects are drawn, the last sensor of the first station (the furnace gas flow
in the example, which drives no defect) by ``CHARGE_SHIFT * a_c[0]`` (1.5 latent sds) for
every stick of the charge. The sensor then shows the charge's risk without causing any
stick's: between charges it tracks the failing share steeply (about ``e / 1.5`` on the logit
per latent sd), within a charge its sticks' own spread (``STICK_SD``) says nothing about which
of them fails. A model trained on the counts learns the steep between-charge slope and ranks
charges; its probabilities spread the sticks of a risky charge wider than their truth, and
the top of the ranking fails less often than claimed (``e = 3.5``: the ``charge`` scenario of
``benchmarks/bench_plant_quality.py``).

Why these magnitudes: with ``strength = 3`` a supervised logistic regression on the features up
to the middle station reaches ROC AUC ~0.94 against the truth, and a learner that sees only the
charges' defect shares gets close (tested with a proportion-loss logistic regression, >= 0.85).
The per-sensor set points matter for the latter: with the low-rank alloy effect alone the charge
means vary in two directions only, and the defect shares cannot tell which sensors matter (the
proportion-loss learner then stays near 0.8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from qcllp.plant.config import PlantConfig, Station
from qcllp.plant.simulate_defects import (
    BATCH_RATE,
    NAMED_RULES,
    arising_stations,
    draw_defects,
    draw_separate_defects,
)

__all__ = ["BATCH_RATE", "NAMED_RULES", "SimulatedPlant", "simulate_plant", "write_simulation"]

DEFAULT_START = pd.Timestamp("2026-01-05T06:00:00", tz="UTC")
FIRST_STATION_DWELL_S = 1800.0
STATION_DWELL_S = 120.0
TRANSFER_S = 30.0
STICK_SPACING_S = 45.0
CHARGE_GAP_S = 600.0
READINGS_PER_STATION = (3, 8)
_BATCH_DIMS = 2
BATCH_SHIFT = 0.7  # alloy batch -> sensor levels
STICK_SD = 0.8  # stick-to-stick spread of the latent levels
SETPOINT_SD = 0.6  # charge-to-charge spread of the set points, independent per sensor
CHARGE_SHIFT = 1.5  # with a charge effect: alloy batch -> the first station's last sensor


@dataclass(frozen=True, eq=False)
class SimulatedPlant:
    """What a simulated plant produced.

    readings: long format ``charge_id, stick_id, station, timestamp (UTC), sensor, value``; the
    four id/name columns are categoricals of strings (cheap to build; ``.astype(str)`` gives
    the plain string columns that ``Store.read_readings`` returns).
    defect_counts: ``charge_id, n_sticks, <one int column per defect type>`` (config order).
    truth: ``charge_id, stick_id, defect`` with the defect type or ``"ok"`` per stick.
    """

    config: PlantConfig
    readings: pd.DataFrame
    defect_counts: pd.DataFrame
    truth: pd.DataFrame

    @property
    def defect_rate(self) -> float:
        return float(self.failing().mean())

    def failing(self) -> pd.Series:
        """The hidden truth per stick, indexed by (charge_id, stick_id): True where final QC
        found a defect of any type."""
        return self.truth.set_index(["charge_id", "stick_id"])["defect"] != "ok"

    def charges(self, start: int, stop: int) -> SimulatedPlant:
        """Charges ``start..stop-1`` (in simulation order) with their readings, counts and
        truth: one simulated plant split in time (another seed would be another plant)."""
        ids = set(self.defect_counts["charge_id"].iloc[start:stop])

        def keep(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[frame["charge_id"].isin(ids)]

        return SimulatedPlant(
            self.config, keep(self.readings), keep(self.defect_counts), keep(self.truth)
        )

    def defective_shares(self) -> pd.Series:
        """Per charge_id, the share of sticks with a defect of any type, from the defect counts
        (what an LLP learner gets as the bags' proportions)."""
        counts = self.defect_counts.set_index("charge_id")
        return counts[list(self.config.defect_types)].sum(axis=1) / counts["n_sticks"]


def simulate_plant(
    config: PlantConfig,
    n_charges: int,
    *,
    random_state: int | np.random.Generator | None,
    start: pd.Timestamp | str = DEFAULT_START,
    sticks_per_charge: tuple[int, int] = (20, 80),
    defect_rate: float = 0.15,
    strength: float = 3.0,
    missing_rate: float = 0.0,
    first_charge: int = 1,
    defect_stations: Mapping[str, str] | None = None,
    sensor_shift: Mapping[str, float] | None = None,
    charge_effect: float = 0.0,
) -> SimulatedPlant:
    """Simulate ``n_charges`` charges passing the line of ``config`` (see module docstring).

    ``sticks_per_charge`` is an inclusive range; ``defect_rate`` the expected share of
    defective sticks over all defect types; ``strength`` scales how strongly the latent sensor
    levels drive the defects; ``missing_rate`` is the share of (stick, station, sensor) series
    lost to sensor dropouts (no readings at all; empty cells in the wide layout; the truth and
    the counts are unaffected). Charges are numbered from ``first_charge`` (``CH000001``, ...),
    so a later batch of the same plant gets new ids. ``defect_stations`` maps every defect type
    to the station where it arises (separate mechanisms, module docstring); ``None``: the
    shared mechanism. ``sensor_shift`` maps ``"<station>.<sensor>"`` to a shift of that
    sensor's readings in units of the sensor's range / 12 (one latent standard deviation),
    applied after the defects are drawn: a sensor that drifted or was recalibrated, with the
    sticks themselves unchanged (the retraining daemon's drift tests). ``charge_effect``: how
    strongly the alloy batch moves the first station's last sensor and the defect risk of
    the whole charge together (module docstring; 0: off, and no figure of a run without it
    changes). The same ``random_state`` gives identical output.
    """
    _check_arguments(n_charges, sticks_per_charge, defect_rate, missing_rate)
    if not 0.0 <= charge_effect < np.inf:
        raise ValueError(f"charge_effect must be >= 0 and finite, got {charge_effect}")
    arise_at = arising_stations(config, defect_stations)
    rng = np.random.default_rng(random_state)
    start = pd.Timestamp(start)
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    stations = config.stations

    # fixed per-plant structure (drawn first so it does not depend on n_charges)
    loadings = [rng.normal(0.0, 0.5, size=(len(s.sensors), _BATCH_DIMS)) for s in stations]
    trends = [rng.uniform(-1.0, 1.0, size=len(s.sensors)) for s in stations]
    sticks = _Sticks.draw(n_charges, sticks_per_charge, first_charge, rng)
    levels, dwell, dwell_z = _latent_levels(config, loadings, sticks, rng)
    rate = BATCH_RATE + charge_effect
    defect_idx = _defects_and_consequences(
        config, levels, dwell_z, sticks.batch_of, arise_at, strength, defect_rate, rng, rate
    )
    _charge_effect(levels, sticks.batch_of, charge_effect)
    _shift_sensors(config, levels, sensor_shift)
    entry = _entry_times(sticks, dwell)
    readings = _readings(config, levels, trends, entry, dwell, rng, start, sticks, missing_rate)
    truth, defect_counts = _outcome(config, sticks, defect_idx)
    return SimulatedPlant(config, readings, defect_counts, truth)


def _check_arguments(
    n_charges: int, sticks_per_charge: tuple[int, int], defect_rate: float, missing_rate: float
) -> None:
    """A ValueError naming the first argument of :func:`simulate_plant` out of its range."""
    if n_charges < 1:
        raise ValueError(f"n_charges must be >= 1, got {n_charges}")
    lo, hi = sticks_per_charge
    if not 1 <= lo <= hi:
        raise ValueError(f"sticks_per_charge must be (low, high) with 1 <= low <= high: {lo, hi}")
    if not 0.0 < defect_rate < 1.0:
        raise ValueError(f"defect_rate must be in (0, 1), got {defect_rate}")
    if not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate}")


@dataclass(frozen=True, eq=False)
class _Sticks:
    """The charges and their sticks: sizes, each stick's charge and place, the batch effects,
    and the ids."""

    sizes: np.ndarray
    charge_of: np.ndarray
    stick_in_charge: np.ndarray
    batch_of: np.ndarray
    charge_ids: np.ndarray
    stick_ids: np.ndarray

    @classmethod
    def draw(
        cls, n_charges: int, per_charge: tuple[int, int], first: int, rng: np.random.Generator
    ) -> _Sticks:
        lo, hi = per_charge
        sizes = rng.integers(lo, hi + 1, size=n_charges)
        charge_of = np.repeat(np.arange(n_charges), sizes)
        stick_in_charge = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        batch = rng.standard_normal((n_charges, _BATCH_DIMS))
        charge_ids = np.array([f"CH{c + first:06d}" for c in range(n_charges)], dtype=object)
        stick_ids = charge_ids[charge_of] + np.char.mod("-%03d", stick_in_charge + 1).astype(object)
        return cls(sizes, charge_of, stick_in_charge, batch[charge_of], charge_ids, stick_ids)


def _latent_levels(
    config: PlantConfig, loadings: list[np.ndarray], sticks: _Sticks, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Latent sensor levels per stick and station, dwell times and their z-scores."""
    n, n_charges, n_st = len(sticks.charge_of), len(sticks.sizes), len(config.stations)
    charge_of, batch_of = sticks.charge_of, sticks.batch_of
    levels = [
        BATCH_SHIFT * batch_of @ loadings[i].T
        + SETPOINT_SD * rng.standard_normal((n_charges, len(s.sensors)))[charge_of]
        + rng.normal(0.0, STICK_SD, size=(n, len(s.sensors)))
        for i, s in enumerate(config.stations)
    ]
    nominal = np.where(np.arange(n_st) == 0, FIRST_STATION_DWELL_S, STATION_DWELL_S)
    dwell = nominal * np.exp(0.2 * rng.standard_normal((n, n_st)) + 0.1 * batch_of[:, [1]])
    dwell_z = (np.log(dwell / nominal) - 0.0) / np.sqrt(0.2**2 + 0.1**2)
    return levels, dwell, dwell_z


def _defects_and_consequences(
    config: PlantConfig,
    levels: list[np.ndarray],
    dwell_z: np.ndarray,
    batch_of: np.ndarray,
    arise_at: list[int] | None,
    strength: float,
    defect_rate: float,
    rng: np.random.Generator,
    batch_rate: float = BATCH_RATE,
) -> np.ndarray:
    """The latent defect mechanism -> each stick's class index; a defect shows at the stations
    after the one where it arose (``levels`` raised in place)."""
    n_st, middle = len(config.stations), len(config.stations) // 2
    if arise_at is None:
        defect_idx = draw_defects(
            config, levels, dwell_z, batch_of, middle, strength, defect_rate, rng, batch_rate
        )
        arise_of_class = np.full(len(config.classes), middle)
    else:
        defect_idx = draw_separate_defects(
            levels, batch_of, arise_at, strength, defect_rate, rng, batch_rate
        )
        arise_of_class = np.array([n_st, *arise_at])
    for i in range(n_st):
        if levels[i].shape[1]:
            levels[i][:, 0] += 1.2 * ((defect_idx > 0) & (arise_of_class[defect_idx] < i))
    return defect_idx


def _charge_effect(levels: list[np.ndarray], batch_of: np.ndarray, effect: float) -> None:
    """The first station's last sensor moved by ``CHARGE_SHIFT * a_c[0]`` in place (module
    docstring, the charge effect; nothing when ``effect`` is 0)."""
    if effect and levels[0].shape[1]:
        levels[0][:, -1] += CHARGE_SHIFT * batch_of[:, 0]


def _shift_sensors(
    config: PlantConfig, levels: list[np.ndarray], sensor_shift: Mapping[str, float] | None
) -> None:
    """Shift the named sensors' levels in place (``"<station>.<sensor>"``: latent sds)."""
    for key, delta in (sensor_shift or {}).items():
        station_name, _, sensor_name = key.partition(".")
        i = config.station_index(station_name)
        j = config.station(station_name).sensor_names.index(
            config.station(station_name).sensor(sensor_name).name
        )
        levels[i][:, j] += float(delta)


def _entry_times(sticks: _Sticks, dwell: np.ndarray) -> np.ndarray:
    """Seconds from the start at which each stick enters each station: charges back to back,
    sticks enter the first station one after another."""
    charge_len = sticks.sizes * STICK_SPACING_S + CHARGE_GAP_S
    charge_start = np.concatenate([[0.0], np.cumsum(charge_len)[:-1]])
    entry = np.empty(dwell.shape)
    entry[:, 0] = charge_start[sticks.charge_of] + sticks.stick_in_charge * STICK_SPACING_S
    for i in range(1, dwell.shape[1]):
        entry[:, i] = entry[:, i - 1] + dwell[:, i - 1] + TRANSFER_S
    return entry


def _outcome(
    config: PlantConfig, sticks: _Sticks, defect_idx: np.ndarray
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The hidden truth per stick and final QC's defect counts per charge."""
    classes = np.array(config.classes, dtype=object)
    charge_ids, charge_of = sticks.charge_ids, sticks.charge_of
    truth = pd.DataFrame(
        {
            "charge_id": charge_ids[charge_of],
            "stick_id": sticks.stick_ids,
            "defect": classes[defect_idx],
        }
    )
    counts = np.zeros((len(sticks.sizes), len(config.classes)), dtype=np.int64)
    np.add.at(counts, (charge_of, defect_idx), 1)
    defect_counts = pd.DataFrame(counts[:, 1:], columns=list(config.defect_types))
    defect_counts.insert(0, "n_sticks", sticks.sizes.astype(np.int64))
    defect_counts.insert(0, "charge_id", charge_ids)
    return truth, defect_counts


def _readings(
    config: PlantConfig,
    levels: list[np.ndarray],
    trends: list[np.ndarray],
    entry: np.ndarray,
    dwell: np.ndarray,
    rng: np.random.Generator,
    start: pd.Timestamp,
    sticks: _Sticks,
    missing_rate: float,
) -> pd.DataFrame:
    """Long-format readings; vectorized over sticks and readings (loops over stations only)."""
    parts = [
        _station_readings(station, i, levels[i], trends[i], entry, dwell, rng, missing_rate)
        for i, station in enumerate(config.stations)
        if station.sensors
    ]
    stick, t_ms, st, se, values = (np.concatenate(c) for c in zip(*parts, strict=True))
    sensor_offsets = np.cumsum([0] + [len(s.sensors) for s in config.stations])
    flat_sensors = [se.name for s in config.stations for se in s.sensors]
    sensor_codes, sensor_names = pd.factorize(pd.Index(flat_sensors, dtype="str"))
    ts = pd.DatetimeIndex((start.value // 1_000_000 + t_ms).astype("datetime64[ms]"))
    return pd.DataFrame(
        {
            "charge_id": _categorical(sticks.charge_of[stick], sticks.charge_ids),
            "stick_id": _categorical(stick, sticks.stick_ids),
            "station": _categorical(st, config.station_names),
            "timestamp": ts.as_unit("ns").tz_localize("UTC"),
            "sensor": _categorical(sensor_codes[sensor_offsets[st] + se], sensor_names),
            "value": values,
        }
    )


def _station_readings(
    station: Station,
    i: int,
    level: np.ndarray,
    trend: np.ndarray,
    entry: np.ndarray,
    dwell: np.ndarray,
    rng: np.random.Generator,
    missing_rate: float,
) -> tuple[np.ndarray, ...]:
    """The readings of station ``i`` (index ``i`` in the line) as (stick, ms, station, sensor
    index, value) arrays."""
    n, n_sens = len(entry), len(station.sensors)
    lo_r, hi_r = READINGS_PER_STATION
    r = rng.integers(lo_r, hi_r + 1, size=n)
    stick = np.repeat(np.arange(n), r)
    k = np.arange(len(stick)) - np.repeat(np.cumsum(r) - r, r)
    # first reading on arrival, last on departure, the others in between (jittered)
    span = r[stick] - 1
    frac = np.clip((k + rng.uniform(-0.2, 0.2, size=len(stick))) / span, 0.0, 1.0)
    frac = np.where(k == 0, 0.0, np.where(k == span, 1.0, frac))
    t = entry[stick, i] + dwell[stick, i] * frac
    lo = np.array([s.min for s in station.sensors])
    hi = np.array([s.max for s in station.sensors])
    z = level[stick] + trend * (frac[:, None] - 0.5)
    z += 0.35 * rng.standard_normal(z.shape)
    values = np.clip((lo + hi) / 2 + (hi - lo) / 12 * z, lo, hi)
    m = len(stick)
    part = (
        np.repeat(stick, n_sens),
        np.repeat(np.round(t * 1000).astype(np.int64), n_sens),
        np.full(m * n_sens, i),
        np.tile(np.arange(n_sens), m),
        values.ravel(),
    )
    if missing_rate > 0:  # sensor dropouts: whole (stick, sensor) series at this station
        lost = rng.random((n, n_sens)) < missing_rate
        keep = ~lost[part[0], part[3]]
        part = tuple(a[keep] for a in part)
    return part


def _categorical(codes: np.ndarray, names: Sequence[str]) -> pd.Categorical:
    """``names[codes]`` as a categorical of strings (decoding to a string column is ~5x slower)."""
    return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype="str"))


def write_simulation(
    sim: SimulatedPlant,
    folder: str | Path,
    *,
    format: str = "csv",
    layout: str = "long",
) -> dict[str, list[Path] | Path]:
    """Write the simulated plant as a plant would deliver it; returns the written paths.

    ``folder/measurements/``: ``measurements.<ext>`` (long layout) or one
    ``measurements_<station>.<ext>`` per station (wide layout: ``charge_id, stick_id, station,
    timestamp, <sensors of that station>``); ``folder/defects/defects.<ext>``; and, in a
    separate folder so that no connector picks it up, ``folder/truth/truth.<ext>``.
    Returns ``{"measurements": [paths], "defects": path, "truth": path}``.
    """
    if format not in ("csv", "parquet"):
        raise ValueError(f"format must be 'csv' or 'parquet', got {format!r}")
    if layout not in ("long", "wide"):
        raise ValueError(f"layout must be 'long' or 'wide', got {layout!r}")
    folder = Path(folder)
    dirs = {name: folder / name for name in ("measurements", "defects", "truth")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    ext = format

    def write(df: pd.DataFrame, path: Path) -> Path:
        if format == "csv":
            df.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S.%f%z")
        else:
            df.to_parquet(path, index=False)
        return path

    measurements: list[Path] = []
    if layout == "long":
        measurements.append(write(sim.readings, dirs["measurements"] / f"measurements.{ext}"))
    else:
        for station, wide in _wide(sim.readings, sim.config):
            measurements.append(write(wide, dirs["measurements"] / f"measurements_{station}.{ext}"))
    return {
        "measurements": measurements,
        "defects": write(sim.defect_counts, dirs["defects"] / f"defects.{ext}"),
        "truth": write(sim.truth, dirs["truth"] / f"truth.{ext}"),
    }


def _wide(readings: pd.DataFrame, config: PlantConfig):
    """Yield (station, wide frame) per station, its sensors as columns in config order."""
    keys = ["charge_id", "stick_id", "station", "timestamp"]
    for station in config.stations:
        part = readings[readings["station"] == station.name]
        if part.empty:
            continue
        part = part.astype({"sensor": str})
        wide = part.pivot(index=keys, columns="sensor", values="value")
        wide = wide.reindex(columns=list(station.sensor_names))
        wide.columns.name = None
        yield station.name, wide.reset_index()
