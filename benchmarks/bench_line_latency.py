"""The line in real time: sensor publish -> flag received, over a local Mosquitto broker.

Everything runs on this machine, as the issue asks: a Mosquitto broker (Debian's package, the
settings of ``deploy/mosquitto/conf.d/qcllp.conf``), ``qcllp serve intake``, one ``qcllp serve
scorer`` per station of the example plant (each publishing its flags over MQTT), and this
process as the line: a gateway that publishes ``--rate`` sticks per second for ``--seconds``
(each stick one series message per station, payload v1, QoS 1) and a subscriber on the four
flags topics (QoS 1, persistent session). Latency is per stick and station: from the publish
of the stick's message for that station to the arrival of that station's flag for the stick,
both on this process's clock.

The plant database: an SQLite file, or with ``--engine postgresql`` a throwaway PostgreSQL
server (``tests/pgserver.py``, Debian's package). The plant: the example plant, its stations
completing a stick as soon as its series message is stored (``completion.settle_s: 0``: the
message holds the whole series), scorers polling every ``--interval`` s, models trained
(InvCal, one grid point, 2 folds) on 16 simulated labeled charges and promoted at every
station. The fresh charges have no counts (still on the line).

    .venv/bin/python benchmarks/bench_line_latency.py [--rate 500] [--seconds 60] \\
        [--interval 0.1] [--engine sqlite|postgresql] [--folder /tmp/bench_line_latency] \\
        [--profile-intake] [--pg-statements]

Prints the latency (p50 / p99 / max, per station and overall), flags missing or repeated, and
the CPU seconds per 1,000 sticks of each process (from ``/proc``). Target: p99 <= 1 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pandas as pd
import yaml
from paho.mqtt.enums import CallbackAPIVersion

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qcllp.ingest import ingest_defect_counts, ingest_measurements  # noqa: E402
from qcllp.ingest.mqtt_messages import series_payloads  # noqa: E402
from qcllp.plant.config import load_plant_config  # noqa: E402
from qcllp.plant.simulate import simulate_plant, write_simulation  # noqa: E402
from qcllp.station.registry import promote  # noqa: E402
from qcllp.store import Store  # noqa: E402
from qcllp.training.train import train_station  # noqa: E402
from tests.mqttbroker import TempBroker, find_mosquitto  # noqa: E402

EXAMPLE = ROOT / "plant_config" / "example.yaml"
HISTORY_CHARGES = 16
READINGS = "bench/{station}/readings"
FLAGS = "bench/{station}/flags"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all bound at once: two calls could return the same one)."""
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def plant_yaml(
    folder: Path, broker_port: int, interval: float, http_port: int, database_url: str
) -> Path:
    """The example plant on ``database_url``, its readings and flags on the broker."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["database_url"] = database_url
    raw["training"] = {
        "default_method": "inv_cal", "methods": {"inv_cal": {"C_p": [1.0]}}, "cv": 2,
        "random_state": 0, "bootstrap": 5,
    }  # fmt: skip
    for station in raw["stations"]:
        station["completion"] = {"settle_s": 0.0, "timeout_s": 60}
        station["scoring_interval_s"] = interval
    raw["connectors"] = {
        "mqtt": {
            "host": "127.0.0.1", "port": broker_port, "readings_topic": READINGS,
            "flags_topic": FLAGS, "port_http": http_port,
        }
    }  # fmt: skip
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def trained_plant(folder: Path, config_path: Path) -> None:
    """History with counts, a model trained and promoted at every station."""
    config = load_plant_config(config_path)
    sim = simulate_plant(config, HISTORY_CHARGES, random_state=3, first_charge=900_001)
    files = write_simulation(sim, folder / "history")
    with Store.open(config.database_url, models_dir=config.models_dir) as store:
        ingest_measurements(store, config, folder / "history" / "measurements")
        ingest_defect_counts(store, config, files["defects"])
        for station in config.station_names:
            promote(store, train_station(store, config, station).model_id)
            say(f"  trained and promoted a model at {station}")


def fresh_messages(config_path: Path, n_sticks: int) -> list[list[tuple[str, str, bytes]]]:
    """Per stick, its series messages in line order: ``(station, key, payload)``."""
    config = load_plant_config(config_path)
    n_charges = int(n_sticks / 50 * 1.3) + 2
    start = pd.Timestamp.now(tz="UTC") - pd.Timedelta(days=20)
    sim = simulate_plant(config, n_charges, random_state=11, start=start, first_charge=1)
    by_stick: dict[tuple[str, str], list] = {}
    for station, charge, stick, payload in series_payloads(sim.readings):
        by_stick.setdefault((charge, stick), []).append((station, f"{charge}/{stick}", payload))
    order = {s: i for i, s in enumerate(config.station_names)}
    sticks = list(by_stick.values())[:n_sticks]
    return [sorted(messages, key=lambda m: order[m[0]]) for messages in sticks]


class Line:
    """The gateway (publishes readings) and the subscriber (receives flags), one clock."""

    def __init__(self, port: int, stations: list[str]):
        self.sent: dict[tuple[str, str], float] = {}
        self.received: dict[tuple[str, str], float] = {}
        self.repeats = 0
        self.lock = threading.Lock()
        self.gateway = self._client("bench-gateway", port)
        self.flags = self._client("bench-line", port)
        self.flags.on_connect = lambda c, *_: c.subscribe(
            [(FLAGS.replace("{station}", s), 1) for s in stations]
        )
        self.flags.on_message = self._flag
        for client in (self.gateway, self.flags):
            client.connect("127.0.0.1", port, keepalive=30)
            client.loop_start()

    @staticmethod
    def _client(client_id: str, port: int) -> mqtt.Client:
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False,
            protocol=mqtt.MQTTv311,
        )  # fmt: skip
        client.max_inflight_messages_set(1000)
        return client

    def _flag(self, _client, _userdata, message) -> None:  # noqa: ANN001
        now = time.time()
        import json

        doc = json.loads(message.payload)
        key = (doc["station"], f"{doc['charge_id']}/{doc['stick_id']}")
        with self.lock:
            if key in self.received:
                self.repeats += 1
            else:
                self.received[key] = now

    def publish(self, sticks: list, rate: float) -> float:
        """Publish each stick's messages, ``rate`` sticks a second; the seconds it took."""
        started = time.time()
        for n, messages in enumerate(sticks):
            ahead = started + n / rate - time.time()
            if ahead > 0:
                time.sleep(ahead)
            for station, key, payload in messages:
                self.sent[(station, key)] = time.time()
                self.gateway.publish(READINGS.replace("{station}", station), payload, qos=1)
        return time.time() - started

    def close(self) -> None:
        for client in (self.gateway, self.flags):
            client.disconnect()
            client.loop_stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(postmaster: int) -> float:
    """A PostgreSQL server's CPU seconds: the postmaster's own and its reaped children's
    (``/proc/<pid>/stat`` fields 14-17), and its live backends' own."""
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(child[1]) == postmaster:
            ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def start_service(
    config_path: Path, folder: Path, args: list[str], name: str, profile: bool = False
):  # noqa: ANN201
    """``qcllp serve ARGS`` as a process logging to ``<name>.log``; ``profile``: under
    cProfile, its statistics written to ``<name>.prof`` at its SIGTERM."""
    log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - the process holds it
    python = [sys.executable, *(["-m", "cProfile", "-o", f"{name}.prof"] if profile else [])]
    command = [*python, "-m", "qcllp.cli", "--config", str(config_path), "serve", *args]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder)


