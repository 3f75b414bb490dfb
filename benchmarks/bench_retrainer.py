"""The retraining daemon's costs on SQLite (the example plant): what a poll of the watched
folders costs as files pile up, what a drift check costs as history grows, what a nightly
retraining of one station costs. Prints markdown tables; medians of repeats; all figures in one
run.

poll -- an idle ingest poll (nothing new) of a drop folder holding N already ingested files::

    .venv/bin/python benchmarks/bench_retrainer.py poll [--files 100,1000] [--repeats 5]

  N defect-count files (one charge each, the cheapest batch to build) are ingested once; then
  the poll is timed as ``qcllp ingest`` does it (every file's SHA-256 read and looked up), as
  the daemon does it (:class:`qcllp.ingest.batches.FileMemo`: files handled before are passed
  over by path, size and mtime, but the folder is still listed) and with the connector's
  ``archive`` folder (done files moved out: the watched folder is empty). Target: the
  daemon's poll flat in N.

drift -- one drift check (both signals) of one station after new counts arrived, with H
history charges stored::

    .venv/bin/python benchmarks/bench_retrainer.py drift [--history 100,800] [--repeats 3]

  The model is trained on the first 60 charges (fast setup); the check looks at the newest
  ``drift.window_charges`` (20); the reference of the feature signal is cached per model as in
  the daemon (the first check builds it and is reported apart).

retrain -- one station's retraining (train up to the holdout, register, gate) with the plant
config's training setup (default: alter-psvm grid, per-type models, 5 folds, 30 resamples;
``--method auto``: every method with a grid in the config, the best kept, each one's figures
printed)::

    .venv/bin/python benchmarks/bench_retrainer.py retrain [--charges 100] [--station cooling] \
        [--method auto]

signals -- what the two drift signals see: one simulation of 62 charges split in time, the
first 48 (with counts) train each station's model (fast setup, holdout 12), the last 14 arrive
as they are, with four sensors reading 3 standard deviations high (``shifted``), or with the
defect rate tripled (``worse``); per station the feature signal's top PSI against its limit and
the count signal's bag error against its limit::

    .venv/bin/python benchmarks/bench_retrainer.py signals [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.ingest.batches import FileMemo
from qcllp.plant.config import Retrainer, Training, load_plant_config
from qcllp.plant.simulate import simulate_plant, write_simulation
from qcllp.retraining.drift import count_drift, feature_drift, watch_station
from qcllp.retraining.retrain import retrain_station
from qcllp.station.registry import get_model, load_model
from qcllp.store import Store

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "plant_config" / "example.yaml"
FAST = Training(default_method="invcal", methods={"invcal": {"C_p": [1.0]}}, cv=2, bootstrap=5)


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def poll(args: argparse.Namespace) -> None:
    config = load_plant_config(CONFIG)
    print(f"\n## idle poll of a drop folder ({machine()}; median of {args.repeats})\n")
    print(
        "| files already ingested | `qcllp ingest` (checksum every file) | daemon (FileMemo) "
        "| daemon with `archive` |"
    )
    print("|---:|---:|---:|---:|")
    for n in [int(x) for x in args.files.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "defects"
            folder.mkdir()
            sim = simulate_plant(config, n, random_state=1, sticks_per_charge=(2, 3))
            for i, row in enumerate(sim.defect_counts.itertuples(index=False)):
                pd.DataFrame([row._asdict()]).to_csv(folder / f"counts-{i:05d}.csv", index=False)
            with Store.open(f"sqlite:///{Path(tmp) / 'p.sqlite'}") as store:
                memo = FileMemo()
                ingest_defect_counts(store, config, folder, memo=memo)  # all ingested once
                plain = timed(lambda s=store, f=folder: ingest_defect_counts(s, config, f), 3)
                daemon = timed(
                    lambda s=store, f=folder, m=memo: ingest_defect_counts(s, config, f, memo=m),
                    args.repeats,
                )
                done = Path(tmp) / "done"
                ingest_defect_counts(store, config, folder, archive=done)  # moves them all
                archived = timed(
                    lambda s=store, f=folder, m=memo, d=done: ingest_defect_counts(
                        s, config, f, memo=m, archive=d
                    ),
                    args.repeats,
                )
        print(
            f"| {n:,} | {1000 * statistics.median(plain):.1f} ms "
            f"| {1000 * statistics.median(daemon):.1f} ms "
            f"| {1000 * statistics.median(archived):.2f} ms |"
        )


def _plant(folder: Path, charges: int, config):
    sim = simulate_plant(config, charges, random_state=2)
    files = write_simulation(sim, folder / "sim")
    store = Store.open(f"sqlite:///{folder / 'p.sqlite'}")
    ingest_measurements(store, config, folder / "sim" / "measurements")
    ingest_defect_counts(store, config, files["defects"])
    return store


def drift(args: argparse.Namespace) -> None:
    base = load_plant_config(CONFIG)
    config = replace(base, training=FAST, retrainer=Retrainer(holdout_charges=20))
    station = "cooling"
    print(f"\n## one drift check of {station} ({machine()}; median of {args.repeats})\n")
    print("| history charges | first check (builds the reference) | later checks |")
    print("|---:|---:|---:|")
    for h in [int(x) for x in args.history.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            store = _plant(Path(tmp), h, config)
            first_60 = store.read_charge_times().sort_values().index[:60]
            until = store.read_charge_times()[first_60].max() + pd.Timedelta(microseconds=1)
            from qcllp.station.registry import promote
            from qcllp.training.train import train_station

            model_id = train_station(store, config, station, until=until.to_pydatetime()).model_id
            promote(store, model_id)
            loaded = load_model(store, model_id)
            cache: dict = {}

            def check(s=store, m=loaded, c=cache) -> None:
                watch_station(s, config, station, m, counts=True, reference_cache=c)

            first = timed(check, 1)[0]
            later = timed(check, args.repeats)
            store.close()
        print(f"| {h:,} | {1000 * first:.0f} ms | {1000 * statistics.median(later):.0f} ms |")


def retrain(args: argparse.Namespace) -> None:
    config = load_plant_config(CONFIG)
    if args.method:
        config = replace(config, training=replace(config.training, default_method=args.method))
    print(f"\n## one retraining of {args.station} ({machine()})\n")
    with tempfile.TemporaryDirectory() as tmp:
        store = _plant(Path(tmp), args.charges, config)
        started = time.perf_counter()
        outcome = retrain_station(store, config, args.station)
        seconds = time.perf_counter() - started
        trials = get_model(store, outcome.model_id)["params"].get("auto", [])
        store.close()
    t = config.training
    print("| charges | method | folds | resamples | seconds | outcome |")
    print("|---:|---|---:|---:|---:|---|")
    print(
        f"| {args.charges} | {t.default_method} ({t.any_defect}) | {t.cv} | {t.bootstrap} "
        f"| {seconds:.1f} | {outcome.outcome}: {outcome.reason} |"
    )
    if trials:
        print("\n| method | CV bag error | expected saving per 1,000 [90 %] | declined | s |")
        print("|---|---:|---:|---|---:|")
        for r in trials:
            print(
                f"| {r['method']} | {r['cv_bag_error']:.4f} "
                f"| {r['expected_saving_per_1000']:+.0f} [{r['saving_low_per_1000']:+.0f}, "
                f"{r['saving_high_per_1000']:+.0f}] | {r['lockout_declined']} | {r['seconds']} |"
            )


def signals(args: argparse.Namespace) -> None:
    base = load_plant_config(CONFIG)
    config = replace(
        base,
        training=FAST,
        retrainer=Retrainer(holdout_charges=12, min_holdout_charges=6, drift_window_charges=12),
    )
    history, later = 48, 14
    shift = {s: 3.0 for s in ("furnace.temperature", "rolling.force")}
    shift |= {"cooling.water_flow": 3.0, "straightening.force": 3.0}
    kinds = {
        "same": simulate_plant(config, history + later, random_state=args.seed),
        "shifted": simulate_plant(
            config, history + later, random_state=args.seed, sensor_shift=shift
        ),
        "worse": simulate_plant(config, history + later, random_state=args.seed, defect_rate=0.45),
    }
    print(f"\n## drift signals, seed {args.seed} ({machine()})\n")
    print("| later charges | station | top PSI / limit | alarm | bag error / limit | alarm |")
    print("|---|---|---:|---|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_simulation(kinds["same"].charges(0, history), root / "history")
        with Store.open(f"sqlite:///{root / 'history.sqlite'}") as store:
            ingest_measurements(store, config, root / "history" / "measurements")
            ingest_defect_counts(store, config, root / "history" / "defects")
            trained = {s: retrain_station(store, config, s).outcome for s in config.station_names}
        for kind, sim in kinds.items():
            write_simulation(sim.charges(history, history + later), root / kind)
            shutil.copy(root / "history.sqlite", root / f"{kind}.sqlite")
            with Store.open(f"sqlite:///{root / f'{kind}.sqlite'}") as store:
                ingest_measurements(store, config, root / kind / "measurements")
                ingest_defect_counts(store, config, root / kind / "defects")
                for station in config.station_names:
                    if trained[station] != "promoted":
                        print(f"| {kind} | {station} | no model promoted | | | |")
                        continue
                    loaded = load_model(store, station=station)
                    f = feature_drift(store, config, station, loaded)
                    c = count_drift(store, config, station, loaded)
                    print(
                        f"| {kind} | {station} | {f.psi.iloc[0]:.2f} / {f.limit:.2f} | {f.alarm} "
                        f"| {c.bag_error:.3f} / {c.limit:.3f} | {c.alarm} |"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    p = sub.add_parser("poll")
    p.add_argument("--files", default="100,1000")
    p.add_argument("--repeats", type=int, default=5)
    d = sub.add_parser("drift")
    d.add_argument("--history", default="100,800")
    d.add_argument("--repeats", type=int, default=3)
    r = sub.add_parser("retrain")
    r.add_argument("--charges", type=int, default=100)
    r.add_argument("--station", default="cooling")
    r.add_argument("--method", help="e.g. auto (default: the config's)")
    g = sub.add_parser("signals")
    g.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    {"poll": poll, "drift": drift, "retrain": retrain, "signals": signals}[args.part](args)


if __name__ == "__main__":
    main()
