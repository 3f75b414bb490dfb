"""How well the count calibration knows a station's most suspect sticks, against hidden truth.

A lock-out pays only where the failing share of the locked sticks exceeds the Bayes threshold
``good_cost / (good_cost + fail_cost)`` (0.88 at the example plant's cooling station), and
``qcllp train`` reads that share off the count calibration
(:class:`qcllp.learn.calibration.CountCalibrator`, fitted on out-of-fold scores by the
likelihood of the charges' failing counts). This script reads the cases that
``bench_plant_quality.py --cache DIR --label L`` stored and compares, per case, on the
*training* charges:

* ``cal@q`` / ``true@q``: the mean calibrated probability and the true failing share (hidden
  per-stick truth of the simulator) of the top ``q`` of sticks by out-of-fold score;
* ``dispersion``: the Pearson dispersion of the charges' counts around the calibration,
  ``mean_k (count_k - sum p)^2 / sum p (1 - p)``: 1 when the counts vary as independent
  sticks would, above 1 when charges share causes the model does not see (alloy batches, set
  points) -- extra spread that a count likelihood can only explain by pulling the top
  probabilities towards 0.5, i.e. by a lower ceiling.

    python benchmarks/bench_count_calibration.py --cache /tmp/bpq --label em-honest-sep
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from bench_plant_quality import cached_cases

QUANTILES = (0.01, 0.03, 0.05)


def case_row(path: Path) -> dict | None:
    """The calibration check of one cached case, or None for a case cached without the
    training truth (by an older version of bench_plant_quality)."""
    case = np.load(path)
    if "truth_train" not in case.files:
        return None
    p, raw, codes = case["oof"], case["oof_raw"], case["codes"]
    bad, counts = case["truth_train"].astype(bool), case["defective"]
    order = np.argsort(-raw, kind="stable")
    row: dict = {}
    for q in QUANTILES:
        top = order[: max(1, int(q * len(p)))]
        row[f"cal@{q:.0%}"] = float(p[top].mean())
        row[f"true@{q:.0%}"] = float(bad[top].mean())
    mean = np.bincount(codes, p, minlength=len(counts))
    spread = np.bincount(codes, p * (1 - p), minlength=len(counts))
    row["dispersion"] = float(np.mean((counts - mean) ** 2 / np.maximum(spread, 1e-12)))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", default="/tmp/bench_plant_quality")
    parser.add_argument("--label", action="append", required=True, help="repeatable")
    args = parser.parse_args(argv)
    rows = []
    for path, scenario, seed, station in cached_cases(args.cache, args.label):
        found = case_row(path)
        if found is not None:
            rows.append({"scenario": scenario, "seed": seed, "station": station, **found})
    if not rows:
        print(f"no cached cases with training truth for {args.label} in {args.cache}")
        return 1
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(frame.round(3).to_string(index=False))
    top, true = "cal@3%", "true@3%"
    gap = frame[top] - frame[true]
    print("\n## per station (medians over scenarios and seeds)\n")
    print(f"| station | cases | {top} | {true} | calibration below truth by > 0.05 | dispersion |")
    print("|---|---:|---:|---:|---:|---:|")
    for station, g in frame.groupby("station", sort=False):
        below = int((gap[g.index] < -0.05).sum())
        print(
            f"| {station} | {len(g)} | {g[top].median():.3f} | {g[true].median():.3f} "
            f"| {below}/{len(g)} | {g['dispersion'].median():.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
