"""KMeansLabeler figures: run time against n (Stolpe & Morik Fig. 3) and accuracy on heart.

(a) Scale: two Gaussians, m = 10 features in [0, 1], bags of 16, k = 6, exhaustive labeling,
    maxgen = 3, psize = 25 (the paper's run-time experiment). Prints fit time per n, the ratio
    to the previous n (linear run time means 10 for a tenfold n) and instance accuracy.
    Targets: 1M rows in <= 60 s, t(1M) / t(100k) <= 12.
(b) Heart (../shared/data/heart.csv): 5-fold CV x 5 repeats, random bags of 2..64, the number
    of clusters chosen by the bag-level grid search on the training bags (no instance labels),
    accuracy on the test fold, next to the pSVM paper's figures for the same protocol.

    python benchmarks/bench_kmeans_labeler.py            # everything
    python benchmarks/bench_kmeans_labeler.py --quick    # n up to 100k, 1 repeat on heart
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold

from qcllp.learn import BagGridSearchCV, BagKFold, KMeansLabeler
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture

HEART = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "heart.csv"
BAG_SIZES = (2, 4, 8, 16, 32, 64)
PAPER = {  # pSVM paper, Table 2 (heart, accuracy %), for reference
    "alter-pSVM, linear": (83.41, 81.80, 79.91, 79.69, 77.80, 76.58),
    "conv-pSVM, linear": (83.33, 80.61, 81.00, 80.72, 79.32, 79.40),
    "InvCal, linear": (81.78, 80.98, 79.45, 76.94, 73.76, 73.04),
    "MeanMap, linear": (81.85, 80.39, 79.63, 79.46, 79.00, 76.06),
}


def bench_scale(sizes: list[int], repeats: int) -> None:
    print("\n(a) run time vs n: m=10, bags of 16, k=6, exhaustive, maxgen=3, psize=25")
    print(f"{'n':>10} {'fit s (median)':>15} {'ratio':>7} {'accuracy':>9} {'evaluations':>12}")
    previous = None
    for n in sizes:
        X, y = make_gaussian_mixture(n, random_state=0)
        bags, shares = bags_from_labels(y, 16, random_state=0)
        times, accuracy, evaluations = [], [], 0
        for seed in range(repeats if n < 1_000_000 else 1):
            model = KMeansLabeler(n_clusters=6, maxgen=3, psize=25, random_state=seed)
            start = time.perf_counter()
            model.fit(X, bags, shares)
            times.append(time.perf_counter() - start)
            accuracy.append(np.mean(model.predict(X) == y))
            evaluations = model.n_evaluations_
        median = statistics.median(times)
        ratio = f"{median / previous:7.2f}" if previous else f"{'':>7}"
        print(f"{n:>10,} {median:>15.2f} {ratio} {np.mean(accuracy):>9.3f} {evaluations:>12}")
        previous = median


def bench_heart(repeats: int) -> None:
    data = pd.read_csv(HEART)
    X = data.drop(columns="label").to_numpy(float)
    y = (data["label"].to_numpy() > 0).astype(int)
    grid = {"n_clusters": [2, 4, 6]}
    print(f"\n(b) heart, 5-fold CV x {repeats}, bag-level grid search over {grid}")
    rows = {}
    for bag_size in BAG_SIZES:
        scores = []
        for repeat in range(repeats):
            folds = StratifiedKFold(5, shuffle=True, random_state=repeat)
            for fold, (train, test) in enumerate(folds.split(X, y)):
                seed = 1000 * repeat + fold
                bags, shares = bags_from_labels(y[train], bag_size, random_state=seed)
                search = BagGridSearchCV(
                    KMeansLabeler(random_state=seed),
                    grid,
                    cv=BagKFold(3, shuffle=True, random_state=seed),
                    n_jobs=2,
                )
                search.fit(X[train], bags, shares)
                scores.append(100 * np.mean(search.predict(X[test]) == y[test]))
        rows[bag_size] = (np.mean(scores), np.std(scores))
    header = "".join(f"{b:>14}" for b in BAG_SIZES)
    print(f"{'method':<24}{header}")
    print(
        f"{'KMeansLabeler (qcllp)':<24}" + "".join(f"{m:>8.2f}±{s:<5.2f}" for m, s in rows.values())
    )
    for name, figures in PAPER.items():
        print(f"{name + ' (paper)':<24}" + "".join(f"{v:>14.2f}" for v in figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 100k, 1 repeat on heart")
    parser.add_argument("--part", choices=["scale", "heart", "all"], default="all")
    parser.add_argument("--repeats", type=int, help="CV repeats on heart (default 5, quick 1)")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    if args.part in ("scale", "all"):
        bench_scale(sizes, repeats=1 if args.quick else 3)
    if args.part in ("heart", "all"):
        bench_heart(repeats=args.repeats or (1 if args.quick else 5))


if __name__ == "__main__":
    main()
