"""The running line: weeks of production through the product's own steps, measured per week.

A plant is simulated from ``plant_config/example.yaml`` (``--scenario``, ``--seed``), its
charges arriving ``--charges-per-week`` (default 25) to 7 days, and run week by week
(``--weeks``, default 12) as the line runs it:

1. in steps of ``--step-charges`` charges (default 5), each station in line order: the
   step's readings there of the sticks *not locked out upstream* are ingested (a locked-out
   stick never reaches the next station) and the station is scored by the product
   (:func:`qcllp.scoring.step.score_station`: the active model, its threshold and the
   scorer's guards) -- until a station has a model, nothing is locked out; every stick just
   locked out is inspected at the lock-out bay (its hidden truth) and the inspection ingested
   at once (``--no-inspections``: none are), each at ``--inspection-share`` (default 5 %) of
   the station's good cost (the product's ``inspection_cost`` is set to it; 0 without
   inspections), so the scorer's guard sees them at its next step; so is every
   audit sample (decision ``inspect``, the station's ``audit_share`` and
   ``trial_audit_share``; ``--audit-share`` and ``--trial-audit-share`` override them): a
   failing one is scrapped there, a good one goes on down the line;
2. at the week's end final QC reports each charge's defect counts over the sticks that
   reached it (locked-out sticks are not counted), ingested as the plant would;
3. the retraining daemon's own jobs judge each station's shadow trial
   (:func:`qcllp.retraining.shadow_check.check_trial`: confirm, reject or wait) and retrain
   every station (:func:`qcllp.retraining.retrain.retrain_station`: train, gate, promote --
   a first model that locks out, or one whose threshold moved, on a shadow trial).

Per station and week, against the hidden per-stick truth of the sticks that arrived there:

* ``realized``: the product's saving per 1,000 sticks (fail_cost per failing stick locked out
  or scrapped after an audit, minus good_cost per good one locked out, minus the inspection
  cost of each inspected stick);
* ``shadow``, ``would_lock``, ``would_realize``: the station's model on a shadow trial, its
  would-be lock-outs among the week's sticks and what they would have realized (hindsight);
* ``lockouts``: the part of ``realized`` that the lock-outs alone brought (no audit samples);
* ``expected`` [``low``, ``high``]: what the scoring model's training stated (per 1,000) --
  a figure for its lock-outs, so the summary checks ``lockouts`` against it;
* ``lr`` / ``gb``: the label-trained oracles -- a logistic regression and a gradient-boosting
  model trained on the *hidden labels* of every stick that arrived at the station in the weeks
  before, calibrated (5-fold sigmoid), locking out at the break-even probability (the bay's
  look included, as every saving here);
* ``best``: the best threshold in hindsight on the product's own probabilities (0 before it
  has a model).

Rows go to ``--out`` (JSON lines, one per station and week; a cut-off run resumes the cases it
has not finished); ``--summary FILE...`` prints the tables and the issue's targets from them.

    .venv/bin/python benchmarks/bench_line.py --scenario shared --seed 0 --out line.jsonl
    .venv/bin/python benchmarks/bench_line.py --summary line.jsonl

Several cases side by side: one process each with ``OMP_NUM_THREADS=1``. The oracles'
gradient boosting uses every core through OpenMP, and two such processes on two cores spin
against each other (measured: a week took 15 minutes instead of 3-5).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sqlalchemy import select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_plant_quality import best_saving  # noqa: E402
from line_tables import summary, week_table  # noqa: E402

from qcllp.features import build_station_features  # noqa: E402
from qcllp.ingest import ingest_defect_counts, ingest_measurements  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.plant.simulate import simulate_plant  # noqa: E402
from qcllp.retraining.retrain import retrain_station  # noqa: E402
from qcllp.retraining.shadow_check import check_trial  # noqa: E402
from qcllp.scoring.step import score_station  # noqa: E402
from qcllp.station.realized import decisions_saving  # noqa: E402
from qcllp.station.registry import RegistryError, get_model, shadow_model  # noqa: E402
from qcllp.store import ShadowFlag, Store  # noqa: E402

CONFIG = ROOT / "plant_config" / "example.yaml"
SCENARIOS = {  # simulate_plant's keyword arguments; "charge": the unseen plant
    "shared": {},
    "sepA": {"defect_stations": {"crack": "furnace", "bend": "rolling", "scale": "cooling"}},
    "sepB": {"defect_stations": {"crack": "cooling", "bend": "furnace", "scale": "rolling"}},
    "charge": {"charge_effect": 3.5},
}
KEY = ("scenario", "seed", "station", "week")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Oracles:
    """The label-trained references of one station: refit each week on every stick that
    arrived there before, calibrated, locking out at break-even."""

    def __init__(self, config, station: str, seed: int) -> None:
        self.config, self.station, self.seed = config, station, seed
        self.costs = config.station(station)
        self.readings: list[pd.DataFrame] = []

    def saving(self, readings: pd.DataFrame, bad: pd.Series) -> dict:
        """Money each oracle makes on this week's sticks (``readings`` of the stations up to
        this one; ``bad``: the truth of every stick of the plant); then the week joins the
        training data."""
        out = {"lr": 0.0, "gb": 0.0}
        if self.readings:
            train = build_station_features(pd.concat(self.readings), self.config, self.station)
            y = bad.reindex(train.X.index).to_numpy()
            week = build_station_features(
                readings, self.config, self.station, imputation=train.imputation
            )
            X = week.X.reindex(columns=train.X.columns)
            truth = bad.reindex(week.X.index).to_numpy()
            if 10 <= y.sum() <= len(y) - 10:
                for name, estimator in self._estimators().items():
                    model = CalibratedClassifierCV(estimator, method="sigmoid", cv=5)
                    p = model.fit(train.X, y).predict_proba(X)[:, 1]
                    locked = p >= self.costs.break_even
                    out[name] = float(self.costs.lockout_value(truth[locked]).sum())
        self.readings.append(readings)
        return out

    def _estimators(self) -> dict:
        return {
            "lr": make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000)),
            "gb": HistGradientBoostingClassifier(random_state=self.seed),
        }


def _costed(station, args):
    """The station as the benchmark runs it: each look at the bay costs ``--inspection-share``
    of its good cost (0 with ``--no-inspections``: locked-out sticks are scrapped unseen), the
    same figure in the product's config, the oracles' break-even and every saving here; its
    ``audit_share`` and ``trial_audit_share`` from ``--audit-share`` and
    ``--trial-audit-share`` when given, else 0 with ``--no-inspections`` (a plant that looks
    at nothing takes no audit samples: they would be scrapped when failing, at no cost, and
    flatter the product)."""
    look = 0.0 if args.no_inspections else args.inspection_share * station.good_cost
    share, trial = (
        (0.0, 0.0) if args.no_inspections else (station.audit_share, station.trial_audit_share)
    )
    share = share if args.audit_share is None else args.audit_share
    trial = trial if args.trial_audit_share is None else args.trial_audit_share
    return replace(station, inspection_cost=look, audit_share=share, trial_audit_share=trial)


def weekly_arrivals(plant, per_week: int):  # noqa: ANN001, ANN201 - a SimulatedPlant
    """The plant with its charges arriving ``per_week`` to 7 days, evenly: each charge's
    readings moved in time as a whole (the simulator starts a charge every ~48 minutes). The
    product counts a week by the charges' times (the interval a model states is for the
    charges of 7 days), so the benchmark's weeks must be 7 days of them."""
    readings = plant.readings
    charges = plant.defect_counts["charge_id"].astype(str)
    first = readings.groupby(readings["charge_id"].astype(str), observed=True)["timestamp"].min()
    target = first.min() + pd.Timedelta(days=7) / per_week * pd.Series(
        range(len(charges)), index=charges.to_numpy()
    )
    shift = (target - first.reindex(target.index)).reindex(readings["charge_id"].astype(str))
    moved = readings.assign(timestamp=readings["timestamp"] + shift.to_numpy())
    return replace(plant, readings=moved)


