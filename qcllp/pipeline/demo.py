"""The one-command demo: a simulated plant from raw files to lock-out flags and a report.

simulate -> ingest (files, as a plant delivers them) -> train every station -> promote ->
simulate a fresh batch of charges and ingest its measurements -> score it at every station
(flags in the database) -> measure the flags against the simulator's hidden per-stick truth ->
HTML report. Everything lives in one folder on the embedded SQLite database.

The demo trains with a smaller search than a plant's nightly retraining (3 charge folds,
:data:`DEMO_GRIDS`) so that it finishes in about two minutes on two cores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import yaml
from sklearn.metrics import roc_auc_score

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import PlantConfig, example_config_path
from qcllp.plant.simulate import simulate_plant, write_simulation
from qcllp.store import Store

from .plant_report import build_plant_report
from .registry import promote
from .scoring import score_station
from .thresholds import LockoutCosts, realized_saving_per_1000
from .train import train_station

__all__ = ["DEMO_GRIDS", "DemoResult", "run_demo"]

# Smaller searches than a nightly retraining, so the demo stays around two minutes.
DEMO_GRIDS = {"alter-psvm": {"C": [0.1, 1.0], "C_p": [10.0]}, "kmeans-labeler": {"n_clusters": [6]}}


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things and how the flags did against the hidden truth."""

    folder: Path
    database_url: str
    report: Path
    table: pd.DataFrame
    config_path: Path  # the demo plant's YAML, pointing at its database

    def as_dict(self) -> dict:
        return {
            "folder": str(self.folder),
            "config": str(self.config_path),
            "database": self.database_url,
            "report": str(self.report),
            "stations": self.table.reset_index().to_dict(orient="records"),
        }


def run_demo(
    config: PlantConfig,
    folder: str | Path,
    *,
    n_charges: int = 100,
    fresh_charges: int = 30,
    method_name: str | None = None,
    random_state: int = 0,
    say: Callable[[str], None] = lambda _msg: None,
) -> DemoResult:
    """Run the whole chain in ``folder``; returns the per-station table and the report path."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'plant.sqlite'}"
    training = replace(config.training, cv=3, methods={**config.training.methods, **DEMO_GRIDS})
    config = replace(config, database_url=url, training=training)

    say(f"simulating {n_charges} charges of {config.name}")
    history = simulate_plant(config, n_charges, random_state=random_state)
    files = write_simulation(history, folder / "history")
    with Store.open(url) as store:
        say("ingesting measurements and final-QC defect counts")
        ingest_measurements(store, config, folder / "history" / "measurements")
        ingest_defect_counts(store, config, files["defects"])

        for station in config.station_names:
            say(f"training {station}")
            result = train_station(
                store,
                config,
                station,
                method_name=method_name,
                random_state=random_state,
                progress=say,
            )
            promote(store, result.model_id)

        start = history.readings["timestamp"].max() + pd.Timedelta(hours=1)
        say(f"a fresh batch of {fresh_charges} charges arrives")
        fresh = simulate_plant(
            config,
            fresh_charges,
            random_state=random_state + 1,
            start=start,
            first_charge=n_charges + 1,
        )
        write_simulation(fresh, folder / "fresh")
        ingest_measurements(store, config, folder / "fresh" / "measurements")

        truth = fresh.truth.astype({"charge_id": str, "stick_id": str})
        failing = truth.set_index(["charge_id", "stick_id"])["defect"] != "ok"
        rows = []
        for station in config.station_names:
            say(f"scoring {station}")
            scored = score_station(store, config, station)
            rows.append(_station_figures(config, station, scored.scores, scored.threshold, failing))
        report = build_plant_report(store, config, folder / "report.html")
    table = pd.DataFrame(rows).set_index("station")
    return DemoResult(folder, url, report, table, _write_config(config, folder, url))


def _write_config(config: PlantConfig, folder: Path, url: str) -> Path:
    """The demo plant's YAML in ``folder``: the plant it ran, its database in ``folder``, so
    that every ``qcllp --config <folder>/plant.yaml ...`` command looks at the demo's results."""
    source = Path(config.path) if config.path is not None else example_config_path()
    raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    raw["database_url"] = url
    raw.pop("connectors", None)  # the example's drop folders are not the demo's
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def _station_figures(
    config: PlantConfig, station: str, scores: pd.DataFrame, threshold: float, failing: pd.Series
) -> dict:
    """ROC AUC, lock-out precision/recall and the realised saving against the hidden truth
    (of the sticks the model could score; unscorable ones are counted apart)."""
    unscorable = int((scores["decision"] == "unscorable").sum())
    scores = scores[scores["decision"] != "unscorable"]
    truth = failing.reindex(pd.MultiIndex.from_frame(scores[["charge_id", "stick_id"]]))
    t = truth.to_numpy(dtype=bool)
    flagged = (scores["decision"] == "lock_out").to_numpy()
    station_cfg = config.station(station)
    costs = LockoutCosts(station_cfg.fail_cost, station_cfg.good_cost)
    return {
        "station": station,
        "sticks": len(scores),
        "unscorable": unscorable,
        "defective_share": float(t.mean()),
        "roc_auc": float(roc_auc_score(t, scores["probability"]))
        if 0 < t.sum() < len(t)
        else float("nan"),
        "locked_out": int(flagged.sum()),
        "precision": float((flagged & t).sum() / max(flagged.sum(), 1)),
        "recall": float((flagged & t).sum() / max(t.sum(), 1)),
        "saving_per_1000": (
            realized_saving_per_1000(scores["probability"].to_numpy(float), t, threshold, costs)
            if len(scores)
            else 0.0
        ),
    }
