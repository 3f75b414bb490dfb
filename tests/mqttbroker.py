"""A throwaway Mosquitto broker for tests and benchmarks: Debian's ``mosquitto`` package
(installed by ``deploy/bootstrap.sh --test``), started on a free port of 127.0.0.1 with the
settings of ``deploy/mosquitto/conf.d/qcllp.conf`` (persistence, unbounded session queues, a
wide in-flight window), so the tests run the broker a plant would.

:func:`find_mosquitto` returns ``None`` without the binary; the fixtures then skip with that
reason. A broker can be stopped (SIGTERM: it saves its sessions), killed, paused (SIGSTOP, a
broker that hangs) and started again on the same port with the same data.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["TempBroker", "find_mosquitto"]

DEPLOY_CONF = Path(__file__).resolve().parents[1] / "deploy" / "mosquitto" / "conf.d" / "qcllp.conf"


def find_mosquitto() -> Path | None:
    """The ``mosquitto`` binary (``/usr/sbin`` is not on every PATH), or ``None``."""
    for candidate in (shutil.which("mosquitto"), "/usr/sbin/mosquitto"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempBroker:
    """A running broker on ``127.0.0.1:port`` with its data in a temporary folder."""

    def __init__(self, binary: Path, users: dict[str, str] | None = None):
        """``users``: name -> password the broker requires (then no anonymous client)."""
        self.binary = binary
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="qcllp-mqtt-"))
        self.conf = self.root / "mosquitto.conf"
        access = ["allow_anonymous true"]
        if users:
            passwd = self.root / "passwd"
            for n, (user, password) in enumerate(users.items()):
                create = ["-c"] if n == 0 else []
                tool = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
                subprocess.run(
                    [tool, *create, "-b", str(passwd), user, password],
                    check=True,
                    capture_output=True,
                )
            access = ["allow_anonymous false", f"password_file {passwd}"]
        settings = [
            line
            for line in DEPLOY_CONF.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        self.conf.write_text(
            "\n".join(
                [
                    *settings,
                    f"listener {self.port} 127.0.0.1",
                    *access,
                    f"persistence_location {self.root}/",
                    "user root" if os.geteuid() == 0 else "",
                    "log_dest stdout",
                ]
            )
            + "\n"
        )
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        """Start (again) and wait until it takes connections."""
        log = open(self.root / "broker.log", "ab")  # noqa: SIM115 - the process holds it
        self.proc = subprocess.Popen(
            [str(self.binary), "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mosquitto exited: {self.log()}") from None
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log()}")

    def stop(self) -> None:
        """Stop as an operator's restart does (SIGTERM: the sessions are saved)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(timeout=20)

    def kill(self) -> None:
        """SIGKILL (also a frozen broker): what it had not saved or read from its sockets is
        gone, as after a power cut."""
        self.proc.kill()
        self.proc.wait(timeout=20)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open and nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def log(self) -> str:
        path = self.root / "broker.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
