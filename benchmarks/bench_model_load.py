"""What a station scorer's start spends on loading its model: the scorer's own imports, skops'
import (its default trust list: scikit-learn's ``all_estimators``, which imports every public
module of scikit-learn, then a search of every loaded module for each SciPy and NumPy ufunc),
and the model's load from the registry; on the demo plant, each run a fresh process.

Two ways, alternated run by run: ``skops first`` times ``import skops.io`` as a scorer meets
it; ``estimators first`` calls ``all_estimators()`` before it, so that the import's own rest
shows apart. The scorer's start (``bench_scorer_start.py``) is these plus its first step and
HTTP server.

    python benchmarks/bench_model_load.py --runs 5
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from bench_cli import demo_options

WAYS = ("skops first", "estimators first")

# One fresh process: seconds of each part (perf_counter) and the process's CPU at the end.
PROBE = """
import json, resource, sys, time
first = sys.argv[2] == "estimators first"
t = {}
s = time.perf_counter()
import qcllp.service.scorer, qcllp.station.model, qcllp.station.registry
t["scorer imports"] = time.perf_counter() - s
if first:
    s = time.perf_counter()
    from sklearn.utils import all_estimators
    all_estimators()
    t["all_estimators"] = time.perf_counter() - s
s = time.perf_counter()
import skops.io
t["import skops.io"] = time.perf_counter() - s
t["modules"] = len(sys.modules)  # about what its search of the loaded modules walked
from qcllp.plant.config import load_plant_config
from qcllp.station.registry import load_model
from qcllp.store import Store
config = load_plant_config(sys.argv[1])
s = time.perf_counter()
with Store.open(config.database_url) as store:
    load_model(store, station="cooling")
t["load_model"] = time.perf_counter() - s
usage = resource.getrusage(resource.RUSAGE_SELF)
t["CPU"] = usage.ru_utime + usage.ru_stime
t["pytest loaded"] = "pytest" in sys.modules
t["dask loaded"] = "dask" in sys.modules
print(json.dumps(t))
"""


def one_run(config: Path, way: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(config), way],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


def main() -> None:
    """Run each way ``--runs`` times, alternated, and print the medians."""
    opts, config = demo_options(__doc__, runs=5)
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for _ in range(opts.runs):
        for way in WAYS:
            runs[way].append(one_run(config, way))
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, Python "
          f"{platform.python_version()}, {opts.runs} fresh processes each, alternated; "
          "medians in seconds\n")  # fmt: skip
    parts = ["scorer imports", "all_estimators", "import skops.io", "load_model", "CPU"]
    print(f"| way | {' | '.join(parts)} | pytest, dask loaded |")
    print(f"|---|{'---:|' * len(parts)}---|")
    for way, results in runs.items():
        cells = [
            f"{statistics.median(r[p] for r in results):.2f}" if p in results[0] else "-"
            for p in parts
        ]
        loaded = f"{results[0]['pytest loaded']}, {results[0]['dask loaded']}"
        print(f"| {way} | {' | '.join(cells)} | {loaded} |")
    modules = statistics.median(r["modules"] for r in runs[WAYS[0]])
    print(f"\nmodules loaded after import skops.io (median, {WAYS[0]}): {modules:,.0f}")


if __name__ == "__main__":
    main()
