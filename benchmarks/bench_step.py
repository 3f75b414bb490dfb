"""A station scorer's step in process: the fixed cost a line's scorers pay each poll.

On the running line (``bench_line_latency.py``) every scorer steps ten times a second with a
few dozen sticks, so a step's cost is mostly fixed: statements, small frames, the model's
call. This measures it without the broker, the intake's process or the HTTP around it:

* the plant of ``bench_line_latency.py`` is built once (history, final QC's counts, a model
  trained and promoted at every station), on SQLite or on a PostgreSQL server started here
  (``tests/pgserver.py``, Debian's package);
* each run takes a fresh copy of that database (SQLite: the file; PostgreSQL: ``CREATE
  DATABASE ... TEMPLATE``), stores ``--sticks`` fresh sticks in batches of ``--batch`` as the
  MQTT intake stores them (``store_messages``) and runs one ``score_step`` per station after
  each batch, timing the steps and the stores apart;
* a run prints the median and mean ms a step, and the median ms of storing a batch (the
  intake's share of the line's CPU: ``store_messages`` of ``--batch`` sticks at every
  station). With ``--code DIR [DIR ...]`` each run is a process of that code
  (``PYTHONPATH=DIR``, e.g. a ``git worktree`` of another commit), the codes alternated run
  by run, so two commits compare in one session.

    .venv/bin/python benchmarks/bench_step.py --engine sqlite --runs 3
    .venv/bin/python benchmarks/bench_step.py --engine postgresql --code /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

import yaml
from code_runs import alternated, run_in_code

ROOT = Path(__file__).resolve().parents[1]
PG_PORT = 54417


def build(folder: Path, engine: str, n_sticks: int):  # noqa: ANN201 - (TempPostgres or None)
    """The trained plant in ``folder`` and the fresh sticks' messages (``sticks.pkl``)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    import bench_line_latency as line

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    server = None
    if engine == "postgresql":
        from tests.pgserver import TempPostgres, find_pg_bin

        server = TempPostgres(find_pg_bin(), port=PG_PORT)
        url = server.create_database("base")
    else:
        url = f"sqlite:///{folder / 'plant.sqlite'}"
    config = line.plant_yaml(folder, 1883, 0.1, 9999, url)
    line.trained_plant(folder, config)
    with open(folder / "sticks.pkl", "wb") as out:
        pickle.dump(line.fresh_messages(config, n_sticks), out)
    return server


def fresh_copy(folder: Path, engine: str) -> Path:
    """A plant YAML on a fresh copy of the built database (the models are shared)."""
    raw = yaml.safe_load((folder / "plant.yaml").read_text())
    if engine == "postgresql":
        import psycopg
        from sqlalchemy.engine import make_url

        base = make_url(raw["database_url"])
        name = f"run_{uuid.uuid4().hex[:8]}"
        host, port = base.query["host"], int(base.query["port"])
        with psycopg.connect(host=host, port=port, user="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE base')
        raw["database_url"] = base.set(database=name).render_as_string(hide_password=False)
    else:
        for old in folder.glob("run-*.sqlite*"):  # an earlier run's copy, its WAL included
            old.unlink()
        copy = folder / f"run-{uuid.uuid4().hex[:8]}.sqlite"
        shutil.copy(folder / "plant.sqlite", copy)
        raw["database_url"] = f"sqlite:///{copy}"
    path = folder / "run.yaml"  # beside plant.yaml: the same models folder
    path.write_text(yaml.safe_dump(raw))
    return path


def one_run(folder: Path, engine: str, batch: int) -> dict:
    """Steps after each batch on a fresh copy; ms a step (median, mean), steps, qcllp's path."""
    import qcllp
    from qcllp.ingest.mqtt_messages import Message, store_messages
    from qcllp.plant.config import load_plant_config
    from qcllp.scoring.step import score_step
    from qcllp.station.registry import load_model
    from qcllp.store import Store

    config = load_plant_config(fresh_copy(folder, engine))
    store = Store.open(config.database_url, models_dir=config.models_dir)
    models = {s: load_model(store, station=s) for s in config.station_names}
    with open(folder / "sticks.pkl", "rb") as source:
        sticks = pickle.load(source)
    per_step, per_store = [], []
    for start in range(0, len(sticks), batch):
        messages = [
            Message(f"qcllp/readings/{station}", station, payload)
            for stick in sticks[start : start + batch]
            for station, _, payload in stick
        ]
        began = time.perf_counter()
        store_messages(store, config, messages)
        per_store.append(time.perf_counter() - began)
        for station in config.station_names:
            began = time.perf_counter()
            score_step(store, config, station, models[station])
            per_step.append(time.perf_counter() - began)
    store.engine.dispose()
    return {
        "median_ms": 1000 * statistics.median(per_step),
        "mean_ms": 1000 * statistics.mean(per_step),
        "store_ms": 1000 * statistics.median(per_store),
        "steps": len(per_step),
        "qcllp": str(Path(qcllp.__file__).parent),
    }


def run_code(code: Path | None, args) -> dict:
    """One run in a process of ``code`` (this checkout's qcllp when ``None``)."""
    worker = ["--worker", "--engine", args.engine, "--folder", str(args.folder),
              "--batch", str(args.batch)]  # fmt: skip
    return run_in_code(code, __file__, worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--sticks", type=int, default=2000, help="fresh sticks a run")
    parser.add_argument("--batch", type=int, default=50, help="sticks stored before each step")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", type=Path, nargs="+", default=[None],
                        help="source folders to compare (default: this checkout)")  # fmt: skip
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_step"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(one_run(args.folder, args.engine, args.batch)))
        return
    server = build(args.folder, args.engine, args.sticks)
    try:
        runs = alternated(args.code, args.runs, lambda code: run_code(code, args))
    finally:
        if server is not None:
            server.stop()
    steps = runs[args.code[0]][0]["steps"]
    print(f"{args.engine}: {args.sticks:,} fresh sticks in batches of {args.batch}, one step per "
          f"station after each ({steps} steps a run); nproc {os.cpu_count()}, Python "
          f"{platform.python_version()}; runs alternated\n")  # fmt: skip
    print("| code | median ms a step, run by run | mean ms a step, run by run "
          "| median ms a batch stored, run by run |")  # fmt: skip
    print("|---|---|---|---|")
    for code, results in runs.items():
        medians = " / ".join(f"{r['median_ms']:.1f}" for r in results)
        means = " / ".join(f"{r['mean_ms']:.1f}" for r in results)
        stores = " / ".join(f"{r['store_ms']:.1f}" for r in results)
        print(f"| {code or ROOT} | {medians} | {means} | {stores} |")


if __name__ == "__main__":
    main()
