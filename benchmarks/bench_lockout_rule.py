"""The lock-out rule's cost: its count-calibration refits, as they were and as they are.

A station's lock-out rule (:mod:`qcllp.station.lockout_rule`) refits the count calibration
(:class:`qcllp.learn.calibration.CountCalibrator`) on 30 bootstrap resamples of the charges
for the threshold, and on 5 x 31 more for the held-out saving: 186 L-BFGS-B fits of a dozen
or more Poisson-binomial likelihood evaluations each. Per case (a synthetic station: 120
charges of 35-64 sticks, a charge effect on the scores, failure rates and lock-out costs
varying by seed) this script runs :func:`count_calibration`, :func:`lockout_rule` and
:func:`held_out_saving` in one process, three ways:

* ``before``: the refits one by one, each with its own likelihood in forward mode on one
  table (:class:`_ForwardLayout`, a copy of the likelihood as it was before any of this
  work), BLAS threads unlimited (the library's default on this machine);
* ``before-1t``: the same with BLAS held to one thread (what the limit alone gives);
* ``now``: the product's code (the recursion compiled per bag, reverse-mode gradient, the
  refits one by one with BLAS held to one thread: :mod:`qcllp.learn.count_kernel`,
  :mod:`qcllp.learn.count_batch`).

It prints CPU (``time.process_time``) and wall seconds per case, whether ``now`` chose the
same threshold as the others (equal to 1e-12, or all declined), the largest relative
difference of the five saving figures (point, bootstrap bound, held-out estimate and
interval), and the median ratios. The compiled kernel is loaded (compiled once per machine,
then from numba's disk cache) before the first case and its load time printed, so the cases
time the rule. ``--quick`` leaves out ``before`` (the slowest) to check the figures on many
cases; ``--first`` is the first case's seed.

    python benchmarks/bench_lockout_rule.py --cases 8
    python benchmarks/bench_lockout_rule.py --first 8 --cases 24 --quick
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from qcllp.learn.calibration import CountCalibrator
from qcllp.station.lockout_rule import (
    LockoutCosts,
    count_calibration,
    held_out_saving,
    lockout_rule,
)

COSTS = (LockoutCosts(30.0, 10.0), LockoutCosts(60.0, 440.0), LockoutCosts(100.0, 150.0))


class _ForwardLayout:
    """The count likelihood as it was before the pooled fits: one table for all bags, the
    gradient by forward mode (m tables carried through the recursion)."""

    def __init__(self, codes: np.ndarray, counts: np.ndarray, h: int):
        sizes = np.bincount(codes, minlength=h)
        self.width = int(sizes.max())
        order = np.argsort(codes, kind="stable")
        self.rows = order
        self.cells = (
            codes[order],
            np.arange(len(codes)) - np.repeat(np.cumsum(sizes) - sizes, sizes),
        )
        k = np.asarray(np.round(counts), dtype=np.intp)
        self.inside = (k >= 0) & (k <= sizes)
        self.top = int(np.clip(k, 0, self.width).max(initial=0))
        self.k = np.clip(k, 0, self.top)
        self.h = h

    def logpmf_and_grad(self, p: np.ndarray, dp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = len(dp)
        table = np.zeros((self.h, self.width))
        table[self.cells] = p[self.rows]
        dtable = np.zeros((m, self.h, self.width))
        dtable[:, self.cells[0], self.cells[1]] = dp[:, self.rows]
        dist = np.zeros((self.h, self.top + 1))
        dist[:, 0] = 1.0
        ddist = np.zeros((m, self.h, self.top + 1))
        for j in range(self.width):
            pj, dpj = table[:, j : j + 1], dtable[:, :, j : j + 1]
            diff = -dist
            diff[:, 1:] += dist[:, :-1]
            ddiff = -ddist
            ddiff[:, :, 1:] += ddist[:, :, :-1]
            ddist = ddist + pj * ddiff + dpj * diff
            dist = dist + pj * diff
        bags = np.arange(self.h)
        value = np.where(self.inside, dist[bags, self.k], 0.0)
        kept = value > 1e-300
        grad = np.where(kept, ddist[:, bags, self.k] / np.where(kept, value, 1.0), 0.0)
        return np.log(np.maximum(value, 1e-300)), grad


def _before(f: np.ndarray, codes: np.ndarray, positives: np.ndarray):
    """count_calibration as it was: refits one by one on the forward-mode likelihood."""

    def fit(d, c, k, init=None):
        layout = _ForwardLayout(np.asarray(c, dtype=np.intp), np.asarray(k, float), len(k))
        return CountCalibrator().fit(d, c, k, init=init, likelihood=layout.logpmf_and_grad)

    fitted = fit(f, codes, positives)

    def refit(d, c, k) -> Callable[[np.ndarray], np.ndarray]:
        return fit(d, c, k, init=fitted).predict

    return fitted, refit


def _case(seed: int, n_bags: int = 120):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(35, 65, n_bags)
    codes = np.repeat(np.arange(n_bags), sizes)
    f = rng.normal(size=len(codes)) + rng.normal(0, rng.uniform(0.2, 1.0), n_bags)[codes]
    slope, shift = rng.uniform(0.5, 2.5), rng.uniform(1.5, 3.5)
    bad = rng.random(len(f)) < 1 / (1 + np.exp(-(slope * f - shift)))
    return f, codes, np.bincount(codes, bad, minlength=n_bags), COSTS[seed % len(COSTS)]


def _run(calibration, f, codes, positives, costs):
    cpu, wall = time.process_time(), time.perf_counter()
    _, refit = calibration(f, codes, positives)
    choice = lockout_rule(f, codes, positives, costs, refit)
    estimate = held_out_saving(f, codes, positives, costs, refit)
    return choice, estimate, time.process_time() - cpu, time.perf_counter() - wall


def _compare(a, b) -> tuple[bool, float]:
    """Did both choose the same threshold (or both decline), and the largest relative
    difference of their five saving figures (point, bootstrap bound, held-out estimate, low,
    high)."""
    (ca, ea), (cb, eb) = a, b
    figures = lambda c, e: np.array(  # noqa: E731
        [c.saving_per_1000, c.saving_bound_per_1000, e.per_1000, e.low, e.high]
    )
    fa, fb = figures(ca, ea), figures(cb, eb)
    same = ca.declined == cb.declined and abs(ca.threshold - cb.threshold) <= 1e-12
    return same, float(np.max(np.abs(fa - fb) / np.maximum(np.abs(fb), 1e-9), initial=0.0))


def _warm_up() -> float:
    """Load the compiled likelihood (compiling it if numba's cache has none): CPU seconds."""
    cpu = time.process_time()
    f, codes, positives, _ = _case(0, n_bags=4)
    count_calibration(f, codes, positives)
    return time.process_time() - cpu


def _print_summary(cpu: dict, wall: dict, same: int, worst: float) -> None:
    ratio = lambda d, a: float(np.median(np.array(d[a]) / np.array(d["now"])))  # noqa: E731
    print(f"\nsame threshold: {same} of {len(cpu['now'])} cases")
    print(f"largest relative difference of the saving figures: {worst:.1e}")
    print(
        "median ratio to now: "
        + ", ".join(f"CPU {w} {ratio(cpu, w):.1f}x" for w in cpu if w != "now")
        + "; "
        + ", ".join(f"wall {w} {ratio(wall, w):.1f}x" for w in wall if w != "now")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--first", type=int, default=0, help="seed of the first case")
    parser.add_argument("--quick", action="store_true", help="leave out 'before'")
    args = parser.parse_args()
    ways = {
        "before": (_before, contextlib.nullcontext),
        "before-1t": (_before, lambda: threadpool_limits(limits=1)),
        "now": (count_calibration, contextlib.nullcontext),
    }
    if args.quick:
        del ways["before"]
    print(f"compiled likelihood loaded in {_warm_up():.2f} s CPU\n")
    names = " | ".join(ways)
    print(f"| case | threshold | same | figures rel. diff | CPU s {names} | wall s {names} |")
    print("|---:|---:|:---:|---:|" + "---:|" * (2 * len(ways)))
    cpu, wall, same, worst = {w: [] for w in ways}, {w: [] for w in ways}, 0, 0.0
    for seed in range(args.first, args.first + args.cases):
        f, codes, positives, costs = _case(seed)
        results = {}
        for name, (calibration, limit) in ways.items():
            with limit():
                choice, estimate, c, w = _run(calibration, f, codes, positives, costs)
            results[name] = (choice, estimate)
            cpu[name].append(c)
            wall[name].append(w)
        compared = [_compare(results[n], results["now"]) for n in ways if n != "now"]
        ok, diff = all(c[0] for c in compared), max(c[1] for c in compared)
        same, worst = same + ok, max(worst, diff)
        thr = results["now"][0].threshold
        print(
            f"| {seed} | {'declined' if results['now'][0].declined else f'{thr:.4f}'} | "
            f"{'yes' if ok else 'NO'} | {diff:.0e} | "
            + " | ".join(f"{cpu[n][-1]:.2f}" for n in ways)
            + " | "
            + " | ".join(f"{wall[n][-1]:.2f}" for n in ways)
            + " |",
            flush=True,
        )
    _print_summary(cpu, wall, same, worst)


if __name__ == "__main__":
    main()
