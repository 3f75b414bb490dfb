"""Retraining with inspected lock-outs, on the plant whose charges move a furnace sensor and the
risk together (``simulate_plant(charge_effect=...)``, the ``charge`` scenario of
``bench_plant_quality.py``).

Per seed one plant is simulated and split in time: ``--first`` charges (period A), ``--second``
charges (period B), ``--fresh`` charges (the test). At the first station, as ``qcllp train``
trains it (the example config's training section, :func:`qcllp.training.train.
fit_station_model`):

1. ``counts A``: trained on period A's final-QC counts only;
2. that model scores period B; the line locks out every stick at or above its threshold (no
   guard); each locked-out stick is inspected (its result is the simulator's truth); final QC
   counts B's other sticks;
3. ``counts A+B``: retrained on A and B from counts only (B's bags without the lock-outs, as
   :func:`qcllp.station.final_qc.sticks_qc_counted` makes them): what more charges alone bring;
4. ``inspected A+B``: retrained on the same charges with the inspected lock-outs back in their
   bags as known labels (:func:`qcllp.training.inspected.with_inspections`).

Each is measured on the fresh charges against their hidden truth, per 1,000 sticks:
``claimed`` (what training states), ``realized`` (locking out ``p >= threshold`` against
locking out nothing: fail_cost per failing stick locked out minus good_cost per good one),
the share locked out, the precision of the lock-outs (break-even: good_cost / (good_cost +
fail_cost)) and the ROC AUC. Next to them: ``oracle`` -- a logistic regression on the hidden
per-stick labels of A and B locked out at break-even, what labels allow -- and ``nothing``
(0). ``best``: the best threshold in hindsight on each model's fresh probabilities.

    python benchmarks/bench_inspected_training.py --seeds 0 1 2 > /tmp/bit.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plant_quality import CHARGE_EFFECT, best_in_hindsight  # noqa: E402

from qcllp.features import StationFeatures, build_station_features  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.plant.simulate import SimulatedPlant, simulate_plant  # noqa: E402
from qcllp.station.realized import realized_saving_per_1000  # noqa: E402
from qcllp.training.inspected import with_inspections  # noqa: E402
from qcllp.training.train import (  # noqa: E402
    fit_station_model,
    labeled_from_frames,
    station_costs,
    training_plan,
)

CONFIG = ROOT / "plant_config" / "example.yaml"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def truth_of(plant: SimulatedPlant, index: pd.Index) -> np.ndarray:
    """The hidden result per stick of ``index``: ``ok`` or its defect type."""
    return plant.truth.set_index(["charge_id", "stick_id"])["defect"].reindex(index).to_numpy()


def qc_counts(kinds: np.ndarray, bags: np.ndarray, types: list[str]) -> pd.DataFrame:
    """Final QC's counts of these sticks per charge: ``n_sticks`` and one column per type."""
    frame = pd.DataFrame({"charge_id": bags, "kind": kinds})
    counts = pd.crosstab(frame["charge_id"], frame["kind"]).reindex(columns=types, fill_value=0)
    counts.insert(0, "n_sticks", frame.groupby("charge_id").size())
    return counts.astype(np.int64)


def concat(a: StationFeatures, b: StationFeatures) -> StationFeatures:
    """Two feature tables of one station (the first one's imputation)."""
    return StationFeatures(
        a.station, pd.concat([a.X, b.X]), pd.concat([a.bags, b.bags]), a.imputation
    )


def measure(name: str, p: np.ndarray, threshold: float, bad: np.ndarray, costs, claimed) -> dict:
    """One decision on the fresh sticks: realized saving, lock-outs, precision, AUC."""
    locked = p >= threshold
    return {
        "model": name,
        "claimed": claimed,
        "realized": realized_saving_per_1000(p, bad, threshold, costs),
        "locked": float(locked.mean()),
        "precision": float(bad[locked].mean()) if locked.any() else float("nan"),
        "mean_p_locked": float(p[locked].mean()) if locked.any() else float("nan"),
        "auc": float(roc_auc_score(bad, p)),
        "best": best_in_hindsight(p, bad, costs),
    }


def fit(config, station: str, features, counts, labels=None):
    """A station model as ``qcllp train`` fits it, and its fit time."""
    data = labeled_from_frames(config, station, features, counts, labels=labels)
    started = time.perf_counter()
    model = fit_station_model(training_plan(config, station), data, station_costs(config, station))
    return model.model, time.perf_counter() - started, data


def _periods(config, seed: int, args) -> list[tuple]:  # noqa: ANN001
    """Periods A, B and the fresh charges of one simulated plant, each with its station
    features (imputed as period A's)."""
    n_a, n_b = args.first, args.second
    plant = simulate_plant(
        config,
        n_a + n_b + args.fresh,
        random_state=5000 + seed,
        charge_effect=args.charge_effect,
    )
    parts = (plant.charges(0, n_a), plant.charges(n_a, n_a + n_b), plant.charges(n_a + n_b, None))
    first = build_station_features(parts[0].readings, config, args.station)
    return [(parts[0], first)] + [
        (
            part,
            build_station_features(
                part.readings, config, args.station, imputation=first.imputation
            ),
        )
        for part in parts[1:]
    ]


