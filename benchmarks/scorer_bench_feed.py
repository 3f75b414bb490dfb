"""``bench_scorer.py feed``: arrival-to-flag latency at cooling with the real service
(``qcllp serve scorer`` in a subprocess) and this process feeding it CSV files on a schedule;
see ``bench_scorer.py``'s docstring for what it measures."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scorer_bench_support import (  # noqa: E402
    EXAMPLE,
    STATION,
    STICKS_PER_CHARGE,
    fast_config,
    install_model,
    machine,
    median,
    say,
    scalar,
    sqlite_url,
    trained_model,
)

from qcllp.ingest import ingest_measurements  # noqa: E402
from qcllp.plant.config import PlantConfig, load_plant_config  # noqa: E402
from qcllp.plant.simulate import simulate_plant  # noqa: E402
from qcllp.store import Store  # noqa: E402


# ----------------------------------------------------------------------------- feed
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def feed_yaml(folder: Path) -> Path:
    """The example plant with cooling completing at once (settle 0 s, timeout 60 s)."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    for station in raw["stations"]:
        if station["name"] == STATION:
            station["completion"] = {"settle_s": 0.0, "timeout_s": 60}
    raw.pop("connectors", None)
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def feed_files(cache: Path, config: PlantConfig, args) -> tuple[list[Path], set[tuple[str, str]]]:
    """Pre-written CSV files (long layout), each with all readings of ``rate * period`` sticks
    at the stations up to cooling; and the fed (charge, stick) keys."""
    n_files = max(1, round(args.seconds / args.period))
    per_file = max(1, round(args.rate * args.period))
    folder = cache / f"feed-{n_files}x{per_file}-s{args.seed}"
    keys_path = folder / "sticks.csv"
    if keys_path.exists():
        files = sorted(folder.glob("batch-*.csv"))
        keys = pd.read_csv(keys_path, dtype=str)
        if len(files) == n_files:
            return files, set(zip(keys["charge_id"], keys["stick_id"], strict=True))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    total = n_files * per_file
    n_charges = math.ceil(total / STICKS_PER_CHARGE * 1.1) + 1
    say(f"writing {n_files} feed files of {per_file} sticks ({n_charges} charges simulated)")
    sim = simulate_plant(config, n_charges, random_state=args.seed, first_charge=500_001)
    stations = [s.name for s in config.stations_up_to(STATION)]
    readings = sim.readings[sim.readings["station"].isin(stations)]
    order = sim.truth[["charge_id", "stick_id"]].astype(str).iloc[:total]
    file_of = pd.Series(np.arange(len(order)) // per_file, index=order["stick_id"].to_numpy())
    which = file_of.reindex(readings["stick_id"].astype(str).to_numpy()).to_numpy()
    files = []
    for i in range(n_files):
        part = readings[which == i].sort_values(["station", "timestamp"], kind="stable")
        path = folder / f"batch-{i:05d}.csv"
        part.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S.%f%z")
        files.append(path)
    order.to_csv(keys_path, index=False)
    return files, set(zip(order["charge_id"], order["stick_id"], strict=True))


def healthz(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 503 carries the same body
        return json.loads(exc.read())
    except OSError:
        return None


def run_feed(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    record = trained_model(cache, fast_config())
    files, fed = feed_files(cache, fast_config(), args)
    run = cache / "feed-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    config_path = feed_yaml(run)
    config = load_plant_config(config_path)
    url = sqlite_url(run / "plant.sqlite")
    with Store.open(url) as store:
        install_model(store, record)
    sink, log_path = run / "flags-cooling.jsonl", run / "scorer.log"
    service = start_feed_scorer(config_path, url, sink, log_path, args)
    try:
        say(f"feeding {len(files)} files")
        with Store.open(url, create=False) as store:
            fed_s, ingest_s, behind = feed_on_schedule(store, config, files, args)
            stored, flags = flags_after_feed(store, fed, service, args)
    finally:
        code = stop_service(service)
    feeding = {"fed_s": fed_s, "ingest_s": ingest_s, "behind": behind, "stored": stored}
    print_feed(flags, fed, files, sink, log_path, feeding, code, args)


def start_feed_scorer(
    config_path: Path, url: str, sink: Path, log_path: Path, args
) -> subprocess.Popen:
    """``qcllp serve scorer`` for cooling with ``sink``, logging to ``log_path``, once its
    ``/healthz`` names the model: the process."""
    port = free_port()
    command = [
        str(ROOT / ".venv" / "bin" / "qcllp"), "--config", str(config_path), "--db", url,
        "serve", "scorer", "--station", STATION, "--interval", str(args.interval),
        "--port", str(port), "--sink", str(sink),
    ]  # fmt: skip
    say("starting: " + " ".join(command))
    with open(log_path, "wb") as log_file:
        service = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while (health := healthz(port)) is None or health.get("model_id") is None:
        if service.poll() is not None or time.monotonic() > deadline:
            stop_service(service)
            raise RuntimeError(f"the scorer did not come up; see {log_path}")
        time.sleep(0.1)
    say(f"scorer up (model {health['model_id']})")
    return service


def feed_on_schedule(store: Store, config: PlantConfig, files: list[Path], args) -> tuple:
    """Ingest one file every ``args.period`` s: (seconds it took, each file's ingest
    seconds, the most it fell behind the schedule)."""
    ingest_s, behind = [], 0.0
    started = time.monotonic()
    for i, path in enumerate(files):
        wait = started + i * args.period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            behind = max(behind, -wait)
        t = time.perf_counter()
        ingest_measurements(store, config, path)
        ingest_s.append(time.perf_counter() - t)
    return time.monotonic() - started, ingest_s, behind


def flags_after_feed(
    store: Store, fed: set, service: subprocess.Popen, args
) -> tuple[int, pd.DataFrame]:
    """Once every fed stick has a flag (at most a minute, unless the scorer exits), and one
    more poll: the readings stored and the station's flags."""
    deadline = time.monotonic() + 60
    while scalar(store, "SELECT count(*) FROM flags") < len(fed):
        if time.monotonic() > deadline or service.poll() is not None:
            break
        time.sleep(0.2)
    time.sleep(2 * args.interval)  # one more poll: nothing must be flagged twice
    stored = scalar(store, "SELECT coalesce(sum(rows_stored), 0) FROM ingestion_batches")
    columns = ["charge_id", "stick_id", "decision", "arrived_at", "scored_at"]
    rows = store.execute_sql(
        f"SELECT {', '.join(columns)} FROM flags WHERE station = :s", s=STATION
    )
    return stored, pd.DataFrame(rows, columns=columns)


def stop_service(service: subprocess.Popen) -> int:
    """SIGTERM, a minute to exit, then SIGKILL: the exit code."""
    service.send_signal(signal.SIGTERM)
    try:
        return service.wait(timeout=60)
    except subprocess.TimeoutExpired:
        service.kill()
        return service.wait()


def print_feed(
    flags: pd.DataFrame,
    fed: set,
    files: list[Path],
    sink: Path,
    log_path: Path,
    feeding: dict,
    code: int,
    args,
) -> None:
    """The feed's latency table and its checks (markdown)."""
    arrived = pd.to_datetime(flags["arrived_at"], utc=True, format="ISO8601")
    scored = pd.to_datetime(flags["scored_at"], utc=True, format="ISO8601")
    latency = (scored - arrived).dt.total_seconds().to_numpy()
    steps = step_log(log_path)
    commit = committed_latency(scored, arrived, steps)
    keys = list(zip(flags["charge_id"], flags["stick_id"], strict=True))
    once = len(keys) == len(set(keys)) == len(fed) and set(keys) == fed
    sink_keys = [
        (line["charge_id"], line["stick_id"])
        for line in map(json.loads, sink.read_text().splitlines())
    ]
    sink_once = len(sink_keys) == len(set(sink_keys)) and set(sink_keys) == set(keys)

    def pct(values: np.ndarray, q: float) -> str:
        return f"{np.percentile(values, q):.3f}" if len(values) else "n/a"

    ingest_s = feeding["ingest_s"]
    print(f"## feed: arrival-to-flag latency at `{STATION}` with a live feeder (SQLite)\n")
    print(f"Machine: {machine()}.  ")
    print(
        f"Feeder (this process): {len(files)} CSV files, one per {args.period:g} s, "
        f"{len(fed) / len(files):.0f} sticks each ({args.rate:g} sticks/s, "
        f"{feeding['stored'] / len(files):,.0f} readings per file) for {args.seconds:g} s; fed in "
        f"{feeding['fed_s']:.1f} s, median ingest {median(ingest_s):.3f} s per file (max "
        f"{max(ingest_s):.3f} s), at most {feeding['behind']:.2f} s behind schedule.  "
    )
    print(
        f"Service: `qcllp serve scorer --station {STATION} --interval {args.interval:g}` "
        f"(subprocess, exit code {code}); cooling `completion: {{settle_s: 0, timeout_s: 60}}`; "
        f"{len(steps)} steps that did work, median {median([s for _, s in steps]):.3f} s, "
        f"max {max([s for _, s in steps], default=float('nan')):.3f} s. Target p99 <= 2 s.\n"
    )
    print("| latency | n | p50 s | p99 s | max s |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| `scored_at - arrived_at` (to the step's start) | {len(latency):,} "
        f"| {pct(latency, 50)} | {pct(latency, 99)} | {pct(latency, 100)} |"
    )
    print(
        f"| + step duration (to the flag's commit, from the step log) | {len(commit):,} "
        f"| {pct(commit, 50)} | {pct(commit, 99)} | {pct(commit, 100)} |"
    )
    print()
    print("| check | result |")
    print("|---|---|")
    print(f"| sticks fed | {len(fed):,} |")
    print(f"| sticks flagged | {len(set(keys)):,} ({flags['decision'].value_counts().to_dict()}) |")
    print(f"| every fed stick exactly one flag | {'yes' if once else 'NO'} |")
    print(f"| sink: one line per flag | {'yes' if sink_once else 'NO'} ({len(sink_keys):,}) |")


def step_log(path: Path) -> list[tuple[pd.Timestamp, float]]:
    """(end time, seconds) of the service's logged steps that did work."""
    steps = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") == "step":
                steps.append((pd.Timestamp(event["ts"]), float(event["seconds"])))
    return steps


def committed_latency(
    scored: pd.Series, arrived: pd.Series, steps: list[tuple[pd.Timestamp, float]]
) -> np.ndarray:
    """Latency to the end of the step that wrote each flag: the flag's ``scored_at`` is its
    step's start, the log line's time is (just after) its end."""
    if not steps or not len(scored):
        return np.empty(0)
    ends = pd.DatetimeIndex([t for t, _ in steps]).tz_convert("UTC").sort_values()
    position = ends.searchsorted(pd.DatetimeIndex(scored))
    known = position < len(ends)
    end = pd.Series(pd.NaT, index=scored.index, dtype="datetime64[ns, UTC]")
    end[known] = ends[position[known]]
    return (end - arrived).dt.total_seconds().dropna().to_numpy()
