"""Peak memory and time of training one station on a large labeled set, with and without the
subsample rule (``training.max_sticks``, :func:`qcllp.training.train.subsample_charges`).

A synthetic station: charges of 40-60 sticks (about 50), 30 features per stick (standard
normal, a few correlated), and the example plant's three defect types drawn per stick from a
known multinomial-logistic truth (each type driven by its own three features, about 4.5 % of
sticks each, 13.7 % any); final QC reports only the per-charge counts. Every case runs in a
fresh child process, so each peak resident memory (VmHWM) is the case's own:

* ``plan`` cases train exactly as ``qcllp train`` does by default: ``fit_station_model`` with
  the example config's plan (em-llp with its 2-point grid over 5 charge folds, one model per
  defect type, the bootstrap lock-out rule). With ``--rule`` the charges are first chosen by
  ``subsample_charges`` from the per-charge counts alone, and only the kept charges' features
  are generated -- as ``labeled_data`` reads only the kept charges' features from the store;
* ``emfit`` cases: one em-llp fit (the grid's first point, one defect type, no search, no
  folds) on all sticks: the least the default training would cost without the rule.

Prints sticks, charges, seconds, peak RSS MiB, the feature table's MiB and, for plan cases,
the ROC AUC of the model's failure probability on a fresh draw of 200,000 sticks against
their known labels (the truth's own probabilities reach 0.772 there: the Bayes limit).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_large_training.py \\
        --cases plan:100000 plan:500000 plan:5000000:rule emfit:5000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_ingest import peak_rss_mb  # noqa: E402

EXAMPLE = ROOT / "plant_config" / "example.yaml"
N_FEATURES = 30
STATION = "straightening"
SEED = 0


def charge_sizes(n_sticks: int, seed: int):
    """Per-charge stick counts (40-60) summing to ``n_sticks``, indexed by charge id."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    sizes = rng.integers(40, 61, size=n_sticks // 40 + 1)
    cut = np.searchsorted(np.cumsum(sizes), n_sticks)
    sizes = sizes[: cut + 1].copy()
    sizes[-1] -= sizes.sum() - n_sticks
    if sizes[-1] < 1:
        sizes = sizes[:-1]
    ids = pd.Index([f"C{i:07d}" for i in range(len(sizes))], name="charge_id")
    return pd.Series(sizes, index=ids, name="n_sticks")


def truth_weights(types: list[str]):
    """The known multinomial-logistic truth: per type, weights on its own 3 features."""
    import numpy as np

    W = np.zeros((N_FEATURES, len(types)))
    for k in range(len(types)):
        W[3 * k : 3 * k + 3, k] = [1.2, -0.8, 0.6]
    return W, np.full(len(types), -4.0)


