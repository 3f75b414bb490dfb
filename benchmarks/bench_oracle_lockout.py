"""What per-stick labels would allow: the lock-out decision of a supervised model, as a ceiling
for the targets of issue "Lock-out decisions that pay".

For every case that ``bench_plant_quality.py --cache DIR --label L`` cached (scenario, seed,
station), the same training and fresh plants are simulated again and a logistic regression is
trained on the training plant's *hidden per-stick labels* (the ``lr`` oracle of
``bench_plant_quality.py``; the simulated defects are close to logistic in the features, and
it ranks at or above gradient boosting at most stations). Two decisions are measured on the
fresh plant, per 1,000 sticks:

* ``labels``: the oracle's own probabilities (calibrated by the labels, not by counts) locked
  out at the break-even probability ``good_cost / (fail_cost + good_cost)``: the cost-optimal
  decision if those probabilities were exact. No guard: what labels alone would bring.
* ``rule``: the oracle's ranking handed to ``qcllp train``'s lock-out rule. The oracle's
  out-of-fold probabilities (5 charge folds) and its fresh probabilities are written to the
  cache as label ``O`` (default ``olr``), with the counts, costs and truth of the cached case,
  so that ``bench_lockout_rules.py --label olr --variants count-guard=5`` replays the product's
  count calibration, bootstrap threshold and guard on a ranking as good as labels make it.

``best`` is the best threshold in hindsight on the oracle's fresh probabilities, as in
``bench_plant_quality.py``. If a supervised model with the labels misses a target, no learner
from counts can be expected to meet it on these plants.

    python benchmarks/bench_oracle_lockout.py --cache /tmp/bpq --label p1 --label p2
    python benchmarks/bench_lockout_rules.py --cache /tmp/bpq --label olr --variants count-guard=5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_plant_quality import (  # noqa: E402
    CONFIG,
    StationCase,
    best_in_hindsight,
    cached_cases,
    plants,
    replay_parser,
    station_case,
)

from qcllp.learn import BagKFold  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.station.lockout_rule import LockoutCosts  # noqa: E402
from qcllp.station.realized import realized_saving_per_1000  # noqa: E402


def oracle() -> object:
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000))


def main(argv: list[str] | None = None) -> int:
    """Fit the oracle on every cached case's plant, save it as a case, print the table."""
    args = _arguments(argv)
    config = load_plant_config(CONFIG)
    rows, plant_pair, seen = [], {}, set()
    for path, scenario, seed, station in cached_cases(args.cache, args.label, args.stations):
        if (scenario, seed, station) in seen:  # the same case under another label
            continue
        seen.add((scenario, seed, station))
        if (scenario, seed) not in plant_pair:
            sizes = (args.train_charges, args.test_charges)
            plant_pair = {(scenario, seed): plants(config, scenario, seed, *sizes)}
        found = station_case(config, *plant_pair[(scenario, seed)], station)
        rows.append(oracle_case(found, path, args, scenario, seed, station))
        print(
            f"{scenario} {seed} {station:13s} labels {rows[-1]['labels']:+6.0f} best "
            f"{rows[-1]['best']:+6.0f}",
            file=sys.stderr,
            flush=True,
        )
    if not rows:
        print(f"no cached cases for {args.label} in {args.cache}")
        return 1
    print_table(pd.DataFrame(rows))
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = replay_parser(__doc__.splitlines()[0])
    parser.add_argument("--out-label", default="olr", help="the cache label of the oracle cases")
    parser.add_argument("--train-charges", type=int, default=100, help="as the cached cases'")
    parser.add_argument("--test-charges", type=int, default=60, help="as the cached cases'")
    return parser.parse_args(argv)


def oracle_case(
    found: StationCase, path: Path, args: argparse.Namespace, scenario: str, seed: int, station: str
) -> dict:
    """The oracle on one case (``found``: :func:`station_case` of the cached case's plants,
    checked to be the same): its out-of-fold and fresh probabilities saved as a case under
    ``--out-label``, and its row (saving at break-even, share locked, best in hindsight)."""
    case = dict(np.load(path))
    y, bad = found.bad_train, found.bad_fresh
    same = (
        np.array_equal(y, case["truth_train"])
        and np.array_equal(bad, case["truth"])
        and np.array_equal(pd.factorize(found.data.bags)[0], case["codes"])
        and len(found.X_fresh) == len(case["fresh_codes"])
    )
    if not same:
        raise SystemExit(f"{path.name}: the simulated plants differ from the cached case")
    X, X_fresh = found.data.features.X.to_numpy(), found.X_fresh.to_numpy()
    oof = np.zeros(len(y))
    for fit_rows, held_out in BagKFold(5, random_state=seed).split(X, groups=found.data.bags):
        model = oracle().fit(X[fit_rows], y[fit_rows])
        oof[held_out] = model.predict_proba(X[held_out])[:, 1]
    p = oracle().fit(X, y).predict_proba(X_fresh)[:, 1]
    np.savez_compressed(
        Path(args.cache) / f"{args.out_label}-{scenario}-{seed}-{station}.npz",
        **(case | {"oof": oof, "oof_raw": oof, "fresh": p, "fresh_raw": p}),
    )
    costs = LockoutCosts(*case["costs"])
    return {
        "scenario": scenario,
        "seed": seed,
        "station": station,
        "labels": realized_saving_per_1000(p, bad, costs.bayes_threshold, costs),
        "locked": float(np.mean(p >= costs.bayes_threshold)),
        "best": best_in_hindsight(p, bad, costs),
    }


def print_table(frame: pd.DataFrame) -> None:
    """The oracle's savings per scenario and station against the best in hindsight."""
    print("\n## lr oracle (hidden labels) at the break-even probability, per 1,000 fresh sticks\n")
    print("| scenario | station | cases | median | worst | losing | median best | median / best |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (scenario, station), g in frame.groupby(["scenario", "station"], sort=False):
        best = g["best"].median()
        print(
            f"| {scenario} | {station} | {len(g)} | {g['labels'].median():+.0f} "
            f"| {g['labels'].min():+.0f} | {int((g['labels'] < -1e-9).sum())} | {best:+.0f} "
            f"| {g['labels'].median() / best if best > 0 else float('nan'):.0%} |"
        )
    losing = int((frame["labels"] < -1e-9).sum())
    print(f"\n- cases losing money with the labels: {losing}/{len(frame)}")


if __name__ == "__main__":
    sys.exit(main())