class Line:
    """One simulated plant run week by week through the product (module docstring)."""

    def __init__(self, config, folder: Path, scenario: str, seed: int, args) -> None:
        config = replace(config, stations=tuple(_costed(st, args) for st in config.stations))
        self.config = replace(config, path=folder / "plant.yaml")
        self.folder, self.scenario, self.seed, self.args = folder, scenario, seed, args
        n = args.weeks * args.charges_per_week
        plant = simulate_plant(config, n, random_state=3000 + seed, **SCENARIOS[scenario])
        self.plant = weekly_arrivals(plant, args.charges_per_week)
        truth = self.plant.truth.set_index(["charge_id", "stick_id"])["defect"]
        self.truth, self.bad = truth, truth != "ok"
        self.charges = self.plant.defect_counts["charge_id"].tolist()
        self.store = Store.open(f"sqlite:///{folder / 'plant.sqlite'}")
        self.oracles = {s: Oracles(self.config, s, seed) for s in config.station_names}
        self.retrained: dict[str, str] = {}

    def week(self, w: int) -> list[dict]:
        """Run week ``w`` (0-based) in steps of ``--step-charges`` charges (per step: the
        stations in line order, each locked-out stick inspected at once), then final QC and the
        retraining; the rows of its stations."""
        per, step = self.args.charges_per_week, self.args.step_charges
        chosen = self.charges[w * per : (w + 1) * per]
        readings = self.plant.readings[self.plant.readings["charge_id"].isin(chosen)]
        removed = pd.MultiIndex.from_tuples([], names=["charge_id", "stick_id"])
        names = self.config.station_names
        decided = {s: [] for s in names}
        for start in range(0, len(chosen), step):
            part = readings[readings["charge_id"].isin(chosen[start : start + step])]
            sticks = pd.MultiIndex.from_frame(part[["charge_id", "stick_id"]].astype(str))
            for station in names:
                at = part[(part["station"] == station) & ~sticks.isin(removed)]
                frame = self.score(f"w{w:02d}-{start:03d}", station, at)
                decided[station].append(frame)
                locked = frame.index[frame["decision"] == "lock_out"]
                audited = frame.index[frame["decision"] == "inspect"]
                scrapped = audited[self.bad.reindex(audited).to_numpy(bool)]
                removed = removed.append(locked).append(scrapped)
                self.inspect(f"w{w:02d}-{start:03d}", station, locked.append(audited))
        self.final_qc(w, readings, removed)
        rows = [
            self.measure(w, i, station, readings, pd.concat(decided[station]))
            for i, station in enumerate(names)
        ]
        for station in names:
            trial = check_trial(self.store, self.config, station)
            outcome = retrain_station(self.store, self.config, station)
            self.retrained[station] = f"{outcome.outcome}: {outcome.reason}"[:160]
            if trial is not None:
                self.retrained[station] += f" | trial {trial.outcome}: {trial.reason}"[:160]
        return rows

    def score(self, tag: str, station: str, at: pd.DataFrame) -> pd.DataFrame:
        """Ingest ``at`` (readings at ``station``) and score the station; one row per stick
        that arrived (index charge_id, stick_id): probability, decision (``none`` before the
        station has a model), model."""
        path = self.folder / f"{tag}-{station}.parquet"
        at.to_parquet(path, index=False)
        ingest_measurements(self.store, self.config, path)
        arrived = pd.MultiIndex.from_frame(at[["charge_id", "stick_id"]].astype(str)).unique()
        frame = pd.DataFrame(
            {"probability": np.nan, "decision": "none", "model": np.nan}, index=arrived
        )
        try:
            scored = score_station(self.store, self.config, station)
        except RegistryError:  # no model yet: nothing is locked out
            return frame
        scores = scored.scores
        index = pd.MultiIndex.from_frame(scores[["charge_id", "stick_id"]].astype(str))
        mine = index.isin(arrived)
        frame.loc[index[mine], "probability"] = scores["probability"].to_numpy(float)[mine]
        frame.loc[index[mine], "decision"] = scores["decision"].to_numpy()[mine]
        frame.loc[index[mine], "model"] = scored.model_id
        return frame

    def measure(
        self, w: int, i: int, station: str, readings: pd.DataFrame, frame: pd.DataFrame
    ) -> dict:
        """The station's week against the truth (module docstring), next to the oracles."""
        costs = self.config.station(station)
        row = {"scenario": self.scenario, "seed": self.seed, "station": station, "week": w + 1}
        row |= {"sticks": len(frame), "retrain": self.retrained.get(station, "")}
        sticks = pd.MultiIndex.from_frame(readings[["charge_id", "stick_id"]].astype(str))
        upto = readings[
            sticks.isin(frame.index) & readings["station"].isin(self.config.station_names[: i + 1])
        ]
        row |= self.oracles[station].saving(upto, self.bad)
        decided = frame[frame["decision"].isin(["lock_out", "pass", "inspect"])]
        bad = self.bad.reindex(decided.index).to_numpy()
        locked = (decided["decision"] == "lock_out").to_numpy()
        audited = (decided["decision"] == "inspect").to_numpy()
        models = decided["model"].dropna()
        model = int(models.iloc[-1]) if len(models) else None
        metrics = (get_model(self.store, model)["metrics"] or {}) if model else {}
        return (
            row
            | self.shadow_week(station, frame.index)
            | {
                "model": model,
                "locked": int(locked.sum()),
                "failing": int((locked & bad).sum()),
                "audits": int(audited.sum()),
                "audits_failing": int((audited & bad).sum()),
                "realized": decisions_saving(locked, audited, bad, costs),
                "lockouts": decisions_saving(locked, np.zeros_like(locked), bad, costs),
                "best": best_saving(decided["probability"].to_numpy(float), bad, costs),
                "expected": metrics.get("expected_saving_per_1000"),
                "low": metrics.get("saving_low_per_1000"),
                "high": metrics.get("saving_high_per_1000"),
                "basis": saving_basis(metrics),
                "period": metrics.get("saving_period_charges"),
            }
        )

    def shadow_week(self, station: str, sticks: pd.MultiIndex) -> dict:
        """The station's shadow model (if any) on this week's sticks: its would-be lock-outs
        and what they would have realized against the truth (the benchmark's hindsight; the
        product judges a trial by counts and inspections, :mod:`qcllp.retraining`)."""
        record = shadow_model(self.store, station)
        if record is None:
            return {"shadow": None, "would_lock": 0, "would_realize": 0.0}
        t = ShadowFlag.__table__
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                select(t.c.charge_id, t.c.stick_id).where(
                    t.c.model_id == record["id"], t.c.decision == "lock_out"
                )
            ).all()
        would = pd.MultiIndex.from_tuples([tuple(r) for r in rows]) if rows else sticks[:0]
        would = would[would.isin(sticks)]
        bad = self.bad.reindex(would).to_numpy(bool)
        costs = self.config.station(station)
        return {
            "shadow": int(record["id"]),
            "would_lock": len(would),
            "would_realize": float(costs.lockout_value(bad.astype(float)).sum()),
        }

    @property
    def inspecting(self) -> bool:
        return not self.args.no_inspections

    def final_qc(self, w: int, readings: pd.DataFrame, removed: pd.MultiIndex) -> None:
        """Final QC's counts of the week's charges over the sticks that reached it."""
        sticks = self.truth[self.truth.index.get_level_values(0).isin(readings["charge_id"])]
        reached = sticks[~sticks.index.isin(removed)]
        counts = pd.crosstab(reached.index.get_level_values(0), reached.to_numpy())
        counts = counts.reindex(columns=list(self.config.defect_types), fill_value=0)
        counts.insert(0, "n_sticks", reached.groupby(level=0).size())
        path = self.folder / f"w{w:02d}-defects.csv"
        counts.rename_axis("charge_id").reset_index().to_csv(path, index=False)
        ingest_defect_counts(self.store, self.config, path)

    def inspect(self, tag: str, station: str, locked: pd.MultiIndex) -> None:
        """The sticks just locked out at ``station``, inspected at the lock-out bay (their
        hidden truth) and ingested at once, as an inspector would type them in."""
        if not self.inspecting or not len(locked):
            return
        from qcllp.ingest import ingest_inspections

        path = self.folder / f"{tag}-{station}-inspections.csv"
        pd.DataFrame(
            {
                "charge_id": locked.get_level_values(0),
                "stick_id": locked.get_level_values(1),
                "station": station,
                "result": self.truth.reindex(locked).to_numpy(),
            }
        ).to_csv(path, index=False)
        ingest_inspections(self.store, self.config, path)


