"""Proportion-SVM family: accuracy on heart, speed against llp-learn, scale to cod-rna.t size.

(a) ``heart``: the pSVM paper's protocol (Yu et al. 2013, Sect. 6.2) on qcllp.datasets.load_heart:
    random bags of 2..64, 5-fold CV over bags x repeats, parameters chosen per outer fold by
    :class:`BagGridSearchCV` (bag-level error, eq. 23) over the paper's grids, accuracy on the
    held-out instances; mean +- std per learner next to the paper's Table 2/4 figures. The
    table is printed again after every repeat. TwinPSVM runs ``--twin-restarts`` (default 1)
    restarts, the first from InvCal's ranking: a twin fit costs about 20 alter-pSVM fits
    (two FISTA-solved duals per alternation), and random twin restarts spread widely.
    ``AlterPSVM`` is the default (one alternation run started from conv-pSVM's labels,
    ``init="conv", n_restarts=1``, the paper's Sect. 7.2 suggestion); ``AlterPSVM-random`` the
    former default, ``--restarts`` random restarts of which the smallest objective wins;
    ``AlterPSVM-biasreg`` the latter with ``regularize_bias=True`` (the bias penalised as
    liblinear and llp-learn do). A second table gives every cell's worst outer fold.
    llp-learn's ``alterSVM`` (with ``--llp-learn-path``) runs on the same splits at the
    (C, C_p) AlterPSVM's search chose in each fold: an implementation comparison at equal
    settings (its own grid search costs 36 times as many fits).
(b) ``speed``: AlterPSVM (linear) against llp-learn's ``alterSVM`` at equal C, C_p and restarts
    on Gaussian mixtures of 8k and 32k rows in bags of 64 (accuracy on an equally large fresh
    test set).
(p) ``protocols``: MeanMap and InvCal (closed form: no restarts, no local optima) under three
    readings of the paper's protocol, next to the paper's figures: ``bags-first`` (the text:
    bags cut from the whole set, 5-fold CV over bags; what (a) runs), ``folds-first`` (5-fold
    CV over instances, bags of nearly equal size cut from each training fold, as the public
    MATLAB pSVM code splits) and ``transductive`` (trained on all bags, scored on the same
    instances). If no reading reproduces the baselines at large bags, the large-bag reference
    figures come from bags more informative than random bags of that size, and no learner's
    gap to them there can be read as a defect of the learner.
(c) ``scale``: AlterPSVM (linear, 10 restarts, C_p = 100: see ``scale``) on a 271,617 x 8
    synthetic set (cod-rna.t's size) with bags of 2^11..2^13, and the time at N = 34k, 68k,
    136k, 272k. The bags are cut from rows ordered by a noisy label so that their shares vary
    (:func:`~qcllp.learn.synthetic.bags_with_varied_shares`).

The synthetic sets have one third positives, as cod-rna.t: with a 50 % prior, random bags of
thousands of rows all have shares of about 0.5, and then nothing in the proportions tells a
model from its label-flipped mirror image (both fit every bag equally well).

llp-learn is not a dependency: install it apart, e.g. ``pip install --no-deps --target
/tmp/llp_learn_pkg llp-learn``, and pass ``--llp-learn-path /tmp/llp_learn_pkg``. Prints tables,
writes nothing. ``--quick`` runs a reduced version in a few minutes. The RBF grid has 27
candidates: one RBF repeat of AlterPSVM, AlterPSVM-random and ConvPSVM (with InvCal and MeanMap)
takes about 45 minutes on two cores with ``--n-jobs 2``; repeats are seeded by their index, so
a run stopped early reports the first repeats of a longer one, and ``--first-repeat K`` runs
repeats K..``--repeats`` alone (the per-repeat lines of both runs make the full table).

    python benchmarks/bench_psvm.py --quick
    python benchmarks/bench_psvm.py heart --kernels linear rbf --repeats 5
    python benchmarks/bench_psvm.py heart --kernels rbf --n-jobs 2 \
        --learners AlterPSVM AlterPSVM-random ConvPSVM InvCal MeanMap
    python benchmarks/bench_psvm.py protocols            # MeanMap, InvCal; about 3 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import KFold

from qcllp.datasets import load_heart
from qcllp.learn.baselines import InvCal, MeanMap
from qcllp.learn.model_selection import BagGridSearchCV, BagKFold
from qcllp.learn.psvm.alter_psvm import AlterPSVM
from qcllp.learn.psvm.twin_psvm import TwinPSVM
from qcllp.learn.synthetic import (
    bags_from_labels,
    bags_with_varied_shares,
    make_gaussian_mixture,
)

BAG_SIZES = (2, 4, 8, 16, 32, 64)
PAPER = {  # accuracy %, heart (pSVM paper Tables 2 and 4; twin paper Table I, 10-fold)
    ("MeanMap", "linear"): (81.85, 80.39, 79.63, 79.46, 79.00, 76.06),
    ("InvCal", "linear"): (81.78, 80.98, 79.45, 76.94, 73.76, 73.04),
    ("AlterPSVM", "linear"): (83.41, 81.80, 79.91, 79.69, 77.80, 76.58),
    ("ConvPSVM", "linear"): (83.33, 80.61, 81.00, 80.72, 79.32, 79.40),
    ("TwinPSVM", "linear"): (None, 87.04, 83.33, 83.33, None, None),
    ("MeanMap", "rbf"): (82.69, 80.80, 79.65, 79.44, 80.03, 77.26),
    ("InvCal", "rbf"): (83.15, 81.06, 80.26, 79.61, 76.36, 73.90),
    ("AlterPSVM", "rbf"): (83.15, 82.89, 81.51, 80.07, 79.10, 78.63),
    ("ConvPSVM", "rbf"): (82.96, 82.20, 81.38, 81.17, 80.94, 78.87),
}


class LLPLearnAlterSVM(BaseEstimator):
    """llp-learn's ``alterSVM`` (linear, hinge, LinearSVC) behind the qcllp LLP contract."""

    def __init__(self, C=1.0, C_p=1.0, num_exec=10, random_state=None):
        self.C = C
        self.C_p = C_p
        self.num_exec = num_exec
        self.random_state = random_state

    def fit(self, X, bags, proportions):
        from llp_learn.alter import alterSVM

        codes = pd.Index(proportions.index).get_indexer(np.asarray(bags))
        self.model_ = alterSVM(
            C=self.C, C_p=self.C_p, num_exec=self.num_exec, random_state=self.random_state
        )
        # it prints non-convergence notes and its LinearSVC warns on every unconverged step
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.model_.fit(np.asarray(X), codes, proportions.to_numpy())
        self.classes_ = np.array([0, 1])
        return self

    def predict(self, X):
        return (self.model_.predict(np.asarray(X)) > 0).astype(int)


