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

from tests.service.harness import free_port

__all__ = ["TempBroker", "find_mosquitto", "tls_files"]

DEPLOY_CONF = Path(__file__).resolve().parents[1] / "deploy" / "mosquitto" / "conf.d" / "qcllp.conf"


def find_mosquitto() -> Path | None:
    """The ``mosquitto`` binary (``/usr/sbin`` is not on every PATH), or ``None``."""
    for candidate in (shutil.which("mosquitto"), "/usr/sbin/mosquitto"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


class TempBroker:
    """A running broker on ``127.0.0.1:port`` with its data in a temporary folder."""

    def __init__(
        self,
        binary: Path,
        users: dict[str, str] | None = None,
        tls: tuple[Path, Path, Path] | None = None,
    ):
        """``users``: name -> password the broker requires (then no anonymous client);
        ``tls``: (CA, certificate, key) files of a TLS listener (:func:`tls_files`)."""
        self.binary = binary
        self.port = free_port()
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
                    *(
                        [f"cafile {tls[0]}", f"certfile {tls[1]}", f"keyfile {tls[2]}"]
                        if tls
                        else []
                    ),
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


def tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate it signed for 127.0.0.1, as PEM files (CA certificate,
    server certificate, server key) in ``folder`` (cryptography, which asyncua needs anyway)."""
    from datetime import UTC, datetime, timedelta
    from ipaddress import IPv4Address

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(name("qcllp CA")).issuer_name(name("qcllp CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert = (
        x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "broker.pem", folder / "broker-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths[2].chmod(0o644)  # the broker may run as another user
    return paths