def run_case(config, scenario: str, seed: int, args) -> None:
    """Run one plant for ``args.weeks`` weeks, appending each week's rows to ``args.out``."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        line = Line(config, Path(tmp), scenario, seed, args)
        try:
            for w in range(args.weeks):
                rows = line.week(w)
                with open(args.out, "a") as out:
                    for row in rows:
                        row["case_s"] = round(time.perf_counter() - started, 1)
                        out.write(json.dumps(row) + "\n")
                say(
                    f"{scenario} seed {seed} week {w + 1}: "
                    + ", ".join(
                        f"{r['station']} {1000 * r['realized'] / max(r['sticks'], 1):+.0f}"
                        for r in rows
                    )
                )
        finally:
            line.store.close()


def lockouts_column(rows: pd.DataFrame, config, args) -> pd.DataFrame:
    """``rows`` with ``lockouts`` filled where a run from before the column left it out: from
    the week's ``locked`` and ``failing`` counts at the station's costs as ``args`` set them."""
    if "lockouts" not in rows:
        rows = rows.assign(lockouts=np.nan)
    for station in rows["station"].unique():
        costs = _costed(config.station(station), args)
        gap = (rows["station"] == station) & rows["lockouts"].isna()
        failing, locked = rows.loc[gap, "failing"], rows.loc[gap, "locked"]
        value = failing * costs.lockout_value(1.0) + (locked - failing) * costs.lockout_value(0.0)
        rows.loc[gap, "lockouts"] = value
    return rows


def saving_basis(metrics: dict) -> str | None:
    """What a model's stated saving stands on (:class:`qcllp.station.lockout_rule.SavingEstimate`):
    ``inspected``, ``in-sample`` or ``held-out``; ``None`` without a model."""
    if not metrics:
        return None
    if "threshold_inspected" in metrics:
        return "inspected"
    return "in-sample" if metrics.get("saving_in_sample") else "held-out"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="shared")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--weeks", type=int, default=12)
    parser.add_argument("--charges-per-week", type=int, default=25)
    parser.add_argument("--step-charges", type=int, default=5)
    parser.add_argument("--inspection-share", type=float, default=0.05)
    parser.add_argument("--no-inspections", action="store_true")
    parser.add_argument("--audit-share", type=float, help="every station's audit_share")
    parser.add_argument("--trial-audit-share", type=float, help="every station's trial_audit_share")
    parser.add_argument("--out", type=Path, default=Path("line.jsonl"))
    parser.add_argument("--summary", type=Path, nargs="*")
    parser.add_argument("--case", nargs=3, metavar=("SCENARIO", "SEED", "STATION"))
    args = parser.parse_args(argv)
    config = load_plant_config(CONFIG)
    middle = config.station_names[len(config.station_names) // 2]
    if args.summary:
        rows = pd.concat(pd.read_json(p, lines=True) for p in args.summary)
        rows = lockouts_column(rows.drop_duplicates(list(KEY), keep="last"), config, args)
        summary(rows, middle)
        if args.case:
            week_table(rows, args.case[0], int(args.case[1]), args.case[2])
        return 0
    done = set()
    if args.out.exists():
        old = pd.read_json(args.out, lines=True)
        full = old.groupby(["scenario", "seed"])["week"].max() >= args.weeks
        done = set(full[full].index)
        kept = old[old.set_index(["scenario", "seed"]).index.isin(done)]
        kept.to_json(args.out, orient="records", lines=True)  # a cut-off case starts again
    for seed in args.seeds:
        if (args.scenario, seed) not in done:
            run_case(config, args.scenario, seed, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