def wait_healthy(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing healthy on port {port} after {timeout} s")


def percentiles(values: np.ndarray) -> str:
    if not len(values):
        return "- | - | -"
    p50, p99 = np.percentile(values, [50, 99])
    return f"{p50:.3f} | {p99:.3f} | {values.max():.3f}"


def stages(database_url: str, line: Line) -> pd.DataFrame:
    """Per flag received: publish -> stored (the batch's ``flags.arrived_at``, taken in its
    transaction) -> the start of the step that decided it (``flags.scored_at``; a step that
    started just before the batch committed takes it in, hence small negative values) ->
    received, in seconds."""
    with Store.open(database_url, create=False) as store:
        flags = pd.DataFrame(
            store.execute_sql(
                "SELECT station, charge_id, stick_id, arrived_at, scored_at FROM flags"
            ),
            columns=["station", "charge_id", "stick_id", "arrived_at", "scored_at"],
        )
    keys = list(zip(flags["station"], flags["charge_id"] + "/" + flags["stick_id"], strict=True))
    sent = np.array([line.sent.get(k, np.nan) for k in keys])
    got = np.array([line.received.get(k, np.nan) for k in keys])
    arrived = pd.to_datetime(flags["arrived_at"], utc=True, format="ISO8601")
    scored = pd.to_datetime(flags["scored_at"], utc=True, format="ISO8601")
    epoch = pd.Timestamp(0, tz="UTC")
    arrived_s = (arrived - epoch).dt.total_seconds().to_numpy()
    scored_s = (scored - epoch).dt.total_seconds().to_numpy()
    frame = pd.DataFrame({
        "publish to stored": arrived_s - sent,
        "stored to step start": scored_s - arrived_s,
        "step start to received": got - scored_s,
    })  # fmt: skip
    return frame.dropna()


def report(line: Line, stations: list[str], cpu: dict[str, float], n_sticks: int, args) -> None:
    """The latency and CPU tables (markdown)."""
    print(f"\n{args.engine}: {args.rate:g} sticks/s for {args.seconds:g} s ({n_sticks:,} sticks, "
          f"{len(line.sent):,} messages), scorers polling every {args.interval:g} s; "
          f"nproc {os.cpu_count()}, Python {platform.python_version()}\n")  # fmt: skip
    print("| station | flags received | missing | p50 s | p99 s | max s |")
    print("|---|---:|---:|---:|---:|---:|")
    every = []
    for station in [*stations, "all"]:
        keys = [k for k in line.sent if station in ("all", k[0])]
        lat = np.array([line.received[k] - line.sent[k] for k in keys if k in line.received])
        if station == "all":
            every = lat
        missing = len(keys) - len(lat)
        print(f"| {station} | {len(lat):,} | {missing:,} | {percentiles(lat)} |")
    print(f"\nrepeated flags: {line.repeats}; p99 over all: {np.percentile(every, 99):.3f} s "
          f"(target <= 1 s)\n")  # fmt: skip
    print("| stage | p50 s | p99 s | max s |")
    print("|---|---:|---:|---:|")
    for name, values in stages(args.database_url, line).items():
        print(f"| {name} | {percentiles(values.to_numpy())} |")
    print()
    print("| process | CPU s | CPU s per 1,000 sticks |")
    print("|---|---:|---:|")
    for name, seconds in cpu.items():
        print(f"| {name} | {seconds:.1f} | {seconds / n_sticks * 1000:.2f} |")


def plant_database(folder: Path, args):  # noqa: ANN201 - (TempPostgres or None, its URL)
    """An SQLite file in ``folder``, or a throwaway PostgreSQL server and its database (with
    ``--pg-statements``, tracking its statements in ``pg_stat_statements``)."""
    if args.engine != "postgresql":
        return None, f"sqlite:///{folder / 'plant.sqlite'}"
    from tests.pgserver import TempPostgres, find_pg_bin

    tracked = "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
    server = TempPostgres(find_pg_bin(), port=54393, options=tracked if args.pg_statements else "")
    url = server.create_database("line")
    if args.pg_statements:
        _pg_sql(url, "CREATE EXTENSION pg_stat_statements")
    return server, url


def _pg_sql(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    """One statement on the bench's PostgreSQL database, committed; its rows."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        cursor = c.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def print_statements(url: str, top: int = 15) -> None:
    """The statements that took the server's time, most first (``pg_stat_statements``)."""
    rows = _pg_sql(
        url,
        "SELECT calls, total_exec_time, rows, query FROM pg_stat_statements "
        "ORDER BY total_exec_time DESC LIMIT %s",
        (top,),
    )
    print("\n| calls | total ms | mean ms | rows | statement |\n|---:|---:|---:|---:|---|")
    for calls, total, n_rows, query in rows:
        text = " ".join(query.split())[:110].replace("|", "/")
        print(f"| {calls:,} | {total:,.0f} | {total / calls:.3f} | {n_rows:,} | `{text}` |")


def start_services(procs: dict, config_path: Path, folder: Path, ports: dict, args) -> None:
    """The intake and a scorer per station (``ports``: theirs, the intake's first) into
    ``procs``, each up and healthy."""
    procs["intake"] = start_service(
        config_path, folder, ["intake"], "intake", profile=args.profile_intake
    )
    for station, port in list(ports.items())[1:]:
        procs[f"scorer {station}"] = start_service(
            config_path, folder, ["scorer", "--station", station, "--port", str(port)],
            f"scorer-{station}",
        )  # fmt: skip
    for port in ports.values():
        wait_healthy(port)
    dead = [name for name, proc in procs.items() if proc.poll() is not None]
    if dead:
        raise SystemExit(f"{', '.join(dead)} exited at start: see {folder}/*.log")


def cpu_now(procs: dict, broker: TempBroker, postmaster: int | None) -> dict[str, float]:
    """CPU seconds so far of each service, the broker and (PostgreSQL) the server."""
    now = {name: cpu_seconds(proc.pid) for name, proc in procs.items()}
    now["broker"] = cpu_seconds(broker.proc.pid)
    if postmaster is not None:
        now["PostgreSQL server"] = server_cpu_seconds(postmaster)
    return now


def run(args) -> None:
    folder = Path(args.folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    binary = find_mosquitto()
    if binary is None:
        raise SystemExit("mosquitto not found: apt-get install mosquitto")
    broker = TempBroker(binary)
    server, args.database_url = plant_database(folder, args)
    procs: dict[str, subprocess.Popen] = {}
    try:
        stations = list(load_plant_config(EXAMPLE).station_names)
        ports = dict(zip(["intake", *stations], free_ports(len(stations) + 1), strict=True))
        config_path = plant_yaml(
            folder, broker.port, args.interval, ports["intake"], args.database_url
        )
        say("training the stations' models ...")
        trained_plant(folder, config_path)
        n_sticks = int(args.rate * args.seconds)
        say(f"simulating {n_sticks:,} fresh sticks ...")
        sticks = fresh_messages(config_path, n_sticks)
        start_services(procs, config_path, folder, ports, args)
        line = Line(broker.port, stations)
        time.sleep(1.0)  # the subscriber's subscription in place
        postmaster = server.postmaster_pid() if server is not None else None
        before = cpu_now(procs, broker, postmaster)
        if args.pg_statements and server is not None:
            _pg_sql(args.database_url, "SELECT pg_stat_statements_reset()")
        own = time.process_time()
        say(f"publishing {n_sticks:,} sticks at {args.rate:g}/s ...")
        took = line.publish(sticks, args.rate)
        say(f"  published in {took:.1f} s; waiting for the flags ...")
        deadline = time.monotonic() + 60
        while len(line.received) < len(line.sent) and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu = {n: t - before[n] for n, t in cpu_now(procs, broker, postmaster).items()}
        cpu["line (publisher + subscriber)"] = time.process_time() - own
        line.close()
        report(line, stations, cpu, len(sticks), args)
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        broker.close()
        if server is not None:
            if args.pg_statements:
                print_statements(args.database_url)
            server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="sticks per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.1, help="the scorers' poll (s)")
    parser.add_argument("--folder", default="/tmp/bench_line_latency")
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--profile-intake", action="store_true", help="the intake under cProfile (intake.prof)"
    )
    parser.add_argument(
        "--pg-statements",
        action="store_true",
        help="PostgreSQL: print the statements that took the server's time (pg_stat_statements)",
    )
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
