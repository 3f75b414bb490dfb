"""Lock-out decisions on charges the model never saw: what ``qcllp train`` picks, against truth.

For every scenario, seed and station, a training plant (``--train-charges``, default 100) and a
separately seeded *fresh* plant (``--test-charges``, default 60; new charges, new alloy
batches, its own plant structure) are simulated from ``plant_config/example.yaml``. The station
model is trained exactly as ``qcllp train`` trains it -- :func:`qcllp.training.train.
fit_station_model` with the example config's training section (method, grid, folds, seed, the
any-defect mode) on the training plant's features and defect counts -- and applied to the
fresh plant, whose hidden per-stick truth then measures:

* ``auc``: ROC AUC of the model's failure probabilities (any defect) on the fresh sticks;
  ``auc_<type>``: of the per-type probabilities for that defect type (per-type models only);
* ``lr`` / ``gb``: the ceiling, supervised oracles trained on the training plant's *hidden
  per-stick labels* (logistic regression on standardized features, gradient boosting), any
  defect; ``gb_<type>`` per defect type;
* ``thr`` / ``locked``: the model's lock-out threshold and the share of fresh sticks locked out;
* ``claimed`` [``low``, ``high``]: the saving per 1,000 sticks that training states, with its
  interval (``metrics`` of the model);
* ``realized``: the saving per 1,000 fresh sticks the threshold actually brings against locking
  out nothing (fail_cost per failing stick locked out minus good_cost per good one), with the
  scorer's lock-out guard (:mod:`qcllp.scoring.share_guard`: the fresh sticks decided in
  charge order, lock-outs suspended once the model locks out far more than in training, or
  once final QC's counts, reported :data:`QC_LAG` charges later, show it over-predicts
  failures: :mod:`qcllp.scoring.count_guard`); ``no_count``: the guard without the count
  rule; ``unguarded``: no guard at all;
* ``best``: the best threshold in hindsight (chosen with the fresh truth): what the ranking
  allows.

Scenarios (``--scenarios``): ``shared`` -- the simulator's default, one shared risk decided up to
the middle station; ``sepA`` -- each defect type arises at its own station (crack furnace,
bend rolling, scale cooling); ``sepB`` -- the same, permuted (crack cooling, bend furnace, scale
rolling); ``charge`` -- the shared mechanism with a charge effect the first station sees
(``simulate_plant(charge_effect=3.5)``: the alloy batch moves the furnace gas flow and the
risk of the whole charge together; not run by default, the targets are not stated on it):
the count-trained furnace model ranks charges, not sticks, and its lock-outs fail below
break-even. ``--any-defect`` and ``--method`` override the config (to compare variants).

Targets (issue "Lock-out decisions that pay"): realized >= 0 at every station in every seed;
at the middle station median realized >= 50 % of median best; AUC within 0.05 of the
gradient-boosting oracle at each station and >= 0.90 at the middle station; the realized saving
inside the stated interval in >= 80 % of station x seed cases.

Runs take minutes per seed (the default alter-psvm grid, per defect type): split by
``--scenarios`` / ``--seeds`` and run the parts in the background. ``--cache DIR`` keeps per
case the out-of-fold and fresh probabilities with the counts and truth (``.npz``), for
studying threshold rules without refitting; ``--summary-only`` prints the tables from the
cached case rows (``rows.jsonl`` in the cache) of earlier parts.

    python benchmarks/bench_plant_quality.py --scenarios sepA --seeds 0 1 2 3 4
    python benchmarks/bench_plant_quality.py --summary-only
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qcllp.features import build_station_features  # noqa: E402
from qcllp.learn import PerDefectClassifier  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.plant.simulate import SimulatedPlant, simulate_plant  # noqa: E402
from qcllp.station.guard_bounds import (  # noqa: E402
    COUNT_INTERVAL,
    COUNT_REFERENCE,
    GuardCounts,
    count_excess_path,
    guard_step,
)
from qcllp.station.lockout_rule import LockoutCosts  # noqa: E402
from qcllp.station.model import defect_probability  # noqa: E402
from qcllp.station.realized import realized_saving_per_1000  # noqa: E402
from qcllp.training.train import (  # noqa: E402
    LabeledData,
    fit_station_model,
    labeled_from_frames,
    station_costs,
    training_plan,
)

QC_LAG = 5  # charges between a charge's decision and its final-QC counts (the count rule)
CONFIG = ROOT / "plant_config" / "example.yaml"
SCENARIOS = {
    "shared": None,
    "sepA": {"crack": "furnace", "bend": "rolling", "scale": "cooling"},
    "sepB": {"crack": "cooling", "bend": "furnace", "scale": "rolling"},
    "charge": None,
}
DEFAULT_SCENARIOS = ["shared", "sepA", "sepB"]  # the targets are stated on these
CHARGE_EFFECT = {"charge": 3.5}  # simulate_plant's charge_effect per scenario (default 0)


def replay_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every replay of cached cases takes: ``--cache``, ``--label`` (repeatable)
    and ``--stations`` (:func:`cached_cases`)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", default="/tmp/bench_plant_quality")
    parser.add_argument("--label", action="append", required=True, help="repeatable")
    parser.add_argument("--stations", nargs="*", default=None)
    return parser


def cached_cases(
    cache: Path, labels: list[str], stations: list[str] | None = None
) -> Iterator[tuple[Path, str, int, str]]:
    """(file, scenario, seed, station) of every case ``--cache DIR --label L`` stored, label by
    label (``stations``: only those)."""
    for label in labels:
        pattern = re.compile(rf"^{re.escape(label)}-(\w+)-(\d+)-(\w+)\.npz$")
        for path in sorted(Path(cache).glob(f"{label}-*.npz")):
            match = pattern.match(path.name)
            if match and (not stations or match.group(3) in stations):
                yield path, match.group(1), int(match.group(2)), match.group(3)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plants(config, scenario: str, seed: int, n_train: int, n_test: int):
    stations = SCENARIOS[scenario]
    effect = CHARGE_EFFECT.get(scenario, 0.0)
    train = simulate_plant(
        config,
        n_train,
        random_state=1000 + seed,
        defect_stations=stations,
        charge_effect=effect,
    )
    test = simulate_plant(
        config,
        n_test,
        random_state=2000 + seed,
        first_charge=n_train + 1,
        defect_stations=stations,
        charge_effect=effect,
    )
    return train, test


def best_saving(p: np.ndarray, bad: np.ndarray, costs: LockoutCosts) -> float:
    """The largest realized saving (money) over all thresholds of ``p`` (0: lock out
    nothing), each lock-out valued by ``costs.lockout_value`` (its look at the bay included)."""
    if not len(p):
        return 0.0
    order = np.argsort(-p, kind="stable")
    cumulative = np.cumsum(costs.lockout_value(bad[order].astype(float)))
    last_of_tie = np.r_[p[order][1:] != p[order][:-1], True]  # equal p lock out together
    return float(max(cumulative[last_of_tie].max(initial=0.0), 0.0))


def best_in_hindsight(p: np.ndarray, bad: np.ndarray, costs: LockoutCosts) -> float:
    """:func:`best_saving` per 1,000 sticks."""
    return 1000 * best_saving(p, bad, costs) / len(p)


def auc(truth: np.ndarray, p: np.ndarray) -> float:
    return float(roc_auc_score(truth, p)) if 0 < truth.sum() < len(truth) else float("nan")


def oracles(Xtr, ytr: pd.Series, Xte, yte: pd.Series, types: list[str], seed: int) -> dict:
    """Supervised ceilings trained on the hidden per-stick labels of the training plant."""
    out = {}
    targets = {"": (ytr != "ok", yte != "ok")} | {f"_{t}": (ytr == t, yte == t) for t in types}
    for suffix, (a, b) in targets.items():
        a, b = a.to_numpy(), b.to_numpy()
        gb = HistGradientBoostingClassifier(random_state=seed).fit(Xtr, a)
        out[f"gb{suffix}"] = auc(b, gb.predict_proba(Xte)[:, 1])
        if suffix == "":
            lr = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
            out["lr"] = auc(b, lr.fit(Xtr, a).predict_proba(Xte)[:, 1])
    return out


@dataclass(frozen=True)
class StationCase:
    """One station of a training plant and a fresh plant, as the learner benchmarks see it."""

    data: LabeledData  # the training plant's features, charges and counts (``qcllp train``'s)
    X_fresh: pd.DataFrame  # the fresh plant's features, in the training columns' order
    kind_train: np.ndarray  # hidden truth per training stick: "ok" or its defect type
    kind_fresh: np.ndarray  # the same per fresh stick

    @property
    def bad_train(self) -> np.ndarray:
        return self.kind_train != "ok"

    @property
    def bad_fresh(self) -> np.ndarray:
        return self.kind_fresh != "ok"


def station_case(config, train: SimulatedPlant, test: SimulatedPlant, station: str) -> StationCase:
    """The features and counts ``qcllp train`` would see at ``station`` and the fresh plant's
    features (imputed with the training imputation), with both plants' hidden truth."""
    ftr = build_station_features(train.readings, config, station)
    fte = build_station_features(test.readings, config, station, imputation=ftr.imputation)
    data = labeled_from_frames(config, station, ftr, train.defect_counts.set_index("charge_id"))

    def kinds(plant: SimulatedPlant, index: pd.Index) -> np.ndarray:
        return plant.truth.set_index(["charge_id", "stick_id"])["defect"].reindex(index).to_numpy()

    return StationCase(
        data=data,
        X_fresh=fte.X.reindex(columns=data.features.X.columns),
        kind_train=kinds(train, data.features.X.index),
        kind_fresh=kinds(test, fte.X.index),
    )


