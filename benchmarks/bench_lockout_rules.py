"""Lock-out rule variants replayed on cached plant cases, without refitting any learner.

``bench_plant_quality.py --cache DIR --label L`` stores per case (scenario, seed, station) the
out-of-fold probabilities of the training plant, the raw probabilities of the fresh plant, the
charges' counts and both plants' hidden truth. The lock-out rule (count calibration, threshold,
scorer's guard) only needs those, so its variants can be compared here on the very same
models in minutes:

* ``alpha=A``: the threshold with the largest bootstrap ``A``-quantile of the saving
  (:func:`qcllp.station.lockout_rule.lockout_rule`; ``qcllp train`` uses ``ALPHA``) -- how much
  evidence a lock-out needs;
* ``point``: the threshold with the largest point estimate of the saving (no evidence asked);
* ``no-ceiling``: the count calibration without its ceiling (``CountCalibrator(ceiling=False)``);
* ``re-alpha=A``: as ``alpha=A`` with a charge random effect in the count likelihood
  (:class:`ChargeEffectCalibrator`, a study variant that is not in the product: see its
  docstring for what it measured);
* ``count-guard=L[:H[:K]]``: as ``qcllp train``'s rule, with the scorer's guard on final QC's
  counts (:mod:`qcllp.scoring.count_guard`), the counts reported ``L`` charges after their
  charge was decided, decision interval ``H`` and reference ``K`` (default the scorer's,
  :mod:`qcllp.station.guard_bounds`); the other variants leave it out.

Rules join with ``+``: ``alpha=0.3+count-guard=5`` is the 30 % bound with the count rule.

Per variant and station: the realized saving on the fresh plant per 1,000 sticks with the
scorer's guard (sum over cases, the worst case, cases losing money, cases locking out), and
at the middle station the median realized as a share of the median best-in-hindsight saving.

    python benchmarks/bench_lockout_rules.py --cache /tmp/bpq --label cur --label cur2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit, logit, logsumexp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_plant_quality import (  # noqa: E402
    best_in_hindsight,
    cached_cases,
    count_guarded,
    replay_parser,
    summary,
)

from qcllp.learn.calibration import CountCalibrator, _CountLayout  # noqa: E402
from qcllp.station.guard_bounds import (  # noqa: E402
    COUNT_INTERVAL,
    COUNT_REFERENCE,
    GuardCounts,
    guard_step,
    lockout_excess_bound,
    lockout_rate_bound,
)
from qcllp.station.lockout_rule import ALPHA, LockoutCosts, charge_savings, lockout_rule  # noqa: E402

GUARD_MIN_STICKS = 300  # plant_config/example.yaml scorer.guard_min_sticks
N_BOOT = 30  # plant_config/example.yaml training.bootstrap


class ChargeEffectCalibrator:
    """``P(fail) = ceiling * E_u sigmoid(a f + b + sd u)``, ``u ~ N(0, 1)`` per charge, fitted
    by the marginal Poisson-binomial likelihood of the counts (Gauss-Hermite, 9 nodes).

    Why it was tried: the counts of the simulated plant are overdispersed against the count
    calibration (Pearson dispersion 1.3-2.1 at cooling, ``bench_count_calibration.py``), and
    :class:`~qcllp.learn.calibration.CountCalibrator` can only explain extra spread by a lower
    ceiling, so it puts the top 3 % of sticks at 0.91 where 0.95 of them fail (median of 15
    cooling cases). A charge effect explains the spread instead; the top 3 % move to 0.98.
    Measured (docs/benchmarks.md, "How much evidence a lock-out needs"): under the lower
    bound and the guard it gains at cooling and furnace but loses at rolling and
    straightening (60 cases: -1,153 with 9 losing against +12,899 with 2), and a fit costs
    ten times as much. Not adopted.
    """

    nodes, weights = np.polynomial.hermite_e.hermegauss(9)
    weights = weights / weights.sum()

    def fit(self, f, codes, counts, init=None):  # noqa: ANN001, ANN201 - study code
        f, codes = np.asarray(f, float), np.asarray(codes, np.intp)
        counts = np.asarray(counts, float)
        h, n, q = len(counts), len(f), len(self.nodes)
        scale, centre = float(np.std(f)) or 1.0, float(f.mean())
        z = np.tile((f - centre) / scale, q)
        u = np.repeat(self.nodes, n)
        layout = _CountLayout((np.arange(q)[:, None] * h + codes).ravel(), np.tile(counts, q))

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            a, b, top, sd = theta
            s = expit(a * z + b + sd * u)
            slope = top * s * (1 - s)
            ll, dll = layout.logpmf_and_grad(top * s, np.stack([slope * z, slope, s, slope * u]))
            ll = ll.reshape(q, h) + np.log(self.weights)[:, None]
            per_charge = logsumexp(ll, axis=0)
            grad = (dll.reshape(4, q, h) * np.exp(ll - per_charge)).sum(axis=(1, 2))
            return -per_charge.sum() / h, -grad / h

        rate = float(np.clip(counts.sum() / n, 1e-6, 1 - 1e-6))
        if init is None:  # sd = 0 is a stationary point (odd nodes cancel): start above it
            starts = [[a, np.log(rate / (1 - rate)), 1.0, 0.5] for a in (0.5, 2.0)]
        else:
            a0 = init.slope_ * scale
            starts = [[a0, init.intercept_ + init.slope_ * centre, init.ceiling_, init.sd_]]
        bounds = [(0, None), (None, None), (1e-3, 1.0), (0.0, 4.0)]
        best = min(
            (minimize(loss, s, jac=True, method="L-BFGS-B", bounds=bounds) for s in starts),
            key=lambda r: r.fun,
        )
        a, b, self.ceiling_, self.sd_ = best.x
        self.slope_, self.intercept_ = a / scale, b - a * centre / scale
        return self

    def predict(self, f):  # noqa: ANN001, ANN201 - study code
        s = expit(
            self.slope_ * np.asarray(f, float)[None, :]
            + self.intercept_
            + self.sd_ * self.nodes[:, None]
        )
        return self.ceiling_ * (self.weights @ s)


def calibration(kind: type):
    """(fitted on all charges, refit for bootstrap replicates) as thresholds.count_calibration."""

    def make(f, codes, counts):  # noqa: ANN001, ANN202
        fitted = kind().fit(f, codes, counts)
        return fitted, lambda g, c, k: kind().fit(g, c, k, init=fitted).predict

    return make


def variants(names: list[str]) -> dict:
    """Each name is one rule or several joined by ``+`` (``alpha=0.3+count-guard=5``)."""
    out = {}
    for name in names:
        make, alpha, n_boot, guard = calibration(CountCalibrator), ALPHA, N_BOOT, None
        for part in name.split("+"):
            if part.startswith("count-guard="):  # count-guard=LAG[:INTERVAL[:REFERENCE]]
                lag, interval, reference = (part[12:].split(":") + ["", ""])[:3]
                guard = (
                    int(lag),
                    float(interval or COUNT_INTERVAL),
                    float(reference or COUNT_REFERENCE),
                )
            elif part == "no-ceiling":  # the count likelihood without its ceiling
                make = calibration(lambda: CountCalibrator(ceiling=False))
            elif part == "point":
                alpha, n_boot = 0.5, 1  # one replicate: the point estimate
            elif part.startswith("re-alpha="):
                make, alpha = calibration(ChargeEffectCalibrator), float(part[9:])
            elif part.startswith("alpha="):
                alpha = float(part[6:])
            else:
                raise SystemExit(f"unknown variant {part!r} in {name!r}")
        out[name] = (make, alpha, n_boot, guard)
    return out


def replay(
    case: dict, make, alpha: float, n_boot: int, guard: tuple[int, float, float] | None = None
) -> tuple[float, float]:
    """(realized saving per 1,000 fresh sticks with the guard, share locked out) of one rule."""
    f = logit(np.clip(case["oof_raw"], 1e-12, 1 - 1e-12))
    codes = case["codes"]
    positives = case["defective"] / case["n_sticks"] * np.bincount(codes)
    costs = LockoutCosts(*case["costs"])
    fitted, refit = make(f, codes, positives)
    if n_boot == 1:
        threshold = point_threshold(fitted.predict(f), codes, len(positives), costs)
    else:
        threshold = lockout_rule(
            f, codes, positives, costs, refit, n_boot=n_boot, alpha=alpha
        ).threshold
    oof = fitted.predict(f)
    bound = lockout_rate_bound(oof, codes, threshold, random_state=0)
    excess = lockout_excess_bound(oof, codes, threshold, bound, random_state=0)
    fresh = fitted.predict(logit(np.clip(case["fresh_raw"], 1e-12, 1 - 1e-12)))
    order = np.argsort(case["fresh_codes"], kind="stable")
    locked, _, _ = guard_step(
        GuardCounts(), (fresh >= threshold)[order], bound, GUARD_MIN_STICKS, excess
    )
    bad = case["truth"].astype(bool)[order]
    if guard is not None:
        codes = pd.factorize(case["fresh_codes"][order])[0]
        locked = count_guarded(locked, fresh[order], bad, codes, *guard)
    saving = costs.fail_cost * np.sum(locked & bad) - costs.good_cost * np.sum(locked & ~bad)
    return 1000 * saving / len(fresh), float(np.mean(locked))


def point_threshold(p: np.ndarray, codes: np.ndarray, h: int, costs: LockoutCosts) -> float:
    """The candidate threshold with the largest point estimate of the saving, if positive."""
    above = p[p >= costs.bayes_threshold]
    spread = np.quantile(above, np.linspace(0, 1, 40)) if len(above) else []
    ts = np.unique(np.r_[costs.bayes_threshold, spread])
    saving = charge_savings(p, codes, h, ts, costs).sum(axis=1)
    best = int(np.argmax(saving))
    return float(ts[best]) if saving[best] > 0 else 1.0 + 1e-9


def main(argv: list[str] | None = None) -> int:
    """Replay every cached case under every variant and print the tables."""
    args = _arguments(argv)
    rules = variants(args.variants)
    rows = []
    for path, scenario, seed, station in cached_cases(args.cache, args.label, args.stations):
        case = dict(np.load(path))
        costs = LockoutCosts(*case["costs"])
        best = best_in_hindsight(case["fresh"], case["truth"].astype(bool), costs)
        for name, (make, alpha, n_boot, guard) in rules.items():
            realized, locked = replay(case, make, alpha, n_boot, guard)
            rows.append(
                {
                    "variant": name,
                    "scenario": scenario,
                    "seed": int(seed),
                    "station": station,
                    "realized": realized,
                    "locked": locked,
                    "best": best,
                }
            )
        print(
            f"{scenario} {seed} {station:13s} best {best:+6.0f} "
            + " ".join(f"{r['variant']} {r['realized']:+6.0f}" for r in rows[-len(rules) :]),
            file=sys.stderr,
            flush=True,
        )
    if not rows:
        print(f"no cached cases for {args.label} in {args.cache}")
        return 1
    frame = pd.DataFrame(rows)
    print_tables(frame, args.middle)
    if args.table:
        print(f"\n# bench_plant_quality's tables with the realized savings of `{args.table}`")
        summary(plant_rows(args, frame[frame["variant"] == args.table]), args.middle)
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = replay_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--variants", nargs="*", default=[f"alpha={ALPHA}", "alpha=0.2", "alpha=0.3", "point"]
    )
    parser.add_argument("--middle", default="cooling")
    parser.add_argument(
        "--table",
        default=None,
        help="a variant: also print bench_plant_quality's summary with its realized savings",
    )
    return parser.parse_args(argv)


def print_tables(frame: pd.DataFrame, middle: str) -> None:
    """The replayed savings per variant and station, then per variant with ``middle``'s share
    of the best in hindsight."""
    print("\n## realized saving on the fresh plants per 1,000 sticks, with the guard\n")
    print("| variant | station | cases | sum | worst | losing | locking | best sum |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (variant, station), g in frame.groupby(["variant", "station"], sort=False):
        print(
            f"| {variant} | {station} | {len(g)} | {g['realized'].sum():+.0f} "
            f"| {g['realized'].min():+.0f} | {int((g['realized'] < -1e-9).sum())} "
            f"| {int((g['locked'] > 0).sum())} | {g['best'].sum():+.0f} |"
        )
    print("\n## per variant: all stations, and the middle station's share of the best\n")
    print("| variant | cases | sum | worst | losing | middle: median realized / median best |")
    print("|---|---:|---:|---:|---:|---|")
    for variant, g in frame.groupby("variant", sort=False):
        shares = []
        for scenario, m in g[g["station"] == middle].groupby("scenario", sort=False):
            best = m["best"].median()
            share = m["realized"].median() / best if best > 0 else float("nan")
            shares.append(f"{scenario} {share:.0%}")
        print(
            f"| {variant} | {len(g)} | {g['realized'].sum():+.0f} | {g['realized'].min():+.0f} "
            f"| {int((g['realized'] < -1e-9).sum())} | {', '.join(shares)} |"
        )


def plant_rows(args: argparse.Namespace, replayed: pd.DataFrame) -> pd.DataFrame:
    """The cached case rows of ``bench_plant_quality.py`` (AUC, oracles, claims) with the
    realized saving replaced by the replayed one."""
    cache = Path(args.cache)
    parts = [pd.read_json(cache / f"rows-{label}.jsonl", lines=True) for label in args.label]
    rows = pd.concat(parts).drop_duplicates(["scenario", "seed", "station"], keep="last")
    keys = ["scenario", "seed", "station"]
    realized = replayed.set_index(keys)["realized"]
    rows["realized"] = realized.reindex(pd.MultiIndex.from_frame(rows[keys])).to_numpy()
    return rows.dropna(subset=["realized"])


if __name__ == "__main__":
    raise SystemExit(main())