def _optional(module: str, name: str):
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


BIAS_PENALISED = "AlterPSVM-biasreg"  # regularize_bias=True, as liblinear / llp-learn
RANDOM_STARTS = "AlterPSVM-random"  # the former default: random restarts, least objective wins
AS_ALTER = "AlterPSVM's"  # grid marker: fit at the (C, C_p) AlterPSVM's search chose in this fold
PAPER_ROW = {BIAS_PENALISED: "AlterPSVM", RANDOM_STARTS: "AlterPSVM"}  # compared with alter-pSVM


def _learners(kernel: str, restarts: int, twin_restarts: int, llp_learn: bool):
    """(name, estimator, grid) per learner; grids are the paper's (Sect. 6.2)."""
    gamma = {"gamma": [0.01, 0.1, 1.0]} if kernel == "rbf" else {}
    psvm = {"C": [0.1, 1.0, 10.0], "C_p": [1.0, 10.0, 100.0], **gamma}
    common = {"kernel": kernel, "random_state": 0}
    rows = [
        ("AlterPSVM", AlterPSVM(**common), psvm),
        (RANDOM_STARTS, AlterPSVM(n_restarts=restarts, init=None, **common), psvm),
        (
            BIAS_PENALISED,
            AlterPSVM(n_restarts=restarts, init=None, regularize_bias=True, **common),
            psvm,
        ),
        ("TwinPSVM", TwinPSVM(n_restarts=twin_restarts, init="invcal", **common), psvm),
        ("InvCal", InvCal(**common), {"C_p": [0.1, 1.0, 10.0], "epsilon": [0.0, 0.01, 0.1]}),
        ("MeanMap", MeanMap(**common), {"reg": [0.1, 1.0, 10.0], **gamma}),
    ]
    conv = _optional("qcllp.learn.psvm.conv_psvm", "ConvPSVM")
    if conv is not None:
        grid = {"C": [0.1, 1.0, 10.0], "epsilon": [0.0, 0.01, 0.1], **gamma}
        rows.append(("ConvPSVM", conv(**common), grid))
    kmeans = _optional("qcllp.learn.cluster.kmeans_labeler", "KMeansLabeler")
    if kmeans is not None and kernel == "linear":
        rows.append(("KMeansLabeler", kmeans(random_state=0), {}))
    if llp_learn and kernel == "linear":
        llp = LLPLearnAlterSVM(num_exec=restarts, random_state=0)
        rows.append(("llp-learn alterSVM", llp, AS_ALTER))
    return rows