def run_case(config, train: SimulatedPlant, test: SimulatedPlant, station: str, args) -> dict:
    """Train one station as ``qcllp train`` would, score the fresh plant, measure."""
    ftr = build_station_features(train.readings, config, station)
    fte = build_station_features(test.readings, config, station, imputation=ftr.imputation)
    counts = train.defect_counts.set_index("charge_id")
    data = labeled_from_frames(config, station, ftr, counts)
    plan = training_plan(config, station, method_name=args.method, any_defect=args.any_defect)
    costs = station_costs(config, station)
    started = time.perf_counter()
    fit = fit_station_model(plan, data, costs)
    fit_s = time.perf_counter() - started
    model = fit.model
    p = model.failure_probability(fte.X)
    kind = test.truth.set_index(["charge_id", "stick_id"])["defect"].reindex(fte.X.index)
    bad = (kind != "ok").to_numpy()
    metrics = model.metrics
    row = {
        "station": station,
        "fit_s": fit_s,
        "auc": auc(bad, p),
        "thr": model.threshold,
        "locked": float(np.mean(p >= model.threshold)),
        "claimed": metrics.get("expected_saving_per_1000"),
        "low": metrics.get("saving_low_per_1000"),
        "high": metrics.get("saving_high_per_1000"),
        "realized": guarded_saving(p, bad, fte.bags.to_numpy(), model, costs, config),
        "no_count": guarded_saving(p, bad, fte.bags.to_numpy(), model, costs, config, None),
        "unguarded": realized_saving_per_1000(p, bad, model.threshold, costs),
        "best": best_in_hindsight(p, bad, costs),
    }
    estimator = getattr(model.estimator, "estimator_", model.estimator)
    if isinstance(estimator, PerDefectClassifier):
        per_type = estimator.defect_proba(estimator_input(model, fte.X))
        for j, t in enumerate(estimator.defect_types_):
            row[f"auc_{t}"] = auc((kind == t).to_numpy(), per_type[:, j])
    row.update(_oracle_figures(config, train, ftr, fte, kind, args))
    if args.cache:
        codes, uniques = pd.factorize(data.bags)
        np.savez_compressed(
            Path(args.cache) / f"{args.case_key}-{station}.npz",
            oof=fit.decision.evaluation.probability,
            oof_raw=fit.decision.raw_probability,
            fresh_raw=defect_probability(model.estimator, model.prepare(fte.X)),
            codes=codes,
            defective=data.defective_counts.reindex(uniques).to_numpy(),
            n_sticks=data.n_sticks.reindex(uniques).to_numpy(),
            fresh=p,
            fresh_codes=pd.factorize(fte.bags.to_numpy())[0],
            truth=bad,
            truth_train=train.truth.set_index(["charge_id", "stick_id"])["defect"]
            .reindex(ftr.X.index)
            .ne("ok")
            .to_numpy(),
            costs=np.array([costs.fail_cost, costs.good_cost]),
        )
    return row


