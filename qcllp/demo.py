"""The one-command demo: a simulated plant from raw files to lock-out flags and a report.

simulate -> ingest (files, as a plant delivers them) -> train every station -> a model that
locks out goes on a **shadow trial** (the retraining daemon's rule,
:func:`qcllp.retraining.promotion.shadow_reason`), one that locks out nothing goes active ->
run the line on fresh charges, day by day (:data:`DAY_CHARGES` a day): each day's
measurements are ingested and scored at every station (flags in the database; a shadow
model's would-be decisions in ``shadow_flags``, a share of its would-be lock-outs taken aside
as audit samples), every stick locked out or taken aside is inspected and the results typed
in that day (:func:`qcllp.ingest.ingest_inspections`), final QC reports the previous day's
charges -- their counts among the sticks that reached it -- which the scorers compare with
what their models predicted (:mod:`qcllp.scoring.count_guard`), and the daemon's job judges
each shadow trial on the inspections and counts (:func:`qcllp.retraining.shadow_check.
check_trial`: confirmed and active, rejected, or waiting) -> measure the flags against the
simulator's hidden per-stick truth -> HTML report. Everything lives in one folder on the
embedded SQLite database.

The demo trains with a smaller search than a plant's nightly retraining (3 charge folds,
:data:`DEMO_GRIDS`) and runs a shorter trial (:data:`DEMO_TRIAL`: 30 fresh charges are not a
plant's weeks) so that it finishes in about a minute or two on two cores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import yaml
from sqlalchemy import select

from qcllp.ingest import ingest_defect_counts, ingest_inspections, ingest_measurements
from qcllp.plant.config import PlantConfig, example_config_path
from qcllp.plant.simulate import SimulatedPlant, simulate_plant, write_simulation
from qcllp.reporting.plant_report import build_plant_report, fresh_figures
from qcllp.reporting.status import plant_status
from qcllp.retraining.promotion import shadow_reason
from qcllp.retraining.shadow_check import check_trial
from qcllp.scoring.step import flags_frame, score_station
from qcllp.station.registry import RegistryError, load_model, promote
from qcllp.store import Inspection, ShadowFlag, Store, StoreError
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
# A shorter shadow trial than a plant's (two days of charges, ten inspected would-be
# lock-outs): 30 fresh charges are six days.
DEMO_TRIAL = {"shadow_min_charges": 10, "shadow_min_audits": 10}


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
    config = _demo_config(config, url)

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
            _promote(store, result.model_id, say)
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


def _demo_config(config: PlantConfig, url: str) -> PlantConfig:
    """The demo's plant: its database, the smaller search, the shorter trial."""
    training = replace(config.training, cv=3, methods={**config.training.methods, **DEMO_GRIDS})
    retrainer = replace(config.retrainer, **DEMO_TRIAL)
    return replace(config, database_url=url, training=training, retrainer=retrainer)


def _promote(store: Store, model_id: int, say: Callable[[str], None]) -> None:
    """As the daemon's gate would: a model that locks out goes on a shadow trial first."""
    why = shadow_reason(load_model(store, model_id).model, None)
    row = promote(store, model_id, shadow=why is not None)
    if why is not None:
        say(f"model {model_id} of {row['station']} on a shadow trial: {why}")


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
        _score_stations(store, config)
        _inspect(store, config, fresh, folder / "fresh" / f"day-{day:02d}")
        if day > 1:  # final QC reports yesterday's charges
            _report_final_qc(store, config, fresh.charges(first - DAY_CHARGES, first), folder)
            _judge_trials(store, config, say)
    _report_final_qc(store, config, fresh.charges(days[-1], n), folder)
    _score_stations(store, config)  # the scorers take the last counts in
    _judge_trials(store, config, say)


def _score_stations(store: Store, config: PlantConfig) -> None:
    """Every station scored, as its scorer would; one whose trial was rejected has no model
    any more and waits for the next retraining, as on the line."""
    for station in config.station_names:
        try:
            score_station(store, config, station)
        except RegistryError:
            continue


