"""KMeansLabeler figures: run time against n (Stolpe & Morik Fig. 3) and accuracy on heart.

(a) Scale: two Gaussians, m = 10 features in [0, 1], bags of 16, k = 6, exhaustive labeling,
    maxgen = 3, psize = 25 (the paper's run-time experiment). Prints fit time per n, the ratio
    to the previous n (linear run time means 10 for a tenfold n) and instance accuracy.
    Targets: 1M rows in <= 60 s, t(1M) / t(100k) <= 12.
(b) Heart (qcllp.datasets.load_heart): 5-fold CV x 5 repeats, random bags of 2..64, the number
    of clusters chosen by the bag-level grid search on the training bags (no instance labels),
    accuracy on the test fold, next to the pSVM paper's figures for the same protocol.
(c) Plant (issue 16 item 7): a training plant of 100 charges and a separately seeded fresh plant
    of 60 (``benchmarks/bench_plant_quality.py``'s ``plants``), one model per defect type
    summed (the pipeline's ``per-type-sum``), ROC AUC of the any-defect probability on the
    fresh sticks against hidden truth. ``before``: the registry's former learner (min-max,
    exhaustive labeling, cluster compositions as probabilities, k = 8); ``after``: its learner
    now, standardized features, k = 16 with greedy labeling, 2 generations and a logistic
    regression trained on the cluster compositions (``final_target="composition"``);
    ``oracle``: logistic regression on the training plant's hidden per-stick labels. Fixed k,
    no grid search (the pipeline's search picks k per type).
    Target: AUC >= 0.80 at cooling and straightening.

    python benchmarks/bench_kmeans_labeler.py            # everything
    python benchmarks/bench_kmeans_labeler.py --quick    # n up to 100k, 1 repeat on heart
    python benchmarks/bench_kmeans_labeler.py --part plant --seeds 0 1 2 --scenarios shared sepA
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parent))

from qcllp.datasets import load_heart  # noqa: E402
from qcllp.learn import BagGridSearchCV, BagKFold, KMeansLabeler, PerDefectClassifier  # noqa: E402
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture  # noqa: E402
from qcllp.training.methods import method  # noqa: E402

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
    data = load_heart()
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


def plant_variants(seed: int, **kmeans: int | None) -> dict[str, KMeansLabeler]:
    """``before``: the method registry's former learner at k = 8; ``after``: its learner now
    (``qcllp.training.methods``) at k = 16, with the ``kmeans_max_rows`` / ``kmeans_max_iter``
    given (``None``: the registry's)."""
    after = method("kmeans-labeler").estimator(seed).set_params(n_clusters=16)
    after.set_params(**{name: value for name, value in kmeans.items() if value is not None})
    return {
        "before": KMeansLabeler(n_clusters=8, maxgen=5, psize=15, random_state=seed),
        "after": after,
    }


def bench_plant(
    scenarios: list[str], seeds: list[int], stations: list[str], **kmeans: int | None
) -> None:
    from bench_plant_quality import CONFIG, plants, station_case

    from qcllp.plant.config import load_plant_config

    config = load_plant_config(CONFIG)
    print("\n(c) plant: per-type-sum, ROC AUC on fresh charges (train 100 charges, fresh 60)")
    print(
        f"{'scenario':<9}{'seed':>5} {'station':<14}{'before':>8}{'after':>8}{'oracle':>8}"
        f"{'before s':>10}{'after s':>9}"
    )
    results = []
    for scenario in scenarios:
        for seed in seeds:
            train, test = plants(config, scenario, seed, 100, 60)
            for station in stations:
                case = station_case(config, train, test, station)
                data, bad_train, bad = case.data, case.bad_train, case.bad_fresh
                row = {}
                for name, learner in plant_variants(seed, **kmeans).items():
                    model = PerDefectClassifier(
                        [(t, clone(learner)) for t in data.type_shares.columns]
                    )
                    started = time.perf_counter()
                    model.fit(data.features.X, data.bags, data.type_shares)
                    row[f"{name} s"] = time.perf_counter() - started
                    row[name] = roc_auc_score(bad, model.predict_proba(case.X_fresh)[:, 1])
                oracle = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
                oracle.fit(data.features.X, bad_train)
                row["oracle"] = roc_auc_score(bad, oracle.predict_proba(case.X_fresh)[:, 1])
                results.append(row)
                print(
                    f"{scenario:<9}{seed:>5} {station:<14}{row['before']:>8.3f}"
                    f"{row['after']:>8.3f}{row['oracle']:>8.3f}{row['before s']:>10.1f}"
                    f"{row['after s']:>9.1f}",
                    flush=True,
                )
    table = pd.DataFrame(results)
    print(
        f"{'median':<29}{table['before'].median():>8.3f}{table['after'].median():>8.3f}"
        f"{table['oracle'].median():>8.3f}{table['before s'].median():>10.1f}"
        f"{table['after s'].median():>9.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 100k, 1 repeat on heart")
    parser.add_argument("--part", choices=["scale", "heart", "plant", "all"], default="all")
    parser.add_argument("--repeats", type=int, help="CV repeats on heart (default 5, quick 1)")
    parser.add_argument("--scenarios", nargs="*", default=["shared"], help="plant scenarios")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1], help="plant seeds")
    parser.add_argument("--stations", nargs="*", default=["cooling", "straightening"])
    for name in ("--kmeans-max-rows", "--kmeans-max-iter"):
        parser.add_argument(name, type=int, help="plant: the after learner's (default: registry's)")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    if args.part in ("scale", "all"):
        bench_scale(sizes, repeats=1 if args.quick else 3)
    if args.part in ("heart", "all"):
        bench_heart(repeats=args.repeats or (1 if args.quick else 5))
    if args.part in ("plant", "all"):
        seeds = args.seeds[:1] if args.quick else args.seeds
        bench_plant(
            args.scenarios,
            seeds,
            args.stations,
            kmeans_max_rows=args.kmeans_max_rows,
            kmeans_max_iter=args.kmeans_max_iter,
        )


if __name__ == "__main__":
    main()