def _oracle_figures(config, train: SimulatedPlant, ftr, fte, kind: pd.Series, args) -> dict:  # noqa: ANN001
    """The label-trained oracles' figures at ``ftr``'s station, fitted once for all variants
    (the plants are the same) and kept in the cache folder."""
    oracle_file = Path(args.cache) / f"oracle-{args.oracle_key}-{ftr.station}.json"
    if oracle_file.exists():
        return json.loads(oracle_file.read_text())
    ytr = train.truth.set_index(["charge_id", "stick_id"])["defect"].reindex(ftr.X.index)
    found = oracles(ftr.X, ytr, fte.X, kind, list(config.defect_types), args.seed_base)
    oracle_file.write_text(json.dumps(found))
    return found


def guarded_saving(p, bad, bags, model, costs, config, qc_lag: int | None = QC_LAG) -> float:
    """The realized saving per 1,000 sticks with the scorer's lock-out guard: the fresh sticks
    decided in charge order, lock-outs suspended from the stick at which the share rules trip,
    and from the charge at which final QC's counts, ``qc_lag`` charges late, trip the count
    rule (``None``: without it)."""
    order = np.argsort(bags, kind="stable")  # charge ids number the charges in line order
    locked, _, _ = guard_step(
        GuardCounts(),
        (p >= model.threshold)[order],
        model.lockout_rate_bound,
        config.scorer.guard_min_sticks,
        model.lockout_excess_bound,
    )
    truth = bad[order]
    if qc_lag is not None:
        codes = pd.factorize(np.asarray(bags)[order])[0]
        interval = config.scorer.count_guard_interval
        locked = count_guarded(locked, p[order], truth, codes, qc_lag, interval)
    saving = costs.fail_cost * np.sum(locked & truth) - costs.good_cost * np.sum(locked & ~truth)
    return float(1000 * saving / len(p))


