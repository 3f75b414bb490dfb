"""Feature-building time for ~1M readings: one table per station of the example plant.

Simulates the example plant until about ``--readings`` readings exist (default 1,000,000), then
times :func:`qcllp.features.build_station_features` for every station (best of ``--repeat``
runs), once on the simulator's categorical id columns and once on plain string columns (what
``Store.read_readings`` returns). Prints a table; nothing is asserted.

    .venv/bin/python benchmarks/bench_features.py [--readings 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from qcllp.features import build_station_features
from qcllp.plant import load_plant_config, simulate_plant

EXAMPLE = Path(__file__).resolve().parents[1] / "plant_config" / "example.yaml"
READINGS_PER_CHARGE = 3400  # ~50 sticks x 4 stations x 5.5 readings x 3 sensors


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readings", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    config = load_plant_config(EXAMPLE)
    n_charges = max(1, round(args.readings / READINGS_PER_CHARGE))
    sim_s, sim = best_of(1, lambda: simulate_plant(config, n_charges, random_state=0))
    readings = sim.readings
    as_str = readings.astype({c: "str" for c in ["charge_id", "stick_id", "station", "sensor"]})
    print(
        f"example plant: {n_charges} charges, {len(sim.truth):,} sticks, "
        f"{len(readings):,} readings; simulated in {sim_s:.2f} s"
    )
    print()
    header = (
        f"{'station':<14} {'readings used':>13} {'features':>8} "
        f"{'categorical ids':>16} {'string ids':>11} {'readings/s (str)':>17}"
    )
    print(header)
    print("-" * len(header))
    for station in config.station_names:
        names = [s.name for s in config.stations_up_to(station)]
        used = int(readings["station"].isin(names).sum())
        t_cat, f = best_of(
            args.repeat, lambda s=station: build_station_features(readings, config, s)
        )
        t_str, _ = best_of(args.repeat, lambda s=station: build_station_features(as_str, config, s))
        print(
            f"{station:<14} {used:>13,} {f.X.shape[1]:>8} "
            f"{t_cat:>14.3f} s {t_str:>9.3f} s {used / t_str:>17,.0f}"
        )
    print()
    print(
        f"rows per table: {len(f.X):,} sticks; every call gets all {len(readings):,} readings "
        f"and keeps those up to its station; best of {args.repeat} runs"
    )


if __name__ == "__main__":
    main()