def _inspect(store: Store, config: PlantConfig, plant: SimulatedPlant, day: Path) -> None:
    """Every stick locked out or taken aside as an audit sample and not inspected yet is
    looked at (the simulator's truth) and the results typed in, as an inspector would."""
    flags = flags_frame(store)
    taken = flags[flags["decision"].isin(["lock_out", "inspect"])]
    keys = ["station", "charge_id", "stick_id"]
    with store.engine.connect() as conn:
        stored = conn.execute(select(*(Inspection.__table__.c[k] for k in keys))).all()
    done = pd.DataFrame(stored, columns=keys)
    todo = taken[~pd.MultiIndex.from_frame(taken[keys]).isin(pd.MultiIndex.from_frame(done[keys]))]
    if todo.empty:
        return
    truth = plant.truth.astype({"charge_id": str, "stick_id": str})
    result = todo[keys].merge(truth[["charge_id", "stick_id", "defect"]], how="inner")
    path = day / "inspections.csv"
    result.rename(columns={"defect": "result"}).to_csv(path, index=False)
    ingest_inspections(store, config, path)


def _judge_trials(store: Store, config: PlantConfig, say: Callable[[str], None]) -> None:
    """The daemon's shadow-trial job at every station; a confirmation or rejection said."""
    for station in config.station_names:
        check = check_trial(store, config, station)
        if check is not None and check.outcome in ("confirmed", "rejected", "inconclusive"):
            say(f"{station}: shadow trial of {check.state()}")


def _fresh_table(store: Store, config: PlantConfig, failing: pd.Series) -> pd.DataFrame:
    """Per station: the line's decisions measured against the simulator's per-stick truth
    ``failing`` (:func:`_line_decisions`)."""
    rows = [
        {
            "station": station,
            **fresh_figures(
                _line_decisions(store, station), failing, station_costs(config, station)
            ),
        }
        for station in config.station_names
    ]
    return pd.DataFrame(rows).set_index("station")


def _line_decisions(store: Store, station: str) -> pd.DataFrame:
    """What the line did with every stick scored at ``station``: its flag, or -- for a stick
    only a shadow model decided (the line acted on nothing) -- a pass at the shadow's
    probability, so that a station on trial is measured on all its sticks, not its audits."""
    flags = flags_frame(store, station)
    t = ShadowFlag.__table__
    columns = ["charge_id", "stick_id", "probability", "decision"]
    with store.engine.connect() as conn:
        rows = conn.execute(select(*(t.c[c] for c in columns)).where(t.c.station == station))
        shadow = pd.DataFrame(rows.all(), columns=columns)
    keys = ["charge_id", "stick_id"]
    flagged = (
        pd.MultiIndex.from_frame(flags[keys])
        if len(flags)
        else pd.MultiIndex.from_tuples([], names=keys)
    )
    alone = shadow[~pd.MultiIndex.from_frame(shadow[keys]).isin(flagged)] if len(shadow) else shadow
    alone = alone.drop_duplicates(keys).assign(decision="pass")
    alone = alone[alone["probability"].notna()].astype({"probability": float})
    return pd.concat([flags[columns], alone], ignore_index=True)


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
    the sticks that reached QC (not locked out at any station, not scrapped after an audit)
    and their defects by type; a charge whose every stick was taken off is not reported."""
    truth = plant.truth.astype({"charge_id": str, "stick_id": str})
    failing = truth.set_index(["charge_id", "stick_id"])["defect"] != "ok"
    taken = flags[flags["decision"].isin(["lock_out", "inspect"])]
    out = pd.MultiIndex.from_frame(taken[["charge_id", "stick_id"]].astype(str))
    scrapped = (taken["decision"] == "lock_out").to_numpy() | failing.reindex(out).to_numpy(bool)
    out = out[scrapped]  # a locked-out stick, or an audit sample that failed its inspection
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
