"""A stand-in PLC for the OPC UA flag tests: an asyncua server with one station's record
variables and method, and a "PLC program" that takes each record and acknowledges it.

Run as a script in a process of its own (``python opcua_plc.py --port P --folder F``; it
imports nothing from qcllp), so that a test can stop it (SIGTERM), kill it (SIGKILL), freeze it
(SIGSTOP: a PLC that hangs with its socket open) and start it again on the same port, where
it comes back as a PLC after a cold start: every variable 0 or empty. :class:`StandInPlc` does
that from a test. What the PLC took, and anything it saw go wrong, it appends to files in the
folder, which outlive its restarts:

* ``taken.jsonl``: one line per record the program took (write mode) or call it accepted
  (method mode): ``{"mode", "flag_id", "charge_id", "stick_id", "decision", "probability"}``.
  A record is written there before its acknowledgement, as a PLC program stores a record
  before it acknowledges it; so a PLC killed in between takes it again after its restart.
* ``violations.jsonl``: a write to a record variable while the record in them was not yet
  taken (``FlagId <> Ack``): qcllp overwriting what the PLC had not read.
* a file ``hold`` in the folder makes the program stop taking (a PLC in STOP with its OPC UA
  server up): no acknowledgement, and a Bad status for the method.

``--secure``: the only endpoint is Basic256Sha256 with SignAndEncrypt, under the server's own
certificate (``server-cert.der``, made at the first start); a client must present the
certificate in ``trusted-client.der`` and log in as ``qcllp`` with the password in the
environment variable ``PLC_PASSWORD``.

The program's scan: every 10 ms, ``if FlagId <> Ack: store the record; Ack := FlagId``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NAMESPACE = "urn:qcllp:test-plc"
PREFIX = "ns=2;s=Line.Cooling"
NODES = {
    "flag_id": f"{PREFIX}.FlagId",
    "ack": f"{PREFIX}.Ack",
    "charge_id": f"{PREFIX}.ChargeId",
    "stick_id": f"{PREFIX}.StickId",
    "decision": f"{PREFIX}.Decision",
    "probability": f"{PREFIX}.Probability",
}
OBJECT, METHOD = PREFIX, f"{PREFIX}.TakeFlag"
DECISIONS = {1: "pass", 2: "inspect", 3: "lock_out", 4: "unscorable"}
SCAN_S = 0.01


# ----------------------------------------------------------------------------- the PLC
async def _serve(port: int, folder: Path, secure: bool) -> None:
    """The stand-in PLC: the record's variables, the ``TakeFlag`` method and the program that
    takes a posted record, until the process is stopped."""
    from asyncua import Server

    server = Server(user_manager=_Users() if secure else None)
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:{port}/")
    server.set_server_name("qcllp stand-in PLC")
    if secure:
        await _secure(server, folder)
    idx = await server.register_namespace(NAMESPACE)
    assert idx == 2
    line, nodes = await _record_variables(server, idx)
    await _add_take_flag(line, folder)
    _watch_writes(server, nodes, folder)
    async with server:
        (folder / "ready").write_text(str(os.getpid()))
        await _program(nodes, folder)


def _store(folder: Path, record: dict) -> None:
    """A record the PLC took, one JSON line of ``taken.jsonl``."""
    with open(folder / "taken.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


async def _record_variables(server, idx: int) -> tuple:
    """The ``Cooling`` object and its writable record variables (:data:`NODES`)."""
    from asyncua import ua

    vt = ua.VariantType
    line = await server.nodes.objects.add_object(ua.NodeId("Line.Cooling", idx), "Cooling")
    kinds = {
        "flag_id": (0, vt.UInt64), "ack": (0, vt.UInt64), "charge_id": ("", vt.String),
        "stick_id": ("", vt.String), "decision": (0, vt.Int32), "probability": (0.0, vt.Double),
    }  # fmt: skip
    nodes = {}
    for field, (initial, kind) in kinds.items():
        node_id = ua.NodeId.from_string(NODES[field])
        nodes[field] = await line.add_variable(node_id, field, ua.Variant(initial, kind))
        await nodes[field].set_writable()
    return line, nodes


async def _add_take_flag(line, folder: Path) -> None:
    """The ``TakeFlag`` method: a record stored, or refused while held or mistyped."""
    from asyncua import ua

    vt = ua.VariantType

    async def take_flag(_parent, flag_id, charge_id, stick_id, decision, probability):
        if (folder / "hold").exists():
            return ua.StatusCode(ua.StatusCodes.BadResourceUnavailable)
        types = [a.VariantType for a in (flag_id, charge_id, stick_id, decision, probability)]
        if types != [vt.UInt64, vt.String, vt.String, vt.String, vt.Double]:
            return ua.StatusCode(ua.StatusCodes.BadTypeMismatch)
        record = {"flag_id": flag_id.Value, "charge_id": charge_id.Value,
                  "stick_id": stick_id.Value, "decision": decision.Value,
                  "probability": _plain(probability.Value)}  # fmt: skip
        _store(folder, {"mode": "method", **record})
        return []

    arguments = [
        _argument(ua, name, kind)
        for name, kind in zip(
            ("flag_id", "charge_id", "stick_id", "decision", "probability"),
            (vt.UInt64, vt.String, vt.String, vt.String, vt.Double),
            strict=True,
        )
    ]
    await line.add_method(ua.NodeId.from_string(METHOD), "TakeFlag", take_flag, arguments, [])


def _watch_writes(server, nodes: dict, folder: Path) -> None:
    """Record in ``violations.jsonl`` every client write of a record variable while a
    posted record waits for its acknowledgement (the handshake forbids it)."""
    from asyncua import ua
    from asyncua.common.callback import CallbackType

    record_nodes = {ua.NodeId.from_string(NODES[f]) for f in NODES if f != "ack"}

    async def watch(event, _dispatcher) -> None:
        if not event.is_external:
            return
        written = [w.NodeId for w in event.request_params.NodesToWrite]
        if not any(n in record_nodes for n in written):
            return
        posted, ack = await nodes["flag_id"].read_value(), await nodes["ack"].read_value()
        if posted != ack:
            with open(folder / "violations.jsonl", "a") as out:
                out.write(json.dumps({"written": [n.to_string() for n in written],
                                      "flag_id": posted, "ack": ack}) + "\n")  # fmt: skip

    server.subscribe_server_callback(CallbackType.PreWrite, watch)


async def _program(nodes: dict, folder: Path) -> None:
    """The PLC's scan: a posted record (``flag_id`` ahead of ``ack``) taken and acknowledged,
    unless held."""
    from asyncua import ua

    while True:
        await asyncio.sleep(SCAN_S)
        if (folder / "hold").exists():
            continue
        posted, ack = await nodes["flag_id"].read_value(), await nodes["ack"].read_value()
        if posted == ack:
            continue
        record = {f: await nodes[f].read_value() for f in NODES if f != "ack"}
        record["decision"] = DECISIONS.get(record["decision"], record["decision"])
        record["probability"] = _plain(record["probability"])
        _store(folder, {"mode": "write", **record})
        await nodes["ack"].write_value(ua.Variant(posted, ua.VariantType.UInt64))


async def _secure(server, folder: Path) -> None:
    """Basic256Sha256 only, the server's certificate, the trusted client's certificate."""
    from asyncua import ua
    from asyncua.common.utils import ServiceError
    from asyncua.crypto.cert_gen import setup_self_signed_certificate
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key, cert = folder / "server-key.pem", folder / "server-cert.der"
    uri = "urn:qcllp:test-plc"
    await setup_self_signed_certificate(
        key, cert, uri, "127.0.0.1", [ExtendedKeyUsageOID.SERVER_AUTH], {}
    )
    await server.load_certificate(str(cert))
    await server.load_private_key(str(key))
    server.set_security_policy([ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt])
    trusted = (folder / "trusted-client.der").read_bytes()

    async def validate(certificate, _description) -> None:
        if certificate.public_bytes(Encoding.DER) != trusted:
            raise ServiceError(ua.StatusCodes.BadCertificateUntrusted)

    server.set_certificate_validator(validate)


class _Users:
    """One user, qcllp, with the password of ``PLC_PASSWORD``."""

    def get_user(self, iserver, username=None, password=None, certificate=None):
        try:
            from asyncua.crypto.permission_rules import User, UserRole
        except ImportError:  # where asyncua 1.1 keeps them
            from asyncua.server.users import User, UserRole

        if username == "qcllp" and password == os.environ.get("PLC_PASSWORD"):
            return User(role=UserRole.User, name=username)
        return None


def _argument(ua, name: str, kind) -> object:
    argument = ua.Argument()
    argument.Name = name
    argument.DataType = ua.NodeId(kind.value)
    argument.ValueRank = -1
    return argument


def _plain(value: float) -> float | None:
    """NaN as JSON's null."""
    return None if value is None or math.isnan(value) else value


