"""The retraining daemon over simulated weeks: a plant whose process changes halfway.

One simulated plant (``plant_config/example.yaml``, ``--scenario``; ``sepA``: each defect type
arises at its own station, scale at cooling) delivers ``--per-week`` charges a week for
``--weeks`` weeks. From week ``--change-week`` on a sensor of ``--station`` reads
``--shift`` latent standard deviations higher (a drifted or recalibrated sensor: the sticks and
their defects are those of the unchanged plant; the same seed simulated twice, spliced in time
with :meth:`~qcllp.plant.simulate.SimulatedPlant.charges`).

Every week, as on the line: the week's measurement files are dropped into the watched folder
and ingested, the station's sticks are decided by the model active at that moment, final QC's
counts arrive in the defects folder and are ingested (the drift watch runs after each ingest),
and the weekly retraining runs. All of it through :class:`qcllp.service.retrainer.
RetrainerService`, the daemon's jobs (ingest with drift watch, retrain with the promotion gate)
without its scheduler, so simulated weeks take minutes, not weeks. A drift alarm queues a
retraining, which here coincides with the weekly one.

Two lines are compared on the same sticks: **with the daemon** (the jobs above) and **without**
(the first promoted model stays). Per week: the active model, its bag-level error on the
week's counts (Yu et al. eq. 23: mean |predicted - counted defective share| over the week's
charges), its share of sticks locked out and the realized saving per 1,000 sticks against the
hidden truth (fail_cost per failing stick locked out minus good_cost per good one) as the line
sees it, with the scorer's lock-out guard (a model locking out far more than in training is
suspended, :mod:`qcllp.scoring.share_guard`), and in brackets what the model's own
decisions are worth without the guard. ``--window`` limits the daemon's training to the most
recent labeled charges before the holdout (``retrainer.training_charges``).

    python benchmarks/bench_process_change.py     # 11 minutes (em-llp) on 2 busy cores
    python benchmarks/bench_process_change.py --weeks 10 --change-week 6
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from qcllp.features import build_station_features
from qcllp.plant.config import Connectors, FileConnector, PlantConfig, load_plant_config
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation
from qcllp.service.retrainer import RetrainerService
from qcllp.station.guard_bounds import GuardCounts, guard_step
from qcllp.station.realized import lockout_saving_per_1000
from qcllp.station.registry import active_model, load_model
from qcllp.store import Store
from qcllp.training.train import station_costs

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "plant_config" / "example.yaml"
LINES = ("daemon", "no daemon")
SCENARIOS = {
    "shared": None,
    "sepA": {"crack": "furnace", "bend": "rolling", "scale": "cooling"},
}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Guard:
    """The scorer's lock-out guard (:mod:`qcllp.scoring.share_guard`) for one line: per
    model, what :func:`~qcllp.station.guard_bounds.guard_step` knows of it."""

    min_sticks: int
    counts: dict[int, GuardCounts] = field(default_factory=dict)

    def apply(self, model_id: int, model, wants: np.ndarray) -> np.ndarray:
        allowed, self.counts[model_id], _ = guard_step(
            self.counts.get(model_id, GuardCounts()),
            wants,
            model.lockout_rate_bound,
            self.min_sticks,
            model.lockout_excess_bound,
        )
        return allowed


def week_figures(loaded, plant: SimulatedPlant, config, station: str, guard: Guard) -> dict:
    """Bag error, lock-out share and realized saving (with and without the guard) of the
    model ``loaded`` on one week's sticks, decided in line order."""
    if loaded is None:
        return {"bag_error": np.nan, "locked": 0.0, "saving": 0.0, "unguarded": 0.0}
    model = loaded.model
    features = build_station_features(plant.readings, config, station, imputation=model.imputation)
    X = features.X.sort_index()  # charge ids and stick ids number them in line order
    p = model.failure_probability(X)
    truth = plant.truth.set_index(["charge_id", "stick_id"])["defect"].reindex(X.index)
    bad = (truth != "ok").to_numpy()
    predicted = pd.Series(p, index=X.index).groupby(level="charge_id").mean()
    counted = plant.defective_shares().reindex(predicted.index)
    wants = p >= model.threshold
    locked = guard.apply(loaded.id, model, wants)
    costs = station_costs(config, station)
    return {
        "bag_error": float(np.mean(np.abs(predicted - counted))),
        "locked": float(locked.mean()),
        "saving": lockout_saving_per_1000(locked, bad, costs),
        "unguarded": lockout_saving_per_1000(wants, bad, costs),
    }


def run(args: argparse.Namespace) -> pd.DataFrame:
    """The weeks of both lines (module docstring), one row per week and line."""
    base = load_plant_config(CONFIG)
    same, changed = _simulations(base, args)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config, drop = _watched_plant(base, tmp, args)
        with Store.open(f"sqlite:///{tmp / 'plant.sqlite'}") as store:
            week_run = _WeekRun(store, config, drop, tmp, args)
            for week in range(1, args.weeks + 1):
                sim = same if week < args.change_week else changed
                lo = (week - 1) * args.per_week
                rows += week_run.week(week, sim.charges(lo, lo + args.per_week))
    return pd.DataFrame(rows)


def _simulations(
    base: PlantConfig, args: argparse.Namespace
) -> tuple[SimulatedPlant, SimulatedPlant]:
    """The unchanged plant and the same seed with ``--station``'s first sensor shifted."""
    n = args.weeks * args.per_week
    stations = SCENARIOS[args.scenario]
    sensor = base.station(args.station).sensor_names[0]
    same = simulate_plant(base, n, random_state=args.seed, defect_stations=stations)
    changed = simulate_plant(
        base,
        n,
        random_state=args.seed,
        defect_stations=stations,
        sensor_shift={f"{args.station}.{sensor}": args.shift},
    )
    say(
        f"simulated {n} charges; from week {args.change_week}: "
        f"{args.station}.{sensor} +{args.shift} sd"
    )
    return same, changed


