"""Training's feature read: the newest 100 charges' table from the raw readings against the
statistics kept per series at ingest (issue 34, item 2: at least 5x faster).

Simulates the example plant (``--charges``, default 300: about 1M readings), ingests it into
a fresh SQLite database (and PostgreSQL with ``--postgres``, a throwaway server like the
tests'), then times, per station, both ways of building the newest ``--newest`` charges'
table, alternating, ``--repeat`` times each:

* raw: ``Store.read_readings`` of those charges and ``build_station_features`` (the path
  before the statistics were kept);
* kept: ``qcllp.features.station_features`` (``Store.read_series_stats`` and
  ``build_station_features_from_stats``).

Prints medians and their ratio, and the largest relative difference of the two tables.

    .venv/bin/python benchmarks/bench_feature_read.py [--charges 300] [--newest 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qcllp.features import build_station_features, station_features  # noqa: E402
from qcllp.ingest.measurements import ingest_measurements  # noqa: E402
from qcllp.plant import load_plant_config, simulate_plant  # noqa: E402
from qcllp.store import Store  # noqa: E402

EXAMPLE = ROOT / "plant_config" / "example.yaml"


def raw_table(store: Store, config, station: str, charges: list[str]):
    names = [s.name for s in config.stations_up_to(station)]
    readings = store.read_readings(stations=names, charge_ids=charges)
    return build_station_features(readings, config, station)


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def largest_difference(a, b) -> float:
    x, y = a.X.to_numpy(), b.X.to_numpy()
    scale = np.abs(x) + np.abs(x).max(axis=0)
    return float(np.max(np.abs(x - y) / np.where(scale > 0, scale, 1.0)))


def measure(store: Store, config, charges: list[str], repeat: int) -> list[dict]:
    rows = []
    for station in config.station_names:
        raw_s, kept_s = [], []
        for _ in range(repeat):
            t, raw = timed(lambda st=station: raw_table(store, config, st, charges))
            raw_s.append(t)
            t, kept = timed(lambda st=station: station_features(store, config, st, charges))
            kept_s.append(t)
        rows.append(
            {
                "station": station,
                "sticks": len(kept.X),
                "raw": statistics.median(raw_s),
                "kept": statistics.median(kept_s),
                "diff": largest_difference(raw, kept),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, default=300)
    parser.add_argument("--newest", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = load_plant_config(EXAMPLE)
    with tempfile.TemporaryDirectory() as folder:
        plant = simulate_plant(config, args.charges, random_state=0)
        path = Path(folder) / "readings.csv"
        plant.readings.to_csv(path, index=False)
        store = Store.open(f"sqlite:///{Path(folder) / 'plant.sqlite'}")
        ingest_measurements(store, config, path)
        charges = sorted(store.read_charge_times().index)[-args.newest :]
        rows = measure(store, config, charges, args.repeat)
        store.close()
    print(
        f"SQLite, {len(plant.readings):,} readings of {args.charges} charges; the newest "
        f"{args.newest}; medians of {args.repeat}\n"
    )
    print(
        "| station | sticks | raw readings s | kept statistics s | speed-up | largest rel. diff |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['station']} | {r['sticks']:,} | {r['raw']:.3f} | {r['kept']:.3f} | "
            f"{r['raw'] / r['kept']:.1f}x | {r['diff']:.1e} |"
        )


if __name__ == "__main__":
    main()