def count_guarded(
    locked: np.ndarray,
    p: np.ndarray,
    bad: np.ndarray,
    codes: np.ndarray,
    lag: int = QC_LAG,
    interval: float = COUNT_INTERVAL,
    reference: float = COUNT_REFERENCE,
) -> np.ndarray:
    """The scorer's guard on final QC's counts (:mod:`qcllp.scoring.count_guard`), replayed:
    sticks in line order, ``codes`` numbering their charges 0, 1, ... in that order. Final QC
    reports charge ``c``'s failures among its passed sticks (the line acted on the flags)
    before charge ``c + lag`` is decided; once the CUSUM trips on charge ``c``'s counts, the
    lock-outs of charges ``c + lag`` on are suspended. Suspension only ever removes lock-outs
    of later charges, so the counts up to the trip are those of the unsuspended decisions and
    one pass over all charges suffices."""
    passed = ~locked
    h = int(codes.max()) + 1 if len(codes) else 0
    path = count_excess_path(
        np.bincount(codes, np.where(passed, p, 0.0), minlength=h),
        np.bincount(codes, np.where(passed, p * (1 - p), 0.0), minlength=h),
        np.bincount(codes, passed & bad, minlength=h),
        reference=reference,
    )
    over = np.flatnonzero(path > interval)
    if not len(over):
        return locked
    return locked & (codes < over[0] + lag)


def estimator_input(model, X: pd.DataFrame):
    """The features as the model's estimator sees them (standardized inside ``Standardized``)."""
    prepared = model.prepare(X)
    wrapper = model.estimator
    return wrapper._scaled(prepared) if hasattr(wrapper, "_scaled") else prepared


def share_of_best(cases: pd.DataFrame) -> tuple[float, float]:
    """(median best-in-hindsight saving, median realized / that), NaN when nothing pays."""
    best = cases["best"].median()
    return best, cases["realized"].median() / best if best > 0 else float("nan")


