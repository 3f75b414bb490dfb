"""The MQTT intake as the plant runs it: ``qcllp serve intake`` in a process of its own.

A real Mosquitto broker (:mod:`tests.mqttbroker`, the settings of
``deploy/mosquitto/mosquitto.conf``), a real paho gateway publishing the simulator's readings
as series payloads at QoS 1 (:mod:`tests.support.mqtt_gateway`), the intake started as a
process against a real SQLite file, and real signals: ``kill -9`` of the intake mid-stream, a
broker restart and a paused broker (SIGSTOP). What every test checks at the end: each
simulated reading is stored exactly once (the readings table holds exactly the published keys,
and no more), and a malformed payload is quarantined with its topic.

Without Mosquitto (Debian's ``mosquitto`` package, ``deploy/bootstrap.sh --test``) the tests
skip with that reason.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from qcllp.ingest.mqtt_messages import series_payloads
from qcllp.plant.config import load_plant_config
from qcllp.plant.simulate import simulate_plant
from qcllp.store import Store
from tests.mqttbroker import TempBroker, find_mosquitto, tls_files
from tests.service.harness import ServiceProcess, wait_until
from tests.support.mqtt_gateway import Gateway

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "plant/{station}/readings"


def write_config(folder: Path, port: int, **mqtt) -> Path:
    """The example plant, its readings from the test broker, its database a file here;
    ``mqtt``: more keys of ``connectors.mqtt``."""
    raw = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    raw["database_url"] = f"sqlite:///{folder / 'plant.sqlite'}"
    raw["connectors"] = {
        "mqtt": {
            "host": "127.0.0.1",
            "port": port,
            "readings_topic": TOPIC,
            "keepalive_s": 5,
            "batch_max_s": 0.05,
            **mqtt,
        }
    }
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class Line:
    """One test's plant: its config, the published readings, the intake processes."""

    def __init__(self, folder: Path, broker: TempBroker, n_charges: int, **mqtt):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.broker = folder, broker
        self.config_path = write_config(folder, broker.port, **mqtt)
        config = load_plant_config(self.config_path)
        Store.open(config.database_url).close()  # the services open a database, never create one
        self.sim = simulate_plant(config, n_charges, random_state=7, sticks_per_charge=(8, 16))
        self.items = [
            (TOPIC.replace("{station}", station), payload)
            for station, _c, _s, payload in series_payloads(self.sim.readings)
        ]
        self.procs: list[ServiceProcess] = []

    def start_intake(
        self, name: str = "intake", env: dict | None = None, subscribed: bool = True
    ) -> ServiceProcess:
        """An intake process, up and (unless told otherwise) subscribed: what the line
        publishes before the intake's first subscription has no session to wait in."""
        proc = ServiceProcess(
            ["--config", str(self.config_path)], ["intake"], folder=self.folder, name=name,
            env=env,
        )  # fmt: skip
        self.procs.append(proc)
        proc.wait_up()
        if subscribed:
            wait_until(lambda: proc.body().get("connected"), what="subscribed", procs=[proc])
        return proc

    def stored(self) -> int:
        with sqlite3.connect(self.folder / "plant.sqlite") as conn:
            try:
                return conn.execute("SELECT count(*) FROM readings").fetchone()[0]
            except sqlite3.OperationalError:  # not created yet
                return 0

    def stored_keys(self) -> set[tuple]:
        """(charge, stick, station, sensor, timestamp in microseconds) of every stored reading."""
        query = """
            SELECT se.charge_id, se.stick_id, se.station, se.sensor, r.ts_us
            FROM readings r JOIN series se ON se.id = r.series_id"""
        with sqlite3.connect(self.folder / "plant.sqlite") as conn:
            return set(conn.execute(query).fetchall())

    def expected_keys(self) -> set[tuple]:
        r = self.sim.readings
        ts = pd.to_datetime(r["timestamp"], utc=True).astype("int64") // 1000
        columns = [r[c].astype(str) for c in ("charge_id", "stick_id", "station", "sensor")]
        return set(zip(*columns, ts.astype(int), strict=True))

    def all_stored(self, procs: list[ServiceProcess], timeout: float = 90.0) -> None:
        expected = len(self.sim.readings)
        wait_until(lambda: self.stored() >= expected, what=f"{expected} readings stored",
                   procs=procs, timeout=timeout)  # fmt: skip
        assert self.stored() == expected
        assert self.stored_keys() == self.expected_keys()

    def close(self) -> None:
        for proc in self.procs:
            proc.stop_if_running()


