"""Every LLP learner of ``qcllp.learn`` side by side: accuracy, ranking and fit time, next to
supervised oracles trained with the hidden per-stick labels (issue "Beyond the seeds", item 7).

(h) ``heart``: the pSVM paper's protocol (Yu et al. 2013, Sect. 6.2) on qcllp.datasets.load_heart:
    random bags of ``--bag-sizes``, 5-fold CV over bags per repeat, each learner fitted at its
    default parameters (``--search``: the bag-level grid search over :data:`GRIDS`) on the
    training bags, accuracy on the held-out rows; mean +- std over repeats, the worst outer
    fold, and fit seconds. Oracles: logistic regression and gradient boosting trained on the
    training rows' true labels (the same folds).
(p) ``plant``: per scenario, seed and station a training plant of 100 charges and a separately
    seeded fresh plant of 60 (``bench_plant_quality.plants``), features as ``qcllp train``
    builds them; every learner as the any-defect decision of the pipeline's default
    (``PerDefectClassifier``: one model per defect type, probabilities summed; ``--any-defect
    direct``: one model on the any-defect shares), standardized features, default
    parameters (``--search``: the bag-level grid search over :data:`GRIDS`, 5 charge folds);
    ROC AUC on the fresh sticks against the hidden truth, and the fit time of all types
    together. Oracles: logistic regression (``lr``) and gradient boosting (``gb``) on
    the training plant's hidden any-defect labels.

Learners: the seed learners (``AlterPSVM`` as ``qcllp train``'s alter-psvm: 3 random restarts,
C_p = 10; ``KMeansLabeler`` as its kmeans-labeler) and the new ones at their defaults, ``-rbf`` /
``-logistic`` / ``-hgb`` naming the feature map or base model, ``EMLLP-psvm`` the hard EM of a
logistic base from alter-pSVM's start. ``CountLR-study``
(:class:`CountLikelihoodLR`, defined here, not in the product) is the maximum-likelihood
logistic regression of the bags' counts, for comparison; it does not count as a new learner.

The new learners' targets: on the plant, the best new learner within 0.02 of ``gb`` at every
station and above every seed learner at the middle station (cooling).

    python benchmarks/bench_learners.py plant --scenarios sepA   # 13 minutes on 2 busy cores
    python benchmarks/bench_learners.py plant --scenarios shared # 13 minutes
    python benchmarks/bench_learners.py heart --repeats 5        # 15 minutes
    python benchmarks/bench_learners.py plant --learners LLPFC-hgb AlterPSVM
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plant_quality import (  # noqa: E402
    CONFIG,
    SCENARIOS,
    auc,
    oracles,
    plants,
    station_case,
)

from qcllp.datasets import load_heart  # noqa: E402
from qcllp.learn import BagGridSearchCV, BagKFold, PerDefectClassifier  # noqa: E402
from qcllp.learn.calibration import _CountLayout  # noqa: E402
from qcllp.learn.core.margin import MarginLLPClassifier  # noqa: E402
from qcllp.learn.core.params import POSITIVE  # noqa: E402
from qcllp.learn.count_kernel import bag_probabilities  # noqa: E402
from qcllp.learn.synthetic import bags_from_labels  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.training.methods import Standardized  # noqa: E402

SEED_LEARNERS = ("AlterPSVM", "InvCal", "MeanMap", "KMeansLabeler")


class CountLikelihoodLR(MarginLLPClassifier):
    """Study learner, not in the product: logistic regression fitted by the Poisson-binomial
    likelihood of the bags' positive counts, ``sum_b log P(k_b | p_i = sigmoid(w x_i + c))``
    minus ``|w|^2 / 2C``, by L-BFGS.

    This is the objective whose EM Sun, Sheldon & O'Connor (2017) run (the exact
    count-conditional posterior in the E-step); EMLLP approximates its posterior by a per-bag
    logit shift and stops after a few rounds. Its gradient by the logits is ``posterior -
    p`` (the EM identity), the posteriors ``p_i P_{-i}(k_b - 1) / P(k_b)`` exact by a forward
    and a backward pass of the count recursion over every bag's rows at once (the layout of
    :class:`qcllp.learn.calibration._CountLayout`, which rounds ``share x size`` to the
    nearest count). Known labels are ignored (the plant has none)."""

    _parameter_constraints = {"C": [POSITIVE], "random_state": ["random_state"]}

    def __init__(self, C: float = 0.03, random_state=None):
        self.C = C
        self.random_state = random_state

    def _fit_binary(self, X, bag_codes, shares, known, random_state):
        sizes = np.bincount(bag_codes, minlength=len(shares))
        layout = _CountLayout(bag_codes, shares * sizes, len(shares))
        n, d = X.shape

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            w = theta[:d]
            p = expit(X @ w + theta[d])
            loglik, posterior = count_posteriors(layout, p)
            r = posterior - p
            return -loglik + w @ w / (2 * self.C), np.r_[w / self.C - X.T @ r, -r.sum()]

        rate = np.clip(np.sum(shares * sizes) / n, 1e-3, 1 - 1e-3)
        start = np.r_[np.zeros(d), np.log(rate / (1 - rate))]
        theta = minimize(loss, start, jac=True, method="L-BFGS-B").x
        return _Linear(theta[:d], theta[d])


class _Linear:
    def __init__(self, coef: np.ndarray, intercept: float):
        self.coef, self.intercept = coef, intercept

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return X @ self.coef + self.intercept


def count_posteriors(layout: _CountLayout, p: np.ndarray) -> tuple[float, np.ndarray]:
    """(sum over bags of log P(k_b), per row P(y_i = 1 | k_b)) for Bernoulli(``p``) rows.

    From the count kernel's P(k_b) and its derivative by each row's p_i: with P_{-i} the
    distribution of the bag's other rows, P = p_i P_{-i}(k - 1) + (1 - p_i) P_{-i}(k) and
    dP/dp_i = P_{-i}(k - 1) - P_{-i}(k), so P_{-i}(k - 1) = P + (1 - p_i) dP/dp_i and the
    posterior p_i P_{-i}(k - 1) / P = p_i (1 + (1 - p_i) dP/dp_i / P). A bag whose count has
    probability 0 (or is outside 0..size) is flat: its rows keep p."""
    value, sorted_grad = bag_probabilities(p[layout.order], layout.starts, layout.k)
    by_row = np.empty(len(p))
    by_row[layout.order] = sorted_grad
    value = np.where(layout.inside, value, 0.0)
    flat = value <= 1e-300
    bag_value = np.where(flat, 1.0, value)[layout.codes]
    posterior = np.where(flat[layout.codes], p, p * (1.0 + (1.0 - p) * by_row / bag_value))
    return float(np.log(np.where(flat, 1e-300, value)).sum()), posterior


def _learner(module: str, name: str, **params) -> Callable[[int], object] | None:
    """A factory of ``qcllp.learn.<module>.<name>(**params, random_state=seed)``, or None when
    that learner is not in this checkout."""
    try:
        cls = getattr(importlib.import_module(f"qcllp.learn.{module}"), name)
    except (ImportError, AttributeError):
        return None
    return lambda seed: cls(random_state=seed, **params)


def learners() -> dict[str, Callable[[int], object]]:
    """Name -> factory(seed) of every learner in this checkout, seed learners first."""
    from qcllp.training.methods import METHODS

    found = {
        "AlterPSVM": _learner("alter_psvm", "AlterPSVM", n_restarts=3, init=None, C_p=10.0),
        "InvCal": _learner("baselines", "InvCal"),
        "MeanMap": _learner("baselines", "MeanMap"),
        "KMeansLabeler": lambda seed: METHODS["kmeans-labeler"].estimator(seed),
        "LMM": _learner("mean_maps", "LaplacianMeanMap"),
        "AMM": _learner("mean_maps", "AlternatingMeanMap"),
        "AMM-rbf": _learner("mean_maps", "AlternatingMeanMap", kernel="rbf"),
        "LLPFC-logistic": _learner("llpfc", "LLPFC", base="logistic"),
        "LLPFC-hgb": _learner("llpfc", "LLPFC", base="hgb"),
        "ProportionBoosting": _learner("proportion_boosting", "ProportionBoosting"),
        "EMLLP-hgb": _learner("em_llp", "EMLLP"),
        "EMLLP-logistic": _learner("em_llp", "EMLLP", base="logistic"),
        "EMLLP-psvm": _learner(
            "em_llp", "EMLLP", base="logistic", variant="hard", init="alter-psvm"
        ),
        "CountLR-study": lambda seed: CountLikelihoodLR(random_state=seed),
    }
    return {name: f for name, f in found.items() if f is not None}


GRIDS: dict[str, dict[str, list]] = {
    "AlterPSVM": {"C": [0.1, 1.0, 10.0], "C_p": [1.0, 10.0, 100.0]},
    "InvCal": {"C_p": [0.1, 1.0, 10.0]},
    "MeanMap": {"reg": [0.1, 1.0, 10.0]},
    "EMLLP-logistic": {"C": [0.1, 1.0]},  # qcllp train's em-llp grid
    "EMLLP-psvm": {"C": [0.1, 1.0]},
}
PLANT_FOLDS = 5  # charge folds of the plant's search, as the example config's training.cv


def searched(name: str, learner: object, folds: int, seed: int) -> object:
    """``learner`` in the bag-level grid search over its :data:`GRIDS` entry (Yu et al. eq. 23
    on held-out bags), if it has one."""
    if name not in GRIDS:
        return learner
    grid = {f"estimator__{k}": v for k, v in GRIDS[name].items()}
    return BagGridSearchCV(learner, grid, cv=folds, random_state=seed)


def standardized(learner: object) -> object:
    """The learner on standardized features (the k-means labeler scales its features itself)."""
    return learner if type(learner).__name__ == "KMeansLabeler" else Standardized(learner)


def heart(args, found: dict[str, Callable]) -> None:
    df = load_heart()
    X = df.drop(columns="label").to_numpy()
    y = (df["label"] == 1).astype(int).to_numpy()
    oracles = {
        "oracle lr": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)),
        "oracle gb": lambda: HistGradientBoostingClassifier(random_state=0),
    }
    names = list(found) + list(oracles)
    acc = {(n, b): [] for n in names for b in args.bag_sizes}
    worst = {(n, b): [] for n in names for b in args.bag_sizes}
    seconds = {n: [] for n in names}
    for repeat in range(args.repeats):
        for bag_size in args.bag_sizes:
            bags, shares = bags_from_labels(y, bag_size, random_state=100 * repeat + bag_size)
            right = {n: np.zeros(len(y), dtype=bool) for n in names}
            folds = {n: [] for n in names}
            for train, test in BagKFold(5, random_state=repeat).split(X, groups=bags):
                train_shares = shares.loc[pd.unique(bags[train])]
                for name in names:
                    started = time.perf_counter()
                    if name in oracles:
                        model = oracles[name]().fit(X[train], y[train])
                    else:
                        model = standardized(found[name](repeat))
                        if args.search:
                            model = searched(name, model, 3, repeat)
                        model.fit(X[train], bags[train], train_shares)
                    seconds[name].append(time.perf_counter() - started)
                    right[name][test] = model.predict(X[test]) == y[test]
                    folds[name].append(100 * right[name][test].mean())
            for name in names:
                acc[(name, bag_size)].append(100 * right[name].mean())
                worst[(name, bag_size)].append(min(folds[name]))
            print(f"  repeat {repeat + 1} bags of {bag_size} done", file=sys.stderr, flush=True)
    print(f"\n## heart, {args.repeats} repeats: accuracy % mean +- std (worst outer fold)\n")
    print("| learner | " + " | ".join(str(b) for b in args.bag_sizes) + " | s per fit |")
    print("|---|" + "---:|" * (len(args.bag_sizes) + 1))
    for name in names:
        cells = [
            f"{np.mean(acc[(name, b)]):.2f} ± {np.std(acc[(name, b)]):.2f} "
            f"({min(worst[(name, b)]):.1f})"
            for b in args.bag_sizes
        ]
        print(f"| {name} | " + " | ".join(cells) + f" | {statistics.median(seconds[name]):.2f} |")


def plant(args, found: dict[str, Callable]) -> None:
    """Every learner of ``found`` on the simulated plants' stations; the tables."""
    config = load_plant_config(CONFIG)
    stations = args.stations or list(config.station_names)
    rows = []
    for scenario in args.scenarios:
        for seed in args.seeds:
            train, test = plants(config, scenario, seed, 100, 60)
            for station in stations:
                case = station_case(config, train, test, station)
                row = {"scenario": scenario, "seed": seed, "station": station}
                rows.append(row | _plant_row(args, found, case, seed))
                row = rows[-1]
                cells = " ".join(f"{n} {row[n]:.3f} ({row[f'{n} s']:.1f} s)" for n in found)
                print(
                    f"{scenario} seed {seed} {station}: gb {row['gb']:.3f} lr {row['lr']:.3f} "
                    f"{cells}",
                    file=sys.stderr,
                    flush=True,
                )
    _plant_tables(pd.DataFrame(rows), list(found), args, config)


