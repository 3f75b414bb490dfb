"""Peak memory of reading a station's training features from the store, in chunks of charges
or all at once (:func:`qcllp.features.station_features`, ``chunk_charges``).

Simulates ``--charges`` charges of the example plant (about 50 sticks and 3,300 readings a
charge), ingests them into a SQLite file, then reads the features of ``--station`` for all of
them in a fresh child process per setting, so each peak resident memory (VmHWM) is that
setting's own. Prints sticks, readings, seconds, peak RSS and the table's own size, and checks
that every setting gives the same table.

    .venv/bin/python benchmarks/bench_feature_memory.py --charges 1000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_ingest import peak_rss_mb  # noqa: E402

EXAMPLE = ROOT / "plant_config" / "example.yaml"


def child(url: str, station: str, chunk: str) -> dict:
    """Read the features in this process; their size, digest and the peak RSS."""
    import pandas as pd

    from qcllp.features import station_features
    from qcllp.plant import load_plant_config
    from qcllp.store import Store

    config = load_plant_config(EXAMPLE)
    with Store.open(url) as store:
        ids = list(store.read_charge_times().index)
        baseline = peak_rss_mb()
        started = time.perf_counter()
        features = station_features(
            store,
            config,
            station,
            charge_ids=ids,
            chunk_charges=None if chunk == "all" else int(chunk),
        )
        seconds = time.perf_counter() - started
    digest = int(pd.util.hash_pandas_object(features.X, index=True).sum() % (2**61))
    return {
        "sticks": len(features.X),
        "seconds": seconds,
        "peak_mb": peak_rss_mb(),
        "baseline_mb": baseline,
        "table_mb": features.X.memory_usage(deep=True).sum() / 2**20,
        "digest": digest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, default=1000)
    parser.add_argument("--station", default="straightening", help="default: all four stations")
    parser.add_argument("--chunks", nargs="*", default=["all", "500", "100"])
    parser.add_argument(
        "--child", nargs=3, metavar=("URL", "STATION", "CHUNK"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return

    from qcllp.ingest import ingest_measurements
    from qcllp.plant import load_plant_config, simulate_plant, write_simulation
    from qcllp.store import Store

    config = load_plant_config(EXAMPLE)
    folder = Path(tempfile.mkdtemp(prefix="qcllp-featmem-"))
    sim = simulate_plant(config, args.charges, random_state=0)
    paths = write_simulation(sim, folder / "data", format="parquet")
    url = f"sqlite:///{folder / 'plant.sqlite'}"
    with Store.open(url) as store:
        for path in paths["measurements"]:
            ingest_measurements(store, config, path)
    n_readings = len(sim.readings)
    del sim
    print(f"{args.charges:,} charges, {n_readings:,} readings in the store; station {args.station}")
    print()
    print(
        "| chunk_charges | sticks | seconds | peak RSS MiB | of which before reading "
        "| table MiB | same table |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    first = None
    for chunk in args.chunks:
        out = subprocess.run(
            [sys.executable, __file__, "--child", url, args.station, chunk],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        first = first or r["digest"]
        print(
            f"| {chunk} | {r['sticks']:,} | {r['seconds']:.1f} | {r['peak_mb']:.0f} "
            f"| {r['baseline_mb']:.0f} | {r['table_mb']:.0f} | {r['digest'] == first} |"
        )


if __name__ == "__main__":
    main()
