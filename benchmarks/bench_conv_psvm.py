"""conv-pSVM and the WellSVM engine: accuracy and fit times (prints tables, asserts nothing).

(1) ``toy``: the pSVM paper's toy set (Sect. 6.1, train = test): accuracy, fit time, cutting-plane
    iterations, linear and rbf.
(2) ``heart``: qcllp.datasets.load_heart, 5-fold CV over instances x ``--repeats``, random bags of
    2..64 formed on the training rows, accuracy on the held-out rows, at *fixed* parameters
    (the grid-searched protocol of the paper, with every learner of the family, is in
    ``bench_psvm.py``); the paper's conv-pSVM figures (Tables 2 and 4) alongside.
(3) ``wellsvm``: semi-supervised (10 labels) and clustering on two Gaussian blobs.
(4) ``scale``: ConvPSVM linear (primal Newton) and rbf (Nystroem, 200 landmarks) on Gaussian
    mixtures of growing N in bags of 64; then plant size, default parameters: 69 features,
    charges of 50 sticks whose shares vary (as the plant's do), N = 5k, 10k, 20k, and random
    bags of 50 (shares near the prior) at 5k; linear and rbf (Nystroem, default 500
    landmarks), features standardized as ``qcllp train`` does; last, the bag-aware grid search
    ``qcllp train --method conv_psvm`` runs (5 folds over C = 0.1, then the refit), linear.

    .venv/bin/python benchmarks/bench_conv_psvm.py [toy heart wellsvm scale] [--repeats 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from sklearn.datasets import make_blobs
from sklearn.model_selection import StratifiedKFold

from qcllp.datasets import load_heart, load_toy
from qcllp.learn.model_selection import BagGridSearchCV, BagKFold
from qcllp.learn.psvm.conv_psvm import ConvPSVM
from qcllp.learn.psvm.wellsvm import WellSVM
from qcllp.learn.synthetic import (
    bags_from_labels,
    bags_with_varied_shares,
    make_gaussian_mixture,
)

BAG_SIZES = (2, 4, 8, 16, 32, 64)
PAPER = {  # conv-pSVM accuracy %, heart, pSVM paper Tables 2 (linear) and 4 (rbf)
    "linear": (83.33, 80.61, 81.00, 80.72, 79.32, 79.40),
    "rbf": (82.96, 82.20, 81.38, 81.17, 80.94, 78.87),
}
HEART_CONFIGS = {
    "linear C=0.1": {"kernel": "linear", "C": 0.1},
    "linear C=0.1 invcal": {"kernel": "linear", "C": 0.1, "init": "invcal"},
    "linear C=1": {"kernel": "linear", "C": 1.0},
    "rbf C=1 gamma=0.1": {"kernel": "rbf", "C": 1.0, "gamma": 0.1},
}


def timed_fit(model, *args):
    started = time.perf_counter()
    model.fit(*args)
    return model, time.perf_counter() - started


def bench_toy() -> None:
    frame = load_toy()
    X = frame[["x1", "x2"]].to_numpy()
    y = (frame["label"].to_numpy() > 0).astype(int)
    bags = frame["bag"].to_numpy()
    shares = pd.Series(y).groupby(bags).mean()
    print("\n(1) toy set, train = test")
    print(f"{'model':<28}{'accuracy':>10}{'fit s':>8}{'iters':>7}")
    for name, params in [
        ("ConvPSVM linear C=1", {"kernel": "linear"}),
        ("ConvPSVM rbf C=1 gamma=1", {"kernel": "rbf", "gamma": 1.0}),
    ]:
        model, seconds = timed_fit(ConvPSVM(**params), X, bags, shares)
        accuracy = (model.predict(X) == y).mean()
        print(f"{name:<28}{accuracy:>10.3f}{seconds:>8.2f}{model.estimators_[0].n_iter_:>7}")


def bench_heart(repeats: int) -> None:
    frame = load_heart()
    X_all = frame.drop(columns="label").to_numpy()
    y_all = (frame["label"].to_numpy() > 0).astype(int)
    results = {name: {b: [] for b in BAG_SIZES} for name in HEART_CONFIGS}
    times = {name: [] for name in HEART_CONFIGS}
    for rep in range(repeats):
        folds = StratifiedKFold(5, shuffle=True, random_state=rep).split(X_all, y_all)
        for fold, (train, test) in enumerate(folds):
            mean, std = X_all[train].mean(axis=0), X_all[train].std(axis=0)
            X_train, X_test = (X_all[train] - mean) / std, (X_all[test] - mean) / std
            for size in BAG_SIZES:
                bags, shares = bags_from_labels(y_all[train], size, random_state=100 * rep + fold)
                for name, params in HEART_CONFIGS.items():
                    model, seconds = timed_fit(
                        ConvPSVM(random_state=rep, **params), X_train, bags, shares
                    )
                    results[name][size].append((model.predict(X_test) == y_all[test]).mean())
                    times[name].append(seconds)
    print(f"\n(2) heart, 5-fold CV x {repeats}, accuracy % on held-out rows, mean +- std")
    print(f"{'model':<26}" + "".join(f"{b:>13}" for b in BAG_SIZES) + f"{'fit s':>8}")
    for name in HEART_CONFIGS:
        cells = "".join(
            f"{100 * np.mean(v):>7.2f}+-{100 * np.std(v):<4.1f}" for v in results[name].values()
        )
        print(f"{'conv ' + name:<26}{cells}{np.mean(times[name]):>8.2f}")
    for kernel, figures in PAPER.items():
        print(f"{'paper conv-pSVM ' + kernel:<26}" + "".join(f"{f:>13.2f}" for f in figures))


def _blobs(n: int, distance: float, seed: int):
    X, y = make_blobs(n, centers=[[-distance / 2, 0], [distance / 2, 0]], random_state=seed)
    return X, 2 * y - 1


def bench_wellsvm() -> None:
    print("\n(3) WellSVM on two Gaussian blobs")
    print(f"{'task':<40}{'accuracy':>10}{'fit s':>8}{'iters':>7}")
    for n in (400, 2000):
        X, y = _blobs(n, 4.0, seed=0)
        rng = np.random.RandomState(0)
        picked = np.r_[
            rng.choice(np.flatnonzero(y == 1), 5, replace=False),
            rng.choice(np.flatnonzero(y == -1), 5, replace=False),
        ]
        partial = np.full(n, np.nan)
        partial[picked] = y[picked]
        for kernel in ("linear", "rbf"):
            model, seconds = timed_fit(WellSVM(kernel=kernel, n_components=300), X, partial)
            accuracy = (model.labels_ == y)[np.isnan(partial)].mean()
            label = f"semi-supervised {kernel} N={n}, 10 labels"
            print(f"{label:<40}{accuracy:>10.3f}{seconds:>8.2f}{model.n_iter_:>7}")
        Xc, yc = _blobs(n, 8.0, seed=1)
        for kernel in ("linear", "rbf"):
            model, seconds = timed_fit(
                WellSVM(task="clustering", kernel=kernel, n_components=300), Xc
            )
            agreement = (model.labels_ == yc).mean()
            label = f"clustering {kernel} N={n}"
            accuracy = max(agreement, 1 - agreement)
            print(f"{label:<40}{accuracy:>10.3f}{seconds:>8.2f}{model.n_iter_:>7}")


def bench_scale() -> None:
    print("\n(4) ConvPSVM on Gaussian mixtures (8 features), bags of 64, train = test")
    print(f"{'model':<34}{'N':>8}{'accuracy':>10}{'fit s':>8}{'iters':>7}")
    for kernel, sizes in (("linear", (2_000, 8_000, 32_000)), ("rbf", (2_000, 8_000))):
        for n in sizes:
            X, y = make_gaussian_mixture(n, 8, separation=1.5, random_state=0)
            X = (X - X.mean(axis=0)) / X.std(axis=0)
            bags, shares = bags_from_labels(y, 64, random_state=0)
            params = {"kernel": kernel, "n_components": 200, "random_state": 0}
            model, seconds = timed_fit(ConvPSVM(**params), X, bags, shares)
            accuracy = (model.predict(X) == y).mean()
            name = f"ConvPSVM {kernel}" + (" (Nystroem 200)" if kernel == "rbf" else "")
            iters = model.estimators_[0].n_iter_
            print(f"{name:<34}{n:>8}{accuracy:>10.3f}{seconds:>8.2f}{iters:>7}")
    print("\n    plant size: 69 features (Bayes accuracy ~0.89), bags of 50, default parameters")
    print(f"{'model':<34}{'bags':>8}{'N':>8}{'accuracy':>10}{'fit s':>8}{'iters':>7}")
    runs = [("varied", n) for n in (5_000, 10_000, 20_000)] + [("random", 5_000)]
    for kernel in ("linear", "rbf"):
        for kind, n in runs:
            X, y, bags, shares = _plant_size(n, kind)
            model, seconds = timed_fit(ConvPSVM(kernel=kernel, random_state=0), X, bags, shares)
            accuracy = (model.predict(X) == y).mean()
            name = f"ConvPSVM {kernel}" + (" (Nystroem 500)" if kernel == "rbf" else "")
            iters = model.estimators_[0].n_iter_
            print(
                f"{name:<34}{kind:>8}{n:>8}{accuracy:>10.3f}{seconds:>8.2f}{iters:>7}", flush=True
            )
    X, y, bags, shares = _plant_size(5_000, "varied")
    search = BagGridSearchCV(
        ConvPSVM(random_state=0), {"C": [0.1]}, cv=BagKFold(5, random_state=0), random_state=0
    )
    search, seconds = timed_fit(search, X, bags, shares)
    accuracy = (search.predict(X) == y).mean()
    name = "grid search as qcllp train"
    print(f"{name:<34}{'varied':>8}{5_000:>8}{accuracy:>10.3f}{seconds:>8.2f}{'5+1':>7}")


def _plant_size(n: int, kind: str):
    """69 standardized features, 30 % positives (Bayes accuracy ~0.89), bags of 50: charges
    with varied shares (``kind="varied"``) or random bags."""
    X, y = make_gaussian_mixture(n, 69, separation=0.3, positive_share=0.3, random_state=0)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    if kind == "varied":
        return (X, y, *bags_with_varied_shares(y, 50))
    return (X, y, *bags_from_labels(y, 50, random_state=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = ["toy", "heart", "wellsvm", "scale"]
    # no choices=: Python 3.11's argparse rejects an empty list against them
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(parts)} (default: all)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    if set(args.parts) - set(parts):
        parser.error(f"unknown parts {sorted(set(args.parts) - set(parts))}; choose from {parts}")
    args.parts = args.parts or parts
    if "toy" in args.parts:
        bench_toy()
    if "heart" in args.parts:
        bench_heart(args.repeats)
    if "wellsvm" in args.parts:
        bench_wellsvm()
    if "scale" in args.parts:
        bench_scale()


if __name__ == "__main__":
    main()