def summary(rows: pd.DataFrame, middle: str) -> None:
    """Per scenario and station: medians and the worst seed; then the targets."""
    print("\n## summary (medians over seeds; worst = lowest realized)\n")
    print(
        "| scenario | station | seeds | auc | gb | lr | realized median | realized worst "
        "| best median | realized / best | claimed median | in interval |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (scenario, station), g in rows.groupby(["scenario", "station"], sort=False):
        inside = ((g["realized"] >= g["low"]) & (g["realized"] <= g["high"])).sum()
        best, ratio = share_of_best(g)
        print(
            f"| {scenario} | {station} | {len(g)} | {g['auc'].median():.3f} "
            f"| {g['gb'].median():.3f} | {g['lr'].median():.3f} | {g['realized'].median():+.0f} "
            f"| {g['realized'].min():+.0f} | {best:+.0f} | {ratio:.2f} "
            f"| {g['claimed'].median():+.0f} | {inside}/{len(g)} |"
        )
    print("\n## targets\n")
    never_loses = (rows["realized"] >= -1e-9).mean()
    print(
        f"- realized >= 0: {int((rows['realized'] >= -1e-9).sum())}/{len(rows)} cases "
        f"({'MET' if never_loses == 1 else 'NOT MET'})"
    )
    for scenario, g in rows[rows["station"] == middle].groupby("scenario", sort=False):
        best, share = share_of_best(g)
        print(
            f"- {scenario}, {middle}: median realized {g['realized'].median():+.0f} = "
            f"{share:.0%} of median best {best:+.0f} ({'MET' if share >= 0.5 else 'NOT MET'}); "
            f"median AUC {g['auc'].median():.3f} "
            f"({'MET' if g['auc'].median() >= 0.90 else 'NOT MET'} >= 0.90)"
        )
    gap = rows.groupby(["scenario", "station"])[["gb", "auc"]].median().eval("gb - auc")
    print(
        f"- AUC within 0.05 of the gradient-boosting oracle: {int((gap <= 0.05).sum())}/"
        f"{len(gap)} scenario x station medians (largest gap {gap.max():.3f})"
    )
    inside = (rows["realized"] >= rows["low"]) & (rows["realized"] <= rows["high"])
    print(
        f"- realized inside the stated interval: {int(inside.sum())}/{len(rows)} = "
        f"{inside.mean():.0%} ({'MET' if inside.mean() >= 0.8 else 'NOT MET'} >= 80 %)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="*", default=DEFAULT_SCENARIOS, choices=SCENARIOS)
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--stations", nargs="*", default=None)
    parser.add_argument("--train-charges", type=int, default=100)
    parser.add_argument("--test-charges", type=int, default=60)
    parser.add_argument("--method", default=None, help="default: the config's")
    parser.add_argument("--any-defect", default=None, help="default: the config's")
    parser.add_argument("--cache", default="/tmp/bench_plant_quality")
    parser.add_argument("--label", default="default", help="names this variant in the cache")
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args(argv)
    config = load_plant_config(CONFIG)
    middle = config.station_names[len(config.stations) // 2]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows_file = cache / f"rows-{args.label}.jsonl"
    if not args.summary_only:
        stations = args.stations or list(config.station_names)
        done = set()
        if rows_file.exists():  # a part that was cut off goes on where it stopped
            old = pd.read_json(rows_file, lines=True)
            done = set(zip(old["scenario"], old["seed"], old["station"], strict=True))
        for scenario in args.scenarios:
            for seed in args.seeds:
                train, test = plants(config, scenario, seed, args.train_charges, args.test_charges)
                for station in stations:
                    if (scenario, seed, station) in done:
                        continue
                    run = replace_args(
                        args,
                        seed_base=seed,
                        case_key=f"{args.label}-{scenario}-{seed}",
                        oracle_key=f"{scenario}-{seed}-{args.train_charges}-{args.test_charges}",
                    )
                    row = {
                        "scenario": scenario,
                        "seed": seed,
                        **run_case(config, train, test, station, run),
                    }
                    with open(rows_file, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                    say(
                        f"{scenario} seed {seed} {station:13s} auc {row['auc']:.3f} (gb "
                        f"{row['gb']:.3f}) realized {row['realized']:+7.0f} best "
                        f"{row['best']:+6.0f} claimed {row['claimed']} ({row['fit_s']:.0f} s)"
                    )
    rows = pd.read_json(rows_file, lines=True)
    rows = rows.drop_duplicates(["scenario", "seed", "station"], keep="last")
    print(f"# plant quality: variant `{args.label}` ({len(rows)} cases)\n")
    columns = [c for c in rows.columns if c not in ("fit_s",)]
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(rows[columns].round(3).to_string(index=False))
    summary(rows, middle)
    return 0


def replace_args(args: argparse.Namespace, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


if __name__ == "__main__":
    sys.exit(main())