# ----------------------------------------------------------------------------- the test's side
class StandInPlc:
    """The stand-in PLC in a process of its own on ``127.0.0.1:port`` (module docstring)."""

    def __init__(self, folder: Path, *, secure: bool = False, password: str = ""):
        self.folder, self.secure, self.password = folder, secure, password
        folder.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.endpoint = f"opc.tcp://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, *, wait: bool = True) -> StandInPlc:
        """Start (again, after a cold start: every variable cleared); with ``wait``, until it
        serves (else call :meth:`wait_ready`)."""
        (self.folder / "ready").unlink(missing_ok=True)
        self.starts += 1
        log = open(self.folder / f"plc-{self.starts}.log", "wb")  # noqa: SIM115 - the child's
        command = [sys.executable, __file__, "--port", str(self.port), "--folder", str(self.folder)]
        command += ["--secure"] if self.secure else []
        env = {**os.environ, "PLC_PASSWORD": self.password}
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        return self.wait_ready() if wait else self

    def wait_ready(self, timeout: float = 30.0) -> StandInPlc:
        deadline = time.monotonic() + timeout
        while not (self.folder / "ready").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the stand-in PLC did not start: {self.log()}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        path = self.folder / f"plc-{self.starts}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def taken(self) -> list[dict]:
        """Every record the PLC took (or call it accepted), in order, repeats included."""
        return _lines(self.folder / "taken.jsonl")

    def violations(self) -> list[dict]:
        return _lines(self.folder / "violations.jsonl")

    def hold(self, on: bool = True) -> None:
        """Stop (or resume) taking records: the PLC program in STOP, its server up."""
        if on:
            (self.folder / "hold").touch()
        else:
            (self.folder / "hold").unlink(missing_ok=True)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signum)


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--secure", action="store_true")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(_serve(options.port, options.folder, options.secure))