def sticks(sizes, types: list[str], seed: int):
    """Features, bags and the per-charge counts of the charges in ``sizes`` (vectorized).

    The draw of a charge depends on the seed only, not on which other charges are asked
    for, through one generator per block of rows: simple and enough here."""
    import numpy as np
    import pandas as pd

    from qcllp.features import StationFeatures

    rng = np.random.default_rng(seed)
    n = int(sizes.sum())
    charge_of_row = np.repeat(np.arange(len(sizes)), sizes.to_numpy())
    X = rng.standard_normal((n, N_FEATURES))
    X[:, N_FEATURES // 2 :] += 0.5 * X[:, : N_FEATURES - N_FEATURES // 2]  # correlated pairs
    X += 0.3 * rng.standard_normal((len(sizes), N_FEATURES))[charge_of_row]  # charge effect
    W, b = truth_weights(types)
    logits = np.column_stack([np.zeros(n), X @ W + b])  # ok, then the types
    g = logits - np.log(-np.log(rng.random(logits.shape)))  # Gumbel-max: one class per stick
    label = g.argmax(axis=1)
    del g, logits
    counts = pd.DataFrame(
        {
            t: np.bincount(charge_of_row, weights=label == k + 1, minlength=len(sizes))
            for k, t in enumerate(types)
        },
        index=sizes.index,
    ).astype(np.int64)
    counts.insert(0, "n_sticks", sizes.to_numpy())
    charge = sizes.index.to_numpy()[charge_of_row]
    starts = np.cumsum(sizes.to_numpy()) - sizes.to_numpy()
    index = pd.MultiIndex.from_arrays(
        [charge, np.arange(n) - starts[charge_of_row]], names=["charge_id", "stick_id"]
    )
    columns = [f"{STATION}.f{j:02d}" for j in range(N_FEATURES)]
    frame = pd.DataFrame(X, index=index, columns=columns)
    del X
    bags = pd.Series(charge, index=index, name="charge_id")
    features = StationFeatures(STATION, frame, bags, {c: 0.0 for c in columns})
    return features, counts, label


def child(kind: str, n_sticks: int, rule: bool) -> dict:
    from sklearn.metrics import roc_auc_score

    from qcllp.plant import load_plant_config
    from qcllp.training.train import (
        fit_station_model,
        labeled_from_frames,
        station_costs,
        subsample_charges,
        training_plan,
    )

    config = load_plant_config(EXAMPLE)
    types = list(config.defect_types)
    baseline = peak_rss_mb()
    started = time.perf_counter()
    sizes = charge_sizes(n_sticks, SEED)
    labeled_charges = len(sizes)
    if rule:  # chosen from the counts alone, before any feature exists (labeled_data)
        kept = subsample_charges(sizes, config.training.max_sticks, config.training.random_state)
        sizes = sizes.loc[kept]
    features, counts, _ = sticks(sizes, types, SEED)
    table_mb = features.X.memory_usage(deep=True).sum() / 2**20
    plan = training_plan(config, STATION)
    data = labeled_from_frames(config, STATION, features, counts)
    generated = time.perf_counter() - started
    out = {
        "kind": kind,
        "labeled_sticks": n_sticks,
        "labeled_charges": labeled_charges,
        "sticks": len(features.X),
        "charges": data.n_charges,
        "rule": rule,
        "baseline_mb": baseline,
        "table_mb": table_mb,
        "generate_s": generated,
    }
    del features
    started = time.perf_counter()
    if kind == "plan":
        fit = fit_station_model(plan, data, station_costs(config, STATION))
        out["seconds"] = time.perf_counter() - started
        out["peak_mb"] = peak_rss_mb()
        fresh, _, label = sticks(charge_sizes(200_000, SEED + 1), types, SEED + 1)
        proba = fit.model.decide(fresh.X)["probability"].to_numpy()
        out["auc"] = float(roc_auc_score(label > 0, proba))
        out["threshold"] = float(fit.model.threshold)
    else:
        estimator = plan.method.estimator(plan.seed)
        estimator.set_params(**{k: v[0] for k, v in plan.grid.items()})
        target = data.for_type(types[0])
        estimator.fit(data.features.X, data.bags, target.proportions)
        out["seconds"] = time.perf_counter() - started
        out["peak_mb"] = peak_rss_mb()
    return out


def parse_case(text: str) -> tuple[str, int, bool]:
    parts = text.split(":")
    return parts[0], int(parts[1]), len(parts) > 2 and parts[2] == "rule"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        nargs="*",
        default=["plan:100000", "plan:500000", "plan:5000000:rule", "emfit:5000000"],
        help="KIND:STICKS[:rule], KIND plan (default training) or emfit (one em-llp fit)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--header", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*parse_case(args.child))))
        return
    if args.header:
        print(
            f"{N_FEATURES} features; charges of 40-60 sticks; "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
        )
        print()
        print(
            "| case | labeled sticks | trained sticks (charges) | feature table MiB "
            "| seconds | peak RSS MiB | fresh AUC |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
    for case in args.cases:
        out = subprocess.run(
            [sys.executable, __file__, "--child", case],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        what = {
            "plan": "default training" + (", max_sticks rule" if r["rule"] else ""),
            "emfit": "one em-llp fit, one type",
        }[r["kind"]]
        auc = f"{r['auc']:.3f}" if "auc" in r else "--"
        print(
            f"| {what} | {r['labeled_sticks']:,} | {r['sticks']:,} ({r['charges']:,}) "
            f"| {r['table_mb']:,.0f} | {r['seconds']:,.1f} | {r['peak_mb']:,.0f} | {auc} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
