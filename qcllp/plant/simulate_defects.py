"""The simulator's defect mechanism (:mod:`qcllp.plant.simulate`, module docstring, steps 4
and 5): which latent levels drive each defect type, and the draw of each stick's class under
the shared mechanism or under separate per-type mechanisms at given stations."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qcllp.plant.config import PlantConfig

BATCH_RATE = 0.4  # alloy batch -> defect logit, not visible in any sensor
_DWELL = "@dwell"

# Physical rules for the example plant's names: defect -> ((station, sensor, weight), ...).
# The first two terms also interact (both high together is worse than either alone).
NAMED_RULES: dict[str, tuple[tuple[str, str, float], ...]] = {
    "crack": (("furnace", "temperature", 1.0), ("rolling", "force", 1.0)),
    "bend": (("cooling", "cooling_rate", 1.2), ("rolling", "speed", 0.6)),
    "scale": (("furnace", "oxygen", 1.0), ("furnace", _DWELL, 0.8)),
}


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


def draw_defects(
    config: PlantConfig,
    levels: list[np.ndarray],
    dwell_z: np.ndarray,
    batch_of: np.ndarray,
    middle: int,
    strength: float,
    defect_rate: float,
    rng: np.random.Generator,
    batch_rate: float = BATCH_RATE,
) -> np.ndarray:
    """Class index per stick (0 = ok, k = defect_types[k-1]); see module docstring, step 4.
    ``batch_rate``: how strongly ``a_c[0]`` moves the defect logit."""
    n = len(batch_of)
    rules = _rules(config, middle)
    contrib = np.zeros((n, len(rules)))
    for k, terms in enumerate(rules):
        zs = [dwell_z[:, st] if se < 0 else levels[st][:, se] for st, se, _ in terms]
        w = np.array([t[2] for t in terms])
        contrib[:, k] = (np.column_stack(zs) @ w) / np.linalg.norm(w)
        if len(zs) >= 2:
            contrib[:, k] += 0.5 * np.maximum(zs[0], 0) * np.maximum(zs[1], 0)
    risk = strength * contrib.sum(axis=1) / np.sqrt(len(rules)) + batch_rate * batch_of[:, 0]
    defective = rng.random(n) < _sigmoid(_intercept(risk, defect_rate) + risk)
    # the type is the dominant contribution, blurred by Gumbel noise
    kind = np.argmax(contrib + 0.5 * rng.gumbel(size=contrib.shape), axis=1)
    return np.where(defective, kind + 1, 0)


def arising_stations(
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


def draw_separate_defects(
    levels: list[np.ndarray],
    batch_of: np.ndarray,
    arise_at: list[int],
    strength: float,
    defect_rate: float,
    rng: np.random.Generator,
    batch_rate: float = BATCH_RATE,
) -> np.ndarray:
    """Class index per stick under separate per-type mechanisms (module docstring);
    ``batch_rate`` as for :func:`draw_defects`."""
    n, k_types = len(batch_of), len(arise_at)
    risk = np.empty((n, k_types))
    for k, st in enumerate(arise_at):
        z = levels[st][:, [0, -1]]
        contrib = (z @ np.array([1.0, 0.8])) / np.hypot(1.0, 0.8)
        contrib += 0.5 * np.maximum(z[:, 0], 0) * np.maximum(z[:, 1], 0)
        risk[:, k] = strength * contrib + batch_rate * batch_of[:, 0]
        risk[:, k] += _intercept(risk[:, k], defect_rate / k_types)
    fired = rng.random((n, k_types)) < _sigmoid(risk)
    kind = np.argmax(np.where(fired, risk, -np.inf), axis=1)
    return np.where(fired.any(axis=1), kind + 1, 0)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))
