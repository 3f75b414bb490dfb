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

from qcllp.plant.config import PlantConfig

__all__ = ["SimulatedPlant", "simulate_plant", "write_simulation"]

DEFAULT_START = pd.Timestamp("2026-01-05T06:00:00", tz="UTC")
FIRST_STATION_DWELL_S = 1800.0
STATION_DWELL_S = 120.0
TRANSFER_S = 30.0
STICK_SPACING_S = 45.0
CHARGE_GAP_S = 600.0
READINGS_PER_STATION = (3, 8)
_BATCH_DIMS = 2
BATCH_SHIFT = 0.7  # alloy batch -> sensor levels
BATCH_RATE = 0.4  # alloy batch -> defect logit, not visible in any sensor
STICK_SD = 0.8  # stick-to-stick spread of the latent levels
SETPOINT_SD = 0.6  # charge-to-charge spread of the set points, independent per sensor
_DWELL = "@dwell"

# Physical rules for the example plant's names: defect -> ((station, sensor, weight), ...).
# The first two terms also interact (both high together is worse than either alone).
NAMED_RULES: dict[str, tuple[tuple[str, str, float], ...]] = {
    "crack": (("furnace", "temperature", 1.0), ("rolling", "force", 1.0)),
    "bend": (("cooling", "cooling_rate", 1.2), ("rolling", "speed", 0.6)),
    "scale": (("furnace", "oxygen", 1.0), ("furnace", _DWELL, 0.8)),
}


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
    sticks themselves unchanged (the retraining daemon's drift tests). The same
    ``random_state`` gives identical output.
    """
    if n_charges < 1:
        raise ValueError(f"n_charges must be >= 1, got {n_charges}")
    lo, hi = sticks_per_charge
    if not 1 <= lo <= hi:
        raise ValueError(f"sticks_per_charge must be (low, high) with 1 <= low <= high: {lo, hi}")
    if not 0.0 < defect_rate < 1.0:
        raise ValueError(f"defect_rate must be in (0, 1), got {defect_rate}")
    if not 0.0 <= missing_rate < 1.0:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate}")
    arise_at = _arising_stations(config, defect_stations)
    rng = np.random.default_rng(random_state)
    start = pd.Timestamp(start)
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    stations = config.stations
    n_st = len(stations)
    middle = n_st // 2

    # fixed per-plant structure (drawn first so it does not depend on n_charges)
    loadings = [rng.normal(0.0, 0.5, size=(len(s.sensors), _BATCH_DIMS)) for s in stations]
    trends = [rng.uniform(-1.0, 1.0, size=len(s.sensors)) for s in stations]

    # charges and sticks
    sizes = rng.integers(lo, hi + 1, size=n_charges)
    n = int(sizes.sum())
    charge_of = np.repeat(np.arange(n_charges), sizes)
    stick_in_charge = np.arange(n) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    batch = rng.standard_normal((n_charges, _BATCH_DIMS))
    batch_of = batch[charge_of]

    # latent levels and dwell times per stick and station
    levels = [
        BATCH_SHIFT * batch_of @ loadings[i].T
        + SETPOINT_SD * rng.standard_normal((n_charges, len(s.sensors)))[charge_of]
        + rng.normal(0.0, STICK_SD, size=(n, len(s.sensors)))
        for i, s in enumerate(stations)
    ]
    nominal = np.where(np.arange(n_st) == 0, FIRST_STATION_DWELL_S, STATION_DWELL_S)
    dwell = nominal * np.exp(0.2 * rng.standard_normal((n, n_st)) + 0.1 * batch_of[:, [1]])
    dwell_z = (np.log(dwell / nominal) - 0.0) / np.sqrt(0.2**2 + 0.1**2)

    # latent defect mechanism -> truth, and its consequences at later stations
    if arise_at is None:
        defect_idx = _draw_defects(
            config, levels, dwell_z, batch_of, middle, strength, defect_rate, rng
        )
        arise_of_class = np.full(len(config.classes), middle)
    else:
        defect_idx = _draw_separate_defects(levels, batch_of, arise_at, strength, defect_rate, rng)
        arise_of_class = np.array([n_st, *arise_at])
    for i in range(n_st):
        if levels[i].shape[1]:
            levels[i][:, 0] += 1.2 * ((defect_idx > 0) & (arise_of_class[defect_idx] < i))
    for key, delta in (sensor_shift or {}).items():
        station_name, _, sensor_name = key.partition(".")
        i = config.station_index(station_name)
        j = config.station(station_name).sensor_names.index(
            config.station(station_name).sensor(sensor_name).name
        )
        levels[i][:, j] += float(delta)

    # timestamps: charges back to back, sticks enter the first station one after another
    charge_len = sizes * STICK_SPACING_S + CHARGE_GAP_S
    charge_start = np.concatenate([[0.0], np.cumsum(charge_len)[:-1]])
    entry = np.empty((n, n_st))
    entry[:, 0] = charge_start[charge_of] + stick_in_charge * STICK_SPACING_S
    for i in range(1, n_st):
        entry[:, i] = entry[:, i - 1] + dwell[:, i - 1] + TRANSFER_S

    charge_ids = np.array([f"CH{c + first_charge:06d}" for c in range(n_charges)], dtype=object)
    stick_ids = charge_ids[charge_of] + np.char.mod("-%03d", stick_in_charge + 1).astype(object)
    readings = _readings(
        config,
        levels,
        trends,
        entry,
        dwell,
        rng,
        start,
        charge_of,
        charge_ids,
        stick_ids,
        missing_rate,
    )

    classes = np.array(config.classes, dtype=object)
    truth = pd.DataFrame(
        {"charge_id": charge_ids[charge_of], "stick_id": stick_ids, "defect": classes[defect_idx]}
    )
    counts = np.zeros((n_charges, len(config.classes)), dtype=np.int64)
    np.add.at(counts, (charge_of, defect_idx), 1)
    defect_counts = pd.DataFrame(counts[:, 1:], columns=list(config.defect_types))
    defect_counts.insert(0, "n_sticks", sizes.astype(np.int64))
    defect_counts.insert(0, "charge_id", charge_ids)
    return SimulatedPlant(config, readings, defect_counts, truth)


def _rules(config: PlantConfig, middle: int) -> list[tuple[tuple[int, int, float], ...]]:
    """Per defect type, its driver terms as (station index, sensor index or -1 = dwell, weight)."""
    early = config.stations[: middle + 1]

    def resolve(station: str, sensor: str) -> tuple[int, int] | None:
        for i, s in enumerate(early):
            if s.name == station:
                if sensor == _DWELL:
                    return i, -1
                if sensor in s.sensor_names:
                    return i, s.sensor_names.index(sensor)
        return None

    rules = []
    for k, defect in enumerate(config.defect_types):
        named = NAMED_RULES.get(defect, ())
        resolved = [resolve(st, se) for st, se, _ in named]
        if named and all(r is not None for r in resolved):
            rules.append(tuple((*r, w) for r, (_, _, w) in zip(resolved, named, strict=True)))
            continue
        a, b = k % (middle + 1), (k + 1) % (middle + 1)
        sa = 0 if early[a].sensors else -1
        sb = len(early[b].sensors) - 1 if early[b].sensors else -1
        rules.append(((a, sa, 1.0), (b, sb, 0.8)))
    return rules


def _draw_defects(
    config: PlantConfig,
    levels: list[np.ndarray],
    dwell_z: np.ndarray,
    batch_of: np.ndarray,
    middle: int,
    strength: float,
    defect_rate: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Class index per stick (0 = ok, k = defect_types[k-1]); see module docstring, step 4."""
    n = len(batch_of)
    rules = _rules(config, middle)
    contrib = np.zeros((n, len(rules)))
    for k, terms in enumerate(rules):
        zs = [dwell_z[:, st] if se < 0 else levels[st][:, se] for st, se, _ in terms]
        w = np.array([t[2] for t in terms])
        contrib[:, k] = (np.column_stack(zs) @ w) / np.linalg.norm(w)
        if len(zs) >= 2:
            contrib[:, k] += 0.5 * np.maximum(zs[0], 0) * np.maximum(zs[1], 0)
    risk = strength * contrib.sum(axis=1) / np.sqrt(len(rules)) + BATCH_RATE * batch_of[:, 0]
    defective = rng.random(n) < _sigmoid(_intercept(risk, defect_rate) + risk)
    # the type is the dominant contribution, blurred by Gumbel noise
    kind = np.argmax(contrib + 0.5 * rng.gumbel(size=contrib.shape), axis=1)
    return np.where(defective, kind + 1, 0)


def _arising_stations(
    config: PlantConfig, defect_stations: Mapping[str, str] | None
) -> list[int] | None:
    """Station index per defect type (config order), or ``None`` for the shared mechanism."""
    if defect_stations is None:
        return None
    types = list(config.defect_types)
    unknown = sorted(set(defect_stations) - set(types))
    missing = [t for t in types if t not in defect_stations]
    if unknown or missing:
        raise ValueError(
            f"defect_stations must name every defect type ({', '.join(types)}) once; "
            f"unknown {unknown}, missing {missing}"
        )
    at = [config.station_index(defect_stations[t]) for t in types]  # unknown station: error
    empty = [config.station_names[i] for i in at if len(config.stations[i].sensors) == 0]
    if empty:
        raise ValueError(f"station(s) {', '.join(empty)} have no sensors to drive a defect")
    return at


def _intercept(risk: np.ndarray, rate: float) -> float:
    """``b`` with ``mean(sigmoid(b + risk)) = rate`` (bisection)."""
    low, high = -60.0, 20.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (low, mid) if _sigmoid(mid + risk).mean() > rate else (mid, high)
    return (low + high) / 2


def _draw_separate_defects(
    levels: list[np.ndarray],
    batch_of: np.ndarray,
    arise_at: list[int],
    strength: float,
    defect_rate: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Class index per stick under separate per-type mechanisms (module docstring)."""
    n, k_types = len(batch_of), len(arise_at)
    risk = np.empty((n, k_types))
    for k, st in enumerate(arise_at):
        z = levels[st][:, [0, -1]]
        contrib = (z @ np.array([1.0, 0.8])) / np.hypot(1.0, 0.8)
        contrib += 0.5 * np.maximum(z[:, 0], 0) * np.maximum(z[:, 1], 0)
        risk[:, k] = strength * contrib + BATCH_RATE * batch_of[:, 0]
        risk[:, k] += _intercept(risk[:, k], defect_rate / k_types)
    fired = rng.random((n, k_types)) < _sigmoid(risk)
    kind = np.argmax(np.where(fired, risk, -np.inf), axis=1)
    return np.where(fired.any(axis=1), kind + 1, 0)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _readings(
    config: PlantConfig,
    levels: list[np.ndarray],
    trends: list[np.ndarray],
    entry: np.ndarray,
    dwell: np.ndarray,
    rng: np.random.Generator,
    start: pd.Timestamp,
    charge_of: np.ndarray,
    charge_ids: np.ndarray,
    stick_ids: np.ndarray,
    missing_rate: float,
) -> pd.DataFrame:
    """Long-format readings; vectorized over sticks and readings (loops over stations only)."""
    n = len(charge_of)
    lo_r, hi_r = READINGS_PER_STATION
    parts = []
    for i, station in enumerate(config.stations):
        n_sens = len(station.sensors)
        if n_sens == 0:
            continue
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
        z = levels[i][stick] + trends[i] * (frac[:, None] - 0.5)
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
        parts.append(part)
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