def _plant_row(args, found: dict[str, Callable], case, seed: int) -> dict:  # noqa: ANN001
    """One station case: the oracles' and each learner's fresh-charge ROC AUC and fit time."""
    data = case.data
    kinds = pd.Series(case.kind_train), pd.Series(case.kind_fresh)
    row = oracles(data.features.X, kinds[0], case.X_fresh, kinds[1], [], seed)
    for name, factory in found.items():
        learner = standardized(factory(seed))
        if args.search:
            learner = searched(name, learner, PLANT_FOLDS, seed)
        if args.any_defect == "direct":
            model, shares = learner, data.failing_shares
        else:
            types = data.type_shares.columns
            model = PerDefectClassifier([(t, clone(learner)) for t in types])
            shares = data.type_shares
        started = time.perf_counter()
        model.fit(data.features.X, data.bags, shares)
        row[f"{name} s"] = time.perf_counter() - started
        row[name] = auc(case.bad_fresh, model.predict_proba(case.X_fresh)[:, 1])
    return row


def _plant_tables(table: pd.DataFrame, names: list[str], args, config) -> None:  # noqa: ANN001
    """The plant part's tables: medians per scenario and station, fit times, the summary."""
    print(
        f"\n## plant: fresh-charge ROC AUC, any defect ({args.any_defect}; medians over "
        f"{len(args.seeds)} seeds{'; grid search where GRIDS has one' if args.search else ''})\n"
    )
    print("| scenario | station | gb oracle | lr oracle | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * (len(names) + 2))
    for (scenario, station), g in table.groupby(["scenario", "station"], sort=False):
        cells = [f"{g[n].median():.3f}" for n in names]
        print(
            f"| {scenario} | {station} | {g['gb'].median():.3f} | {g['lr'].median():.3f} | "
            + " | ".join(cells)
            + " |"
        )
    print("\n| learner | median fit s (all defect types) |\n|---|---:|")
    for name in names:
        print(f"| {name} | {table[f'{name} s'].median():.1f} |")
    new = [n for n in names if n not in SEED_LEARNERS and not n.endswith("-study")]
    seed_names = [n for n in names if n in SEED_LEARNERS]
    if not new:
        return
    medians = table.groupby(["scenario", "station"], sort=False)[[*names, "gb"]].median()
    best_new = medians[new].max(axis=1)
    gap = medians["gb"] - best_new
    print(
        f"\n- best new learner within 0.02 of gb: {int((gap <= 0.02).sum())}/{len(gap)} "
        f"scenario x station medians (largest gap {gap.max():.3f})"
    )
    if seed_names:
        middle = config.station_names[len(config.stations) // 2]
        at_middle = medians.xs(middle, level="station")
        above = (at_middle[new].max(axis=1) > at_middle[seed_names].max(axis=1)).sum()
        print(
            f"- best new learner above every seed learner at {middle}: "
            f"{int(above)}/{len(at_middle)} scenarios"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=["heart", "plant"])
    parser.add_argument("--learners", nargs="*", default=None, help="default: all")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bag-sizes", nargs="*", type=int, default=[2, 4, 8, 16, 32, 64])
    parser.add_argument(
        "--search", action="store_true", help="the bag-level grid search over GRIDS"
    )
    parser.add_argument("--scenarios", nargs="*", default=["sepA", "shared"], choices=SCENARIOS)
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--stations", nargs="*", default=None)
    parser.add_argument(
        "--any-defect",
        choices=["per-type-sum", "direct"],
        default="per-type-sum",
        help="plant: one model per defect type, summed (qcllp train's default), or one model "
        "on the any-defect shares",
    )
    args = parser.parse_args(argv)
    found = learners()
    if args.learners:
        unknown = set(args.learners) - set(found)
        if unknown:
            parser.error(f"unknown learners {sorted(unknown)}; known: {', '.join(found)}")
        found = {n: f for n, f in found.items() if n in args.learners}
    (heart if args.part == "heart" else plant)(args, found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
