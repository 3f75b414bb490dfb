"""AlterPSVM's start on plant data: the ranking and fit time of each initialisation.

Why ``qcllp train``'s alter-psvm keeps 3 random restarts while ``AlterPSVM()`` starts from
conv-pSVM's labels (issue "Lock-out decisions that pay", item 8). For every scenario, seed and
station a training plant of 100 charges and a separately seeded fresh plant of 60
(``bench_plant_quality.plants``); one any-defect model per start, fixed C = 1, C_p = 10, on
standardized features (as ``qcllp train``); ROC AUC of its decision values on the fresh sticks
against hidden truth, and its fit time.

    python benchmarks/bench_alter_starts.py                        # about 6 minutes
    python benchmarks/bench_alter_starts.py --scenarios sepA --seeds 0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plant_quality import CONFIG, auc, plants, station_case  # noqa: E402

from qcllp.learn.psvm.alter_psvm import AlterPSVM  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.training.methods import Standardized  # noqa: E402

STARTS = {
    "3 random (qcllp train)": {"init": None, "n_restarts": 3},
    "10 random (paper)": {"init": None, "n_restarts": 10},
    "conv (AlterPSVM default)": {"init": "conv", "n_restarts": 1},
    "invcal": {"init": "invcal", "n_restarts": 1},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="*", default=["sepA", "shared"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--stations", nargs="*", default=["cooling", "rolling"])
    args = parser.parse_args(argv)
    config = load_plant_config(CONFIG)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in STARTS}
    print(f"{'scenario':<9}{'seed':>5} {'station':<9}" + "".join(f"{n:>26}" for n in STARTS))
    for scenario in args.scenarios:
        for seed in args.seeds:
            train, test = plants(config, scenario, seed, 100, 60)
            for station in args.stations:
                case = station_case(config, train, test, station)
                data, X_fresh, bad = case.data, case.X_fresh, case.bad_fresh
                cells = []
                for name, start in STARTS.items():
                    model = Standardized(AlterPSVM(C=1.0, C_p=10.0, random_state=0, **start))
                    began = time.perf_counter()
                    model.fit(data.features.X, data.bags, data.proportions)
                    seconds = time.perf_counter() - began
                    score = auc(bad, model.decision_function(X_fresh))
                    results[name].append((score, seconds))
                    cells.append(f"{score:.3f} ({seconds:.1f} s)")
                print(
                    f"{scenario:<9}{seed:>5} {station:<9}" + "".join(f"{c:>26}" for c in cells),
                    flush=True,
                )
    print("\n| start | median fresh AUC | range | seconds per fit |\n|---|---:|---|---:|")
    for name, rows in results.items():
        aucs, secs = [r[0] for r in rows], [r[1] for r in rows]
        print(
            f"| {name} | {statistics.median(aucs):.3f} | {min(aucs):.3f}-{max(aucs):.3f} "
            f"| {min(secs):.1f}-{max(secs):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