@pytest.fixture
def line(tmp_path, broker, request):
    made = Line(tmp_path, broker, getattr(request, "param", 4))
    yield made
    made.close()


def test_intake_stores_every_reading_once_quarantines_a_bad_message_and_stops_on_sigterm(line):
    intake = line.start_intake()
    gateway = Gateway(line.broker.port)
    bad_topic = TOPIC.replace("{station}", "rolling")
    gateway.publish([*line.items[:10], (bad_topic, b'{"v": 1, "charge_id": '), *line.items[10:]])
    line.all_stored([intake])
    wait_until(gateway.all_acknowledged, what="the broker's acknowledgements")
    rows = _quarantine(line)
    source = f"mqtt:127.0.0.1:{line.broker.port}"
    assert [(r[0], r[1]) for r in rows] == [(source, "malformed_message")]
    assert rows[0][2].startswith(f"topic {bad_topic}: not JSON")
    status, body = intake.health()
    assert status == 200 and body["status"] == "ok" and body["connected"] is True
    assert intake.metric("qcllp_intake_readings_total", outcome="stored") == len(line.sim.readings)
    assert intake.metric("qcllp_intake_messages_total") == len(line.items) + 1
    assert intake.terminate() == 0
    events = [e["event"] for e in intake.events()]
    assert events[-2:] == ["stopping", "stopped"] and "mqtt_connected" in events
    gateway.close()


def _quarantine(line: Line) -> list[tuple]:
    with sqlite3.connect(line.folder / "plant.sqlite") as conn:
        return conn.execute("SELECT source, reason, detail FROM quarantine ORDER BY id").fetchall()


