"""The one-command demo: a simulated plant from raw files to lock-out flags and a report.

simulate -> ingest (files, as a plant delivers them) -> train every station -> promote ->
run the line on fresh charges, day by day (:data:`DAY_CHARGES` a day): each day's
measurements are ingested and scored at every station (flags in the database), and final QC
reports the previous day's charges -- their counts among the sticks the line did not lock
out -- which the scorers compare with what their models predicted (the lock-out guard's count
rule, :mod:`qcllp.scoring.count_guard`: a model that over-predicts on this plant has its lock-outs
suspended from then on) -> measure the flags against the simulator's hidden per-stick truth
-> HTML report. Everything lives in one folder on the embedded SQLite database.

The demo trains with a smaller search than a plant's nightly retraining (3 charge folds,
:data:`DEMO_GRIDS`) so that it finishes in two to four minutes on two cores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import yaml

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import PlantConfig, example_config_path
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation
from qcllp.reporting.plant_report import build_plant_report, fresh_figures
from qcllp.reporting.status import plant_status
from qcllp.scoring.step import flags_frame, score_station
from qcllp.station.registry import promote
from qcllp.store import Store, StoreError
from qcllp.training.train import station_costs, train_station

__all__ = [
    "DAY_CHARGES",
    "DEMO_DATABASE",
    "DEMO_GRIDS",
    "DemoResult",
    "demo_database_url",
    "final_qc_counts",
    "run_demo",
]

DEMO_DATABASE = "plant.sqlite"  # the demo's database file in its folder
DAY_CHARGES = 5  # fresh charges a day; final QC reports a day's charges the next day
# Smaller searches than a nightly retraining, so the demo stays around two minutes.
DEMO_GRIDS = {
    "alter-psvm": {"C": [0.1, 1.0], "C_p": [10.0]},
    "kmeans-labeler": {"n_clusters": [16]},
}


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things and how the flags did against the hidden truth."""

    folder: Path
    database_url: str
    report: Path
    table: pd.DataFrame
    config_path: Path  # the demo plant's YAML, pointing at its database
    final_qc: pd.DataFrame | None = None  # per station: final QC's counts against the model

    def as_dict(self) -> dict:
        return {
            "folder": str(self.folder),
            "config": str(self.config_path),
            "database": self.database_url,
            "report": str(self.report),
            "stations": self.table.reset_index().to_dict(orient="records"),
            "final_qc": []
            if self.final_qc is None
            else self.final_qc.reset_index().to_dict(orient="records"),
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
    """Run the whole chain in ``folder``; returns the per-station table and the report path.

    The demo starts from an empty database: a ``folder`` holding one (an earlier demo's) is
    refused with :class:`StoreError` rather than mixed into, which would skip the files it
    had ingested and score charges final QC had reported there, and leave the tables empty.
    """
    folder = Path(folder).resolve()
    url = demo_database_url(folder)
    if (folder / DEMO_DATABASE).exists():
        raise StoreError(
            f"{folder / DEMO_DATABASE} exists (an earlier demo?): the demo starts from an empty "
            "plant database; give it a new --workdir or remove that folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
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
        fresh = simulate_plant(
            config,
            fresh_charges,
            random_state=random_state + 1,
            start=start,
            first_charge=n_charges + 1,
        )
        _run_the_line(store, config, fresh, folder, say)
        truth = fresh.truth.astype({"charge_id": str, "stick_id": str})
        defect = truth.set_index(["charge_id", "stick_id"])["defect"]
        table = _fresh_table(store, config, defect != "ok")
        qc = _qc_table(plant_status(store, config))
        report = build_plant_report(store, config, folder / "report.html", truth=defect)
    return DemoResult(folder, url, report, table, _write_config(config, folder, url), qc)


def _run_the_line(
    store: Store,
    config: PlantConfig,
    fresh: SimulatedPlant,
    folder: Path,
    say: Callable[[str], None],
) -> None:
    """The fresh charges through the line, :data:`DAY_CHARGES` a day: each day's readings
    ingested and scored at every station, final QC reporting the day before's charges."""
    n = len(fresh.defect_counts)  # one row per charge
    days = range(0, n, DAY_CHARGES)
    say(f"{n} fresh charges run through the line in {len(days)} days")
    for day, first in enumerate(days, 1):
        today = fresh.charges(first, first + DAY_CHARGES)
        write_simulation(today, folder / "fresh" / f"day-{day:02d}")
        ingest_measurements(store, config, folder / "fresh" / f"day-{day:02d}" / "measurements")
        for station in config.station_names:
            score_station(store, config, station)
        if day > 1:  # final QC reports yesterday's charges
            _report_final_qc(store, config, fresh.charges(first - DAY_CHARGES, first), folder)
    _report_final_qc(store, config, fresh.charges(days[-1], n), folder)
    for station in config.station_names:
        score_station(store, config, station)  # the scorers take the last counts in


def _fresh_table(store: Store, config: PlantConfig, failing: pd.Series) -> pd.DataFrame:
    """Per station: its flags measured against the simulator's per-stick truth ``failing``."""
    rows = [
        {"station": station, **fresh_figures(flags_frame(store, station), failing, costs)}
        for station in config.station_names
        for costs in [station_costs(config, station)]
    ]
    return pd.DataFrame(rows).set_index("station")


def demo_database_url(folder: str | Path) -> str:
    """The URL of the demo's database in ``folder`` (an SQLite file)."""
    return f"sqlite:///{Path(folder).resolve() / DEMO_DATABASE}"


def _report_final_qc(
    store: Store, config: PlantConfig, charges: SimulatedPlant, folder: Path
) -> None:
    """Final QC's file for these charges, as the line delivers it, ingested."""
    first = charges.truth["charge_id"].astype(str).min()
    path = folder / "fresh" / "final_qc" / f"final_qc_{first}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = final_qc_counts(charges, flags_frame(store), list(config.defect_types))
    counts.to_csv(path, index=False)
    ingest_defect_counts(store, config, path)


def final_qc_counts(
    plant: SimulatedPlant, flags: pd.DataFrame, defect_types: list[str]
) -> pd.DataFrame:
    """Final QC's report of a simulated plant's charges as the line delivers it: per charge
    the sticks that reached QC (not locked out at any station) and their defects by type; a
    charge whose every stick was locked out is not reported."""
    truth = plant.truth.astype({"charge_id": str, "stick_id": str})
    locked = flags.loc[flags["decision"] == "lock_out", ["charge_id", "stick_id"]]
    out = pd.MultiIndex.from_frame(locked.astype(str))
    reached = truth[~pd.MultiIndex.from_frame(truth[["charge_id", "stick_id"]]).isin(out)]
    counts = pd.crosstab(reached["charge_id"], reached["defect"])
    report = pd.DataFrame({"n_sticks": counts.sum(axis=1)})
    for kind in defect_types:
        report[kind] = counts.get(kind, 0)
    return report.rename_axis("charge_id").reset_index()


def _qc_table(status: dict) -> pd.DataFrame:
    """Per station: the charges final QC's counts were compared on, failures predicted among
    the sticks that reached it and reported, and the guard's verdict."""
    rows = []
    for s in status["stations"]:
        guard = s["lockout_guard"] or {}
        rows.append(
            {
                "station": s["station"],
                "charges_compared": guard.get("qc_charges", 0),
                "failures_predicted": guard.get("qc_predicted", 0.0),
                "failures_reported": guard.get("qc_reported", 0),
                "over_prediction": guard.get("qc_excess", 0.0),
                "lockouts": "suspended" if s["lockout_suspended"] else "on",
            }
        )
    return pd.DataFrame(rows).set_index("station")


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
