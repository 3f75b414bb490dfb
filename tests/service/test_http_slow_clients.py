"""The services' HTTP endpoint under slow clients (:mod:`qcllp.service.http`): hundreds of
real TCP connections to 127.0.0.1 that send nothing must neither pile up threads nor delay
``/healthz``, and are closed after the idle timeout; a client that stalls in the middle of
its request frees its worker."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from qcllp.service.http import IDLE_S as IDLE_S_SERVICE
from qcllp.service.http import HealthServer
from qcllp.store import Store
from tests.plant.conftest import EXAMPLE
from tests.service.harness import ServiceProcess

IDLE_S = 2.0
WORKERS = 4
SLOW_CLIENTS = 300


class Healthy:
    def health(self) -> tuple[int, dict]:
        return 200, {"status": "ok"}


@pytest.fixture
def server():
    http = HealthServer(
        "127.0.0.1", 0, Healthy(), CollectorRegistry(), idle_s=IDLE_S, max_workers=WORKERS
    )
    http.start()
    yield http
    http.stop()


def get_health(port: int) -> tuple[int, float]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
        assert json.loads(answer.read()) == {"status": "ok"}
        return answer.status, time.monotonic() - started


def open_silent(port: int, n: int) -> list[socket.socket]:
    clients = []
    for _ in range(n):
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        clients.append(client)
    return clients


def test_silent_clients_hold_no_threads_and_health_answers_at_once(server):
    before = threading.active_count()
    clients = open_silent(server.port, SLOW_CLIENTS)
    try:
        time.sleep(0.5)  # the server has accepted them all by now
        assert threading.active_count() <= before + 1, threading.active_count() - before
        status, seconds = get_health(server.port)
        assert status == 200 and seconds < 1.0, seconds
        time.sleep(IDLE_S + 1.0)
        for client in clients:  # closed by the server: end of file, not a timeout
            client.settimeout(2)
            assert client.recv(1) == b""
    finally:
        for client in clients:
            client.close()


def test_clients_stalling_mid_request_are_bounded_and_freed(server):
    before = threading.active_count()
    stalled = open_silent(server.port, 50)
    try:
        for client in stalled:
            client.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the end of the headers
        time.sleep(0.5)
        assert threading.active_count() <= before + WORKERS
        busy = urllib.request.Request(f"http://127.0.0.1:{server.port}/healthz")
        with pytest.raises(urllib.error.HTTPError) as refused:  # every worker is held
            urllib.request.urlopen(busy, timeout=5)
        assert refused.value.code == 503
        time.sleep(IDLE_S + 1.0)  # the workers' reads time out
        assert threading.active_count() <= before
        assert get_health(server.port)[0] == 200
    finally:
        for client in stalled:
            client.close()


@pytest.mark.slow
def test_a_scorer_process_under_800_silent_clients(tmp_path):
    """The real service: 800 connections that send nothing keep its thread count flat,
    ``/healthz`` answers meanwhile, and the server closes them after its 10 s idle timeout."""
    db = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    Store.open(db).close()
    scorer = ServiceProcess(
        ["--config", str(EXAMPLE), "--db", db],
        ["scorer", "--station", "cooling"],
        folder=tmp_path,
        name="scorer",
    )
    clients: list[socket.socket] = []
    try:
        scorer.wait_up()
        before = len(list(Path(f"/proc/{scorer.pid}/task").iterdir()))
        clients = open_silent(scorer.port, 800)
        time.sleep(1.0)
        during = len(list(Path(f"/proc/{scorer.pid}/task").iterdir()))
        assert during <= before + 2, (before, during)
        started = time.monotonic()
        assert scorer.health() is not None and time.monotonic() - started < 2.0
        time.sleep(IDLE_S_SERVICE + 2.0)
        for client in clients:
            client.settimeout(2)
            assert client.recv(1) == b""
        assert scorer.terminate() == 0
    finally:
        for client in clients:
            client.close()
        scorer.stop_if_running()