def _watched_plant(
    base: PlantConfig, tmp: Path, args: argparse.Namespace
) -> tuple[PlantConfig, dict[str, Path]]:
    """The plant config with drop folders under ``tmp`` and the daemon on ``--station``;
    the folders (``measurements``, ``defects``)."""
    drop = {k: tmp / "drop" / k for k in ("measurements", "defects")}
    for d in drop.values():
        d.mkdir(parents=True)
    config = replace(
        base,
        path=tmp / "plant.yaml",
        connectors=Connectors(
            measurements=FileConnector(str(drop["measurements"]), format="csv"),
            defects=FileConnector(str(drop["defects"]), format="csv"),
        ),
        retrainer=replace(base.retrainer, stations=(args.station,), training_charges=args.window),
    )
    return config, drop


class _WeekRun:
    """The daemon's jobs week by week, and the line without it (its first promoted model)."""

    def __init__(
        self, store: Store, config: PlantConfig, drop: dict, tmp: Path, args: argparse.Namespace
    ):
        self.store, self.config, self.drop, self.tmp, self.args = store, config, drop, tmp, args
        self.service = RetrainerService(store, config)
        self.alarms: list[str] = []
        self.service.queue_retrain = self.alarms.append
        self.frozen = None  # the line without the daemon: the first promoted model stays
        self.guards = {line: Guard(config.scorer.guard_min_sticks) for line in LINES}

    def week(self, week: int, plant: SimulatedPlant) -> list[dict]:
        """Measurements in, sticks decided, final QC's counts in, the weekly retraining."""
        args, station = self.args, self.args.station
        files = write_simulation(plant, self.tmp / f"week{week:02d}")
        for path in files["measurements"]:
            shutil.copy(path, self.drop["measurements"] / f"w{week:02d}-{path.name}")
        self.service.run("ingest")
        record = active_model(self.store, station)
        active = load_model(self.store, record["id"]) if record else None
        if self.frozen is None and active is not None:
            self.frozen = active
        rows = [
            {
                "week": week,
                "line": line,
                "model": loaded.id if loaded else None,
                "changed": week >= args.change_week,
                **week_figures(loaded, plant, self.config, station, self.guards[line]),
            }
            for line, loaded in zip(LINES, (active, self.frozen), strict=True)
        ]
        self.alarms.clear()
        shutil.copy(files["defects"], self.drop["defects"] / f"w{week:02d}.csv")
        self.service.run("ingest")
        for row in rows:
            row["alarm"] = bool(self.alarms)
        started = time.perf_counter()
        if week >= args.first_training_week:
            self.service.run("retrain")
        newest = active_model(self.store, station)
        say(
            f"week {week:2d}: active {rows[0]['model']} saving "
            f"{rows[0]['saving']:+.0f} (no daemon {rows[1]['saving']:+.0f}); "
            f"count alarm {rows[0]['alarm']}; retrain {time.perf_counter() - started:.0f} s -> "
            f"active {newest['id'] if newest else None}"
        )
        return rows


def table(rows: pd.DataFrame, args: argparse.Namespace) -> str:
    wide = rows.pivot(index="week", columns="line")
    out = [
        f"## {args.station}: sensor +{args.shift} sd from week {args.change_week} "
        f"({args.scenario}, seed {args.seed}, {args.per_week} charges a week, training window "
        f"{args.window or 'all'} charges)\n",
        "| week | count alarm | daemon: model | bag error | locked | saving / 1,000 "
        "(no guard) | no daemon: model | bag error | locked | saving / 1,000 (no guard) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for week, r in wide.iterrows():
        mark = " *" if r[("changed", "daemon")] else ""

        def cells(line: str, r=r) -> str:
            model, error = r[("model", line)], r[("bag_error", line)]
            return (
                f"{'-' if pd.isna(model) else int(model)} "
                f"| {'-' if pd.isna(error) else f'{error:.3f}'} "
                f"| {100 * r[('locked', line)]:.1f} % | {r[('saving', line)]:+.0f} "
                f"({r[('unguarded', line)]:+.0f})"
            )

        alarm = "yes" if r[("alarm", "daemon")] else ""
        out.append(f"| {week}{mark} | {alarm} | {cells('daemon')} | {cells('no daemon')} |")
    for column, what in (("saving", "with the guard"), ("unguarded", "without it")):
        before = rows[~rows["changed"]].groupby("line")[column].mean()
        after = rows[rows["changed"]].groupby("line")[column].mean()
        out.append(
            f"\nMean saving per 1,000 sticks {what}: weeks 1-{args.change_week - 1} daemon "
            f"{before['daemon']:+.0f}, no daemon {before['no daemon']:+.0f}; weeks "
            f"{args.change_week}-{args.weeks} (after the change, * above) daemon "
            f"{after['daemon']:+.0f}, no daemon {after['no daemon']:+.0f}."
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--weeks", type=int, default=14)
    parser.add_argument("--per-week", type=int, default=25)
    parser.add_argument("--change-week", type=int, default=8)
    parser.add_argument("--first-training-week", type=int, default=4)
    parser.add_argument("--station", default="cooling")
    parser.add_argument("--scenario", default="sepA", choices=SCENARIOS)
    parser.add_argument("--shift", type=float, default=2.0)
    parser.add_argument("--window", type=int, default=100, help="0: all labeled charges")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run(args)
    print(table(rows, args))
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