def _fit_selected(estimator, grid, X, bags, shares, inner_cv, n_jobs, seed, chosen):
    """The estimator fitted at the parameters its bag grid search picks on (X, bags, shares).

    ``chosen`` maps learner names to the parameters their search picked in this fold; the grid
    marker ``AS_ALTER`` fits at AlterPSVM's choice instead of searching (see ``heart``)."""
    if grid == AS_ALTER:
        return clone(estimator).set_params(**chosen["AlterPSVM"]).fit(X, bags, shares)
    if not grid:
        return estimator.fit(X, bags, shares)
    search = BagGridSearchCV(estimator, grid, cv=inner_cv, n_jobs=n_jobs, random_state=seed)
    return search.fit(X, bags, shares)


def heart(args) -> None:
    df = load_heart()
    X = df.drop(columns="label").to_numpy()
    y = (df["label"] == 1).astype(int).to_numpy()
    for kernel in args.kernels:
        learners = [
            row
            for row in _learners(kernel, args.restarts, args.twin_restarts, args.llp_learn)
            if not args.learners or row[0] in args.learners
        ]
        names = [name for name, _, _ in learners]
        if "llp-learn alterSVM" in names and "AlterPSVM" not in names:
            raise SystemExit("llp-learn alterSVM is fitted at AlterPSVM's choice: run both")
        acc = {(name, b): [] for name, _, _ in learners for b in args.bag_sizes}
        worst = {key: [] for key in acc}  # per repeat, the lowest outer-fold accuracy
        seconds = {name: 0.0 for name, _, _ in learners}
        for repeat in range(args.first_repeat - 1, args.repeats):
            for bag_size in args.bag_sizes:
                bags, shares = bags_from_labels(y, bag_size, random_state=100 * repeat + bag_size)
                folds = BagKFold(5, random_state=repeat).split(X, groups=bags)
                scores = {name: np.zeros(len(y), dtype=bool) for name, _, _ in learners}
                fold_acc = {name: [] for name in scores}
                for train, test in folds:
                    train_shares = shares.loc[pd.unique(bags[train])]
                    chosen = {}
                    for name, estimator, grid in learners:
                        start = time.perf_counter()
                        model = _fit_selected(
                            estimator, grid, X[train], bags[train], train_shares,
                            args.inner_cv, args.n_jobs, repeat, chosen,
                        )  # fmt: skip
                        seconds[name] += time.perf_counter() - start
                        chosen[name] = getattr(model, "best_params_", {})
                        scores[name][test] = model.predict(X[test]) == y[test]
                        fold_acc[name].append(100.0 * scores[name][test].mean())
                for name in scores:
                    acc[(name, bag_size)].append(100.0 * scores[name].mean())
                    worst[(name, bag_size)].append(min(fold_acc[name]))
                progress = ", ".join(f"{n} {100 * s.mean():.2f}" for n, s in scores.items())
                print(
                    f"  [{kernel}] repeat {repeat + 1} bags of {bag_size}: {progress}", flush=True
                )
            print(f"  [{kernel}] repeat {repeat + 1}/{args.repeats} done", flush=True)
            _print_heart_table(kernel, learners, acc, seconds, args, repeat + 1)
            print("worst outer fold (%) over the repeats so far")
            for name, _, _ in learners:
                cells = [f"{min(worst[(name, b)]):6.2f}" for b in args.bag_sizes]
                print(f"{name:<20}" + "".join(f"{c:>22}" for c in cells))


def _print_heart_table(kernel, learners, acc, seconds, args, last_repeat) -> None:
    print(
        f"\n(a) heart, {kernel} kernel: accuracy % on held-out instances, 5-fold CV x "
        f"repeat(s) {args.first_repeat}..{last_repeat}, "
        f"inner {args.inner_cv}-fold bag grid search, "
        f"{args.restarts} restart(s) (TwinPSVM: {args.twin_restarts}, first from InvCal); "
        "paper in brackets"
    )
    header = f"{'learner':<20}" + "".join(f"{b:>22}" for b in args.bag_sizes) + f"{'fit s':>9}"
    print(header)
    for name, _, _ in learners:
        cells = [_cell(acc[(name, b)], name, kernel, b) for b in args.bag_sizes]
        print(f"{name:<20}" + "".join(f"{c:>22}" for c in cells) + f"{seconds[name]:9.1f}")


