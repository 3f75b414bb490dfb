"""The running line's tables (``benchmarks/bench_line.py --summary``): its rows (one per
scenario, seed, station and week, as ``bench_line.py`` writes them) summed per case, against
the label-trained oracles and the best in hindsight, the stated intervals against what the
lock-outs realized, and one case week by week."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["interval_table", "per_1000", "summary", "week_table"]

_SHADOW = ("audits", "audits_failing", "shadow", "would_lock", "would_realize")


def per_1000(frame: pd.DataFrame, column: str) -> pd.Series:
    return 1000 * frame[column] / frame["sticks"].clip(lower=1)


def summary(rows: pd.DataFrame, middle: str) -> None:
    """The tables of the issue's targets (module docstring)."""
    rows = rows.assign(better=np.maximum(rows["lr"], rows["gb"]))
    cases = rows.groupby(["scenario", "seed", "station"], sort=False)
    totals = cases[["realized", "lr", "gb", "best", "sticks"]].sum()
    totals["better"] = np.maximum(totals["lr"], totals["gb"])
    print("\n## per scenario and station (all weeks summed, per 1,000 sticks; median over seeds)\n")
    print("| scenario | station | seeds | product | lr | gb | best in hindsight | losing seeds |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (scenario, station), g in totals.groupby(level=["scenario", "station"], sort=False):
        figures = {
            c: (1000 * g[c] / g["sticks"]).median() for c in ("realized", "lr", "gb", "best")
        }
        print(
            f"| {scenario} | {station} | {len(g)} | {figures['realized']:+.0f} "
            f"| {figures['lr']:+.0f} | {figures['gb']:+.0f} | {figures['best']:+.0f} "
            f"| {(g['realized'] < 0).sum()} |"
        )
    late = rows[(rows["station"] == middle) & (rows["week"] >= 5)]
    print(f"\n## {middle}, weeks 5-12 (per 1,000 sticks; target: product >= 50 % of the oracle)\n")
    print("| scenario | seeds | product (median) | better oracle (median) | share |")
    print("|---|---:|---:|---:|---:|")
    for scenario, g in late.groupby("scenario", sort=False):
        s = g.groupby("seed")[["realized", "better", "sticks"]].sum()
        product, oracle = (
            (1000 * s["realized"] / s["sticks"]).median(),
            (1000 * s["better"] / s["sticks"]).median(),
        )
        share = product / oracle if oracle > 0 else float("nan")
        print(f"| {scenario} | {len(s)} | {product:+.0f} | {oracle:+.0f} | {share:.0%} |")
    losing = totals[totals["realized"] < 0]
    share = totals["realized"].sum() / max(totals["better"].sum(), 1.0)
    worst = (1000 * losing["realized"] / losing["sticks"]).min() if len(losing) else 0.0
    print(
        f"\n- cases (all weeks summed): {len(totals)}; losing money: {len(losing)} "
        f"(worst {worst:+.0f} per 1,000 sticks); product total "
        f"{totals['realized'].sum():+,.0f} against the better oracle's "
        f"{totals['better'].sum():+,.0f} ({share:.0%})"
    )
    acting = rows[(rows["locked"] > 0) & rows["low"].notna()]
    inside = per_1000(acting, "lockouts").between(acting["low"], acting["high"])
    share = inside.mean() if len(acting) else float("nan")
    print(
        f"- station-weeks that locked out: {len(acting)}; what their lock-outs realized inside "
        f"the stated interval: {inside.sum()} ({share:.0%})"
    )
    interval_table(acting)


def interval_table(acting: pd.DataFrame) -> None:
    """The station-weeks that locked out by what their stated saving stands on: how many
    realized inside their interval, below it and above it."""
    if acting.empty:
        return
    realized = per_1000(acting, "lockouts")
    side = np.where(
        realized < acting["low"], "below", np.where(realized > acting["high"], "above", "inside")
    )
    basis = acting["basis"] if "basis" in acting else pd.Series("?", index=acting.index)
    table = pd.crosstab(basis.fillna("?"), side).reindex(
        columns=["inside", "below", "above"], fill_value=0
    )
    print("\n| stated saving's basis | station-weeks | inside | below | above |")
    print("|---|---:|---:|---:|---:|")
    for name, r in table.iterrows():
        print(f"| {name} | {r.sum()} | {r['inside']} | {r['below']} | {r['above']} |")


def week_table(rows: pd.DataFrame, scenario: str, seed: int, station: str) -> None:
    """Week by week for one case (audits and the shadow trial where the run recorded them)."""
    g = rows[(rows["scenario"] == scenario) & (rows["seed"] == seed) & (rows["station"] == station)]
    g = g.reindex(columns=[*g.columns, *(c for c in _SHADOW if c not in g.columns)])
    print(f"\n## {scenario}, seed {seed}, {station}: week by week (per 1,000 sticks)\n")
    print(
        "| week | sticks | model | locked | failing | audits (failing) | product "
        "| expected [low, high] | shadow: model, would lock, would realize | lr | gb | best |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|")
    for r in g.itertuples():
        expected = "-" if pd.isna(r.low) else f"{r.expected:+.0f} [{r.low:+.0f}, {r.high:+.0f}]"
        k = 1000 / max(r.sticks, 1)
        audits = "-" if pd.isna(r.audits) else f"{r.audits:.0f} ({r.audits_failing:.0f})"
        shadow = (
            "-"
            if pd.isna(r.shadow)
            else f"{r.shadow:.0f}, {r.would_lock:.0f}, {k * r.would_realize:+.0f}"
        )
        print(
            f"| {r.week} | {r.sticks} | {r.model if pd.notna(r.model) else '-'} | {r.locked} "
            f"| {r.failing} | {audits} | {k * r.realized:+.0f} | {expected} | {shadow} "
            f"| {k * r.lr:+.0f} | {k * r.gb:+.0f} | {k * r.best:+.0f} |"
        )