def _streaming(line: Line) -> tuple[ServiceProcess, Gateway, threading.Thread, int]:
    """An intake, and the gateway publishing every item at 1,500 messages/s in a thread, once
    a quarter of the readings is stored: (intake, gateway, thread, readings in all)."""
    intake = line.start_intake()
    gateway = Gateway(line.broker.port)
    total = len(line.sim.readings)
    publishing = _in_thread(lambda: gateway.publish(line.items, per_s=1500))
    wait_until(lambda: line.stored() > total // 4, what="a quarter stored", procs=[intake])
    return intake, gateway, publishing, total


@pytest.mark.slow
@pytest.mark.parametrize("line", [30], indirect=True)
def test_kill9_of_the_intake_mid_stream_stores_every_reading_exactly_once(line):
    intake, gateway, publishing, total = _streaming(line)
    intake.kill9()
    again = line.start_intake("intake-2")
    wait_until(lambda: line.stored() > total // 2, what="half stored", procs=[again])
    again.kill9()
    third = line.start_intake("intake-3")
    publishing.join()
    line.all_stored([third])
    wait_until(gateway.all_acknowledged, what="the broker's acknowledgements")
    assert third.terminate() == 0
    gateway.close()


@pytest.mark.slow
@pytest.mark.parametrize("line", [30], indirect=True)
def test_a_broker_restart_and_a_paused_broker_lose_no_reading(line):
    intake, gateway, publishing, total = _streaming(line)
    line.broker.stop()
    wait_until(lambda: intake.health()[0] == 503, what="/healthz 503 with the broker away",
               procs=[intake])  # fmt: skip
    problems = " ".join(intake.body()["problems"])
    assert "disconnected from the broker" in problems or "not connected to" in problems
    line.broker.start()
    wait_until(lambda: line.stored() > total // 2, what="half stored", procs=[intake])
    line.broker.pause()
    wait_until(lambda: intake.health()[0] == 503, what="/healthz 503 with the broker frozen",
               procs=[intake], timeout=30)  # fmt: skip
    line.broker.resume()
    publishing.join()
    line.all_stored([intake])
    wait_until(gateway.all_acknowledged, what="the broker's acknowledgements", timeout=60)
    wait_until(lambda: intake.health()[0] == 200, what="/healthz 200 again", procs=[intake])
    assert intake.terminate() == 0
    gateway.close()


@pytest.mark.slow
def test_a_second_intake_waits_as_standby_and_takes_over_when_the_first_dies(line):
    first = line.start_intake()
    second = line.start_intake("intake-standby", subscribed=False)
    wait_until(lambda: second.body().get("status") == "standby", what="standby",
               procs=[second])  # fmt: skip
    gateway = Gateway(line.broker.port)
    gateway.publish(line.items[: len(line.items) // 2])
    first.signal(signal.SIGKILL)
    gateway.publish(line.items[len(line.items) // 2 :])
    line.all_stored([second])
    assert second.body()["status"] == "ok"
    events = [e["event"] for e in second.events()]
    assert events.index("standby") < events.index("active")
    gateway.close()


def test_the_broker_password_comes_from_a_private_file_and_a_wrong_one_is_named(
    tmp_path,
):
    binary = find_mosquitto()
    if binary is None:
        pytest.skip("mosquitto not found (deploy/bootstrap.sh --test installs it)")
    broker = TempBroker(binary, users={"intake": "right-pass-2026"})
    line = Line(tmp_path, broker, 1, username="intake")
    try:
        secret = tmp_path / "mqtt-password"
        secret.write_text("wrong-pass\n")
        secret.chmod(0o600)
        env = {"QCLLP_MQTT_PASSWORD_FILE": str(secret)}
        refused = line.start_intake("refused", env=env, subscribed=False)
        wait_until(lambda: "refused" in " ".join(refused.body().get("problems", [])),
                   what="/healthz naming the refusal", procs=[refused])  # fmt: skip
        assert refused.health()[0] == 503
        assert refused.terminate() == 0
        secret.write_text("right-pass-2026\n")
        intake = line.start_intake("intake", env=env)
        gateway = Gateway(broker.port, username="intake", password="right-pass-2026")
        gateway.publish(line.items)
        line.all_stored([intake])
        assert "right-pass" not in intake.log() and "wrong-pass" not in refused.log()
        gateway.close()
    finally:
        line.close()
        broker.close()


def test_over_tls_the_broker_is_checked_against_the_configured_ca(tmp_path):
    binary = find_mosquitto()
    if binary is None:
        pytest.skip("mosquitto not found (deploy/bootstrap.sh --test installs it)")
    ca, cert, key = tls_files(tmp_path)
    broker = TempBroker(binary, tls=(ca, cert, key))
    unchecked = Line(tmp_path / "system-cas", broker, 1, tls=True)
    line = Line(tmp_path / "plant-ca", broker, 1, tls=True, ca_file=str(ca))
    try:
        refused = unchecked.start_intake("system-cas", subscribed=False)
        time.sleep(2)  # a handshake the system's CAs cannot verify never connects
        assert refused.health()[0] == 503 and not refused.body()["connected"]
        intake = line.start_intake()
        gateway = Gateway(broker.port, ca_file=ca)
        gateway.publish(line.items)
        line.all_stored([intake])
        gateway.close()
    finally:
        unchecked.close()
        line.close()
        broker.close()


def _in_thread(work):
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_payload_in_the_docs_is_what_the_intake_reads():
    """The series example of docs/data.md parses to readings (the documented contract)."""
    from qcllp.ingest.mqtt_messages import Message, message_chunk

    text = (ROOT / "docs" / "data.md").read_text()
    example = text.split("<!-- mqtt-series-example -->")[1].split("```json")[1].split("```")[0]
    doc = json.loads(example)
    chunk = message_chunk([Message("t", doc["station"], json.dumps(doc).encode())])
    assert len(chunk.frame) == sum(len(v) for v in doc["series"].values())
    assert not chunk.rejected
