"""Real service processes for the tests: start ``python -m qcllp.cli ... serve ...``, talk HTTP
to its ``/healthz`` and ``/metrics`` on 127.0.0.1, read its JSON log lines, send it signals.

The processes are forked from a preloaded interpreter where they can be
(:mod:`tests.service.forked`: the same ``main``, without importing the libraries again each
start), else started from scratch; ``QCLLP_TESTS_EXEC=1`` starts them all from scratch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.service.forked import start_process

__all__ = ["ServiceProcess", "free_port", "wait_until"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceProcess:
    """One service process (``qcllp <global options> serve <args> --port P``), its HTTP
    endpoint and its log file (stdout and stderr)."""

    def __init__(
        self,
        global_args: Sequence[str],
        serve_args: Sequence[str],
        *,
        folder: Path,
        name: str,
        env: dict[str, str] | None = None,
        module: str = "qcllp.cli",
    ):
        self.port = free_port()
        self.name = name
        self.log_path = folder / f"{name}.log"
        args = [*global_args, "serve", *serve_args, "--port", str(self.port)]
        environment = {**os.environ, **(env or {})}
        self.proc = start_process(module, args, cwd=folder, env=environment, log=self.log_path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self, tail: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]

    def events(self) -> list[dict[str, Any]]:
        """The service's log: JSON lines only (a line that is not JSON fails the test)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def get(self, route: str) -> tuple[int, bytes] | None:
        """(status, body), or ``None`` while nothing listens yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{route}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (ConnectionError, urllib.error.URLError, TimeoutError):
            return None

    def health(self) -> tuple[int, dict] | None:
        answer = self.get("/healthz")
        return None if answer is None else (answer[0], json.loads(answer[1]))

    def body(self) -> dict:
        """The ``/healthz`` body (empty while nothing answers)."""
        answer = self.health()
        return {} if answer is None else answer[1]

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels``."""
        answer = self.get("/metrics")
        assert answer is not None and answer[0] == 200, answer
        total = 0.0
        for family in text_string_to_metric_families(answer[1].decode()):
            for sample in family.samples:
                wanted = all(sample.labels.get(k) == v for k, v in labels.items())
                if sample.name == name and wanted:
                    total += sample.value
        return total

    def wait_up(self, timeout: float = 30.0) -> tuple[int, dict]:
        return wait_until(self.health, what="/healthz to answer", procs=[self], timeout=timeout)

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGSTOP, and wait until the kernel has stopped every thread of the process: ``kill``
        returns first, and a thread running on another core (the scorer's steps run in a
        worker thread) may still take a lock meanwhile. /proc/<pid>/stat is the main thread's
        state only; each thread has its own under /proc/<pid>/task."""
        self.signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not all(
            stat.read_text().rsplit(")", 1)[1].split()[0] in "Tt"
            for stat in Path(f"/proc/{self.pid}/task").glob("*/stat")
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"process {self.pid} not stopped {timeout} s after SIGSTOP")
            time.sleep(0.005)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM; the exit code."""
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit {timeout} s after SIGTERM:\n{self.log()}") from None

    def stop_if_running(self) -> None:
        """SIGKILL (by pid) if still running: test teardown."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def wait_until(
    predicate: Callable[[], Any],
    *,
    what: str,
    procs: Iterable[ServiceProcess] = (),
    timeout: float = 60.0,
    interval: float = 0.05,
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout``
    or as soon as one of ``procs`` has exited."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in procs:
            if proc.proc.poll() is not None:
                raise AssertionError(
                    f"{proc.name} exited with {proc.proc.returncode} while waiting for {what}:\n"
                    f"{proc.log()}"
                )
        if time.monotonic() > deadline:
            logs = "\n".join(p.log() for p in procs)
            raise AssertionError(f"waited {timeout} s for {what} in vain\n{logs}")
        time.sleep(interval)