def _cell(values, name: str, kernel: str, bag_size: int) -> str:
    """``mean±std [paper]`` of accuracies in %; the paper's figure where it has one."""
    paper = PAPER.get((PAPER_ROW.get(name, name), kernel), (None,) * 6)[BAG_SIZES.index(bag_size)]
    ref = f" [{paper:.2f}]" if paper is not None else ""
    return f"{np.mean(values):6.2f}±{np.std(values):4.2f}{ref}"


READINGS = ("bags-first", "folds-first", "transductive")


def _reading_splits(reading: str, y: np.ndarray, bag_size: int, repeat: int):
    """(training rows, their bag ids, test rows) per outer fold under one protocol reading."""
    if reading == "folds-first":
        rng = np.random.RandomState(100 * repeat + bag_size)
        for train, test in KFold(5, shuffle=True, random_state=repeat).split(y):
            n_bags = -(-len(train) // bag_size)
            yield train, rng.permutation(np.arange(len(train)) % n_bags), test
        return
    bags, _ = bags_from_labels(y, bag_size, random_state=100 * repeat + bag_size)
    if reading == "transductive":
        rows = np.arange(len(y))
        yield rows, bags, rows
        return
    for train, test in BagKFold(5, random_state=repeat).split(y, groups=bags):
        yield train, bags[train], test


def protocols(args) -> None:
    df = load_heart()
    X = df.drop(columns="label").to_numpy()
    y = (df["label"] == 1).astype(int).to_numpy()
    wanted = args.learners or ["MeanMap", "InvCal"]
    learners = [row for row in _learners("linear", args.restarts, 1, False) if row[0] in wanted]
    print(
        f"\n(p) heart, linear: accuracy % under three readings of the paper's protocol, "
        f"{args.repeats} repeats, inner {args.inner_cv}-fold bag grid search; paper in brackets"
    )
    print(f"{'learner / reading':<28}" + "".join(f"{b:>22}" for b in args.bag_sizes))
    for name, estimator, grid in learners:
        for reading in READINGS:
            cells = []
            for bag_size in args.bag_sizes:
                acc = []
                for repeat in range(args.repeats):
                    hits = []
                    for train, bags, test in _reading_splits(reading, y, bag_size, repeat):
                        shares = pd.Series(y[train]).groupby(bags).mean()
                        model = _fit_selected(
                            estimator, grid, X[train], bags, shares, args.inner_cv, args.n_jobs,
                            repeat, {},
                        )  # fmt: skip
                        hits.append(model.predict(X[test]) == y[test])
                    acc.append(100.0 * np.concatenate(hits).mean())
                cells.append(_cell(acc, name, "linear", bag_size))
            print(f"{name + ' / ' + reading:<28}" + "".join(f"{c:>22}" for c in cells), flush=True)


def speed(args) -> None:
    print(
        f"\n(b) speed: linear, bags of 64, C=1, C_p=10, {args.speed_restarts} restart(s); "
        "accuracy on a fresh test set of the same size"
    )
    print(f"{'n':>7} {'learner':<20} {'fit s':>9} {'accuracy %':>11}")
    random_starts = AlterPSVM(C=1.0, C_p=10.0, n_restarts=args.speed_restarts, init=None)
    learners = [("AlterPSVM", random_starts)]  # as llp-learn: random restarts only
    if args.llp_learn:
        learners.append(
            ("llp-learn alterSVM", LLPLearnAlterSVM(C=1.0, C_p=10.0, num_exec=args.speed_restarts))
        )
    for n in args.speed_sizes:
        X, y = make_gaussian_mixture(
            2 * n, 10, separation=0.5, positive_share=1 / 3, random_state=n
        )
        bags, shares = bags_from_labels(y[:n], 64, random_state=0)
        times = {}
        for name, estimator in learners:
            estimator.set_params(random_state=0)
            start = time.perf_counter()
            model = estimator.fit(X[:n], bags, shares)
            times[name] = time.perf_counter() - start
            accuracy = 100.0 * (model.predict(X[n:]) == y[n:]).mean()
            print(f"{n:>7} {name:<20} {times[name]:9.2f} {accuracy:11.2f}", flush=True)
        if len(times) == 2:
            print(f"{n:>7} speed-up: {times['llp-learn alterSVM'] / times['AlterPSVM']:.1f}x")


def scale(args) -> None:
    """C_p = 100, the top of the paper's grid: the proportion loss of eq. 4 is a sum over bags,
    the instance loss a sum over rows, so on bags of thousands C_p = 10 makes labeling every row
    negative (w = 0) the minimum of the objective (measured: N = 34k, bags of 2,048: objective
    58.1, all rows negative, bag error 0.34; C_p = 100: bag error 0.08, accuracy 76.7 %). The
    bag-level grid search of (a) picks C_p = 100 there too."""
    n_total = 271_617
    X, y = make_gaussian_mixture(n_total, 8, separation=0.5, positive_share=1 / 3, random_state=0)
    print(
        f"\n(c) scale: AlterPSVM linear, {args.scale_restarts} restarts, n_jobs={args.n_jobs}, "
        "C=1, C_p=100; training accuracy and ROC AUC (a supervised logistic regression reaches "
        "78.5 % / 0.841)"
    )
    print(f"{'N':>8} {'bag size':>9} {'fit s':>8} {'accuracy %':>11} {'AUC':>6}")
    runs = [(n_total, b) for b in args.scale_bag_sizes]
    runs += [(n, args.scale_bag_sizes[0]) for n in args.scale_n]
    for n, bag_size in runs:
        bags, shares = bags_with_varied_shares(y[:n], bag_size)
        model = AlterPSVM(
            C=1.0,
            C_p=100.0,
            n_restarts=args.scale_restarts,
            init=None,
            n_jobs=args.n_jobs,
            random_state=0,
        )
        start = time.perf_counter()
        model.fit(X[:n], bags, shares)
        seconds = time.perf_counter() - start
        accuracy = 100.0 * (model.predict(X[:n]) == y[:n]).mean()
        auc = roc_auc_score(y[:n], model.decision_function(X[:n]))
        print(f"{n:>8} {bag_size:>9} {seconds:8.1f} {accuracy:11.2f} {auc:6.3f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parts = {"heart": heart, "protocols": protocols, "speed": speed, "scale": scale}
    # no choices=: argparse on Python 3.11 checks the empty default against them and fails
    parser.add_argument("parts", nargs="*", help=f"any of {', '.join(parts)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="reduced run, a few minutes")
    parser.add_argument("--kernels", nargs="+", default=["linear", "rbf"])
    parser.add_argument("--learners", nargs="*", default=[], help="subset of learner names")
    parser.add_argument("--bag-sizes", nargs="+", type=int, default=list(BAG_SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--first-repeat",
        type=int,
        default=1,
        help="start at this repeat (1-based): runs the later repeats of a run stopped early",
    )
    parser.add_argument(
        "--inner-cv",
        type=int,
        default=3,
        help="inner bag folds (at bag size 64 heart leaves 4 training bags per outer fold)",
    )
    parser.add_argument("--restarts", type=int, default=10)
    parser.add_argument(
        "--twin-restarts",
        type=int,
        default=1,
        help="TwinPSVM restarts (about 20x AlterPSVM's cost)",
    )
    parser.add_argument("--speed-sizes", nargs="+", type=int, default=[8_000, 32_000])
    parser.add_argument("--speed-restarts", type=int, default=10)
    parser.add_argument("--scale-bag-sizes", nargs="+", type=int, default=[2**11, 2**12, 2**13])
    parser.add_argument("--scale-restarts", type=int, default=10)
    parser.add_argument("--scale-n", nargs="*", type=int, default=[34_000, 68_000, 136_000])
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--llp-learn-path", help="directory holding the llp_learn package")
    args = parser.parse_args(argv)
    if set(args.parts) - set(parts):
        parser.error(
            f"unknown parts {sorted(set(args.parts) - set(parts))}; choose from {list(parts)}"
        )
    if args.llp_learn_path:
        sys.path.insert(0, args.llp_learn_path)
    args.llp_learn = _optional("llp_learn.alter", "alterSVM") is not None
    if args.quick:
        args.kernels, args.bag_sizes, args.repeats = ["linear"], [2, 8, 32], 1
        args.inner_cv, args.restarts, args.speed_restarts = 3, 3, 3
        args.first_repeat = 1
        args.speed_sizes, args.scale_bag_sizes = [8_000], [2**11]
    if not 1 <= args.first_repeat <= args.repeats:
        parser.error(f"--first-repeat {args.first_repeat} is not in 1..{args.repeats} (--repeats)")
    print(f"llp-learn alterSVM available: {args.llp_learn}")
    for part in args.parts or list(parts):
        parts[part](args)


if __name__ == "__main__":
    main()