def run_seed(config, seed: int, args) -> list[dict]:
    """Steps 1-4 of the module docstring for one seed; one row per model."""
    station, types = args.station, list(config.defect_types)
    costs = station_costs(config, station)
    (a, fa), (b, fb), (fresh, ff) = _periods(config, seed, args)
    bad = truth_of(fresh, ff.X.index) != "ok"
    counts_a = a.defect_counts.set_index("charge_id")
    first, secs, _ = fit(config, station, fa, counts_a)
    say(f"seed {seed}: counts A fitted in {secs:.0f} s, threshold {first.threshold:.3f}")
    # period B on the line: lock-outs inspected, the rest counted by final QC
    kinds_b = truth_of(b, fb.X.index)
    locked_b = first.failure_probability(fb.X) >= first.threshold
    if not locked_b.any() and args.skip_declined:  # nothing locked out: nothing inspected
        p = first.failure_probability(ff.X)
        claimed = first.metrics.get("expected_saving_per_1000")
        row = measure("counts A", p, first.threshold, bad, costs, claimed)
        return [{"seed": seed, **row, "thr": first.threshold, "inspected": 0}]
    passed = fb.X.index[~locked_b]
    counts_b = qc_counts(kinds_b[~locked_b], fb.bags.to_numpy()[~locked_b], types)
    counts_b = counts_b.reindex(pd.unique(fb.bags.to_numpy()), fill_value=0)
    counts_ab = pd.concat([counts_a, counts_b])
    both = concat(fa, fb)
    counted = fa.X.index.append(passed)
    inspections = pd.DataFrame(
        {
            "charge_id": fb.bags.to_numpy()[locked_b],
            "stick_id": fb.X.index.get_level_values(1)[locked_b],
            "result": kinds_b[locked_b],
        }
    )
    rows, counts_i, labels = with_inspections(both, counted, counts_ab, inspections, types)
    in_qc = both.X.index.isin(counted)
    only = StationFeatures(station, both.X.loc[in_qc], both.bags.loc[in_qc], fa.imputation)
    plain, secs_p, _ = fit(config, station, only, counts_ab)
    say(f"seed {seed}: counts A+B fitted in {secs_p:.0f} s")
    taught, secs_i, _ = fit(config, station, rows, counts_i, labels)
    say(f"seed {seed}: inspected A+B fitted in {secs_i:.0f} s ({int(locked_b.sum())} inspected)")
    out = []
    for name, model in (("counts A", first), ("counts A+B", plain), ("inspected A+B", taught)):
        p = model.failure_probability(ff.X)
        claimed = model.metrics.get("expected_saving_per_1000")
        out.append(
            measure(name, p, model.threshold, bad, costs, claimed) | {"thr": model.threshold}
        )
    out[-1]["inspected"] = int(locked_b.sum())
    out[-1]["inspected_failing"] = int((kinds_b[locked_b] != "ok").sum())
    oracle = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    oracle.fit(both.X, np.r_[truth_of(a, fa.X.index), kinds_b] != "ok")
    p = oracle.predict_proba(ff.X)[:, 1]
    out.append(measure("oracle (labels)", p, costs.bayes_threshold, bad, costs, None))
    out.append({"model": "nothing", "realized": 0.0, "locked": 0.0})
    return [{"seed": seed, **row} for row in out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--station", default="furnace")
    parser.add_argument("--first", type=int, default=100)
    parser.add_argument("--second", type=int, default=100)
    parser.add_argument("--fresh", type=int, default=100)
    parser.add_argument("--charge-effect", type=float, default=CHARGE_EFFECT["charge"])
    parser.add_argument("--rows", default="/tmp/bench_inspected_training.jsonl")
    parser.add_argument(
        "--skip-declined",
        action="store_true",
        help="a seed whose first model locks out nothing in period B ends there",
    )
    args = parser.parse_args(argv)
    config = load_plant_config(CONFIG)
    rows = []
    for seed in args.seeds:
        found = run_seed(config, seed, args)
        with open(args.rows, "a") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in found)
        rows += found
    table = pd.DataFrame(rows)
    print(
        f"# retraining with inspected lock-outs: {args.station}, charge_effect "
        f"{args.charge_effect}, {args.first}+{args.second} charges, {args.fresh} fresh\n"
    )
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.round(3).to_string(index=False))
    print("\n| model | realized median | realized min | precision median | locked median |")
    print("|---|---:|---:|---:|---:|")
    for name, g in table.groupby("model", sort=False):
        print(
            f"| {name} | {g['realized'].median():+.0f} | {g['realized'].min():+.0f} "
            f"| {g['precision'].median():.3f} | {g['locked'].median():.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
