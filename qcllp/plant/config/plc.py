"""The plant YAML's ``connectors.opcua``: the line's PLC, to which the station scorers write
their flags over OPC UA (:mod:`qcllp.service.opcua`).

Per station, either **write** mode -- the flag's fields written to variables of the PLC's
OPC UA server, handed over by a ``flag_id``/``ack`` handshake -- or **method** mode, one call
of a method of the PLC per flag. Part of the schema of :mod:`.document`, beside MQTT
(:mod:`.message_bus`). The password of ``username`` follows the database password's rules
under its own variables, ``QCLLP_OPCUA_PASSWORD`` or ``QCLLP_OPCUA_PASSWORD_FILE``
(:mod:`qcllp.store.credentials`): never in the YAML, nor in the endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, WithJsonSchema

from qcllp.plant.config.fields import Integer, LocalPath, Number, Text, choice, problem
from qcllp.plant.config.problems import Problem, Section

WRITE, METHOD = "write", "method"
SECURITY_POLICIES = ("None", "Basic256Sha256", "Aes128Sha256RsaOaep", "Aes256Sha256RsaPss")
# an OPC UA node id as its string form writes it: ns=2;s=Line.Cooling.FlagId, i=85, nsu=...
NODE_ID_PATTERN = r"^((ns=\d+|nsu=[^;]+);)?(i=\d+|s=.+|g=[0-9A-Fa-f-]{36}|b=[A-Za-z0-9+/=]+)$"
_NODE_ID_RE = re.compile(NODE_ID_PATTERN)
_ENDPOINT_RE = re.compile(
    r"^opc\.tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}(/.*)?$"
)


def _node_id(value: str) -> str:
    if not _NODE_ID_RE.match(value):
        raise problem(
            f'{value!r} is not an OPC UA node id (e.g. ns=3;s="Qcllp"."FlagId" or ns=2;i=17)'
        )
    return value


def _endpoint(value: str) -> str:
    if "@" in value.split("//", 1)[-1].split("/", 1)[0]:
        raise problem(
            "holds a user in the address; give it as username, its password in "
            "QCLLP_OPCUA_PASSWORD or QCLLP_OPCUA_PASSWORD_FILE"
        )
    if not _ENDPOINT_RE.match(value):
        raise problem(f"must be opc.tcp://<host>:<port>[/<path>], got {value!r}")
    return value


NodeId = Annotated[
    Text, AfterValidator(_node_id), WithJsonSchema({"type": "string", "pattern": NODE_ID_PATTERN})
]
Endpoint = Annotated[Text, AfterValidator(_endpoint)]


class PlcNodes(Section):
    """The variables of one station's record in the PLC (write mode); the PLC reads the
    others once ``flag_id`` changes and answers by writing that id to ``ack``."""

    flag_id: NodeId = Field(
        description="The flag's stable id, a variable of an integer type (UInt32, Int64...): "
        "written last, it says a new record is complete."
    )
    ack: NodeId = Field(
        description="Integer variable the PLC program writes the flag_id it took to; qcllp "
        "writes the next record only then."
    )
    charge_id: NodeId = Field(description="String variable: the charge.")
    stick_id: NodeId = Field(description="String variable: the stick.")
    decision: NodeId = Field(
        description="String variable (lock_out, pass, inspect, unscorable) or integer variable "
        "(1 pass, 2 inspect, 3 lock_out, 4 unscorable).",
    )
    probability: NodeId | None = Field(
        None,
        description="Float or Double variable: the model's probability of a defect (NaN for "
        "an unscorable stick); optional.",
    )


class PlcStation(Section):
    """How one station's flags reach the PLC."""

    cross_keys: ClassVar[bool] = True
    mode: choice(WRITE, METHOD) = Field(
        WRITE,
        description="write: the flag's fields to variables, with a flag_id/ack handshake; "
        "method: one call of a method per flag.",
    )
    nodes: PlcNodes | None = Field(None, description="The variables of write mode.")
    object: NodeId | None = Field(
        None, description="Method mode: the node id of the object the method belongs to."
    )
    method: NodeId | None = Field(
        None,
        description="Method mode: the method's node id; its input arguments are (flag_id, "
        "charge_id, stick_id, decision, probability), typed as for write mode.",
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        mode = raw.get("mode", WRITE)
        if mode == WRITE:
            found = [Problem((k,), "is for mode: method") for k in ("object", "method") if k in raw]
            return found + ([] if "nodes" in raw else [Problem(("nodes",), "is required")])
        if mode == METHOD:
            found = [Problem((k,), "is required") for k in ("object", "method") if k not in raw]
            return found + ([Problem(("nodes",), "is for mode: write")] if "nodes" in raw else [])
        return []


class Opcua(Section):
    """The line's PLC, reached over OPC UA: the station scorers write their flags to it."""

    cross_keys: ClassVar[bool] = True
    endpoint: Endpoint = Field(
        description="The PLC's OPC UA server, opc.tcp://<host>:<port>, without a user."
    )
    stations: dict[str, PlcStation] = Field(
        description="The stations whose flags go to the PLC, by name: mode and nodes of each."
    )
    username: Text = Field(
        None,
        description="The user, if the server asks for one (else anonymous); its password comes "
        "from QCLLP_OPCUA_PASSWORD or QCLLP_OPCUA_PASSWORD_FILE, never from this file.",
    )
    security: choice(*SECURITY_POLICIES) = Field(
        "None",
        description="The security policy of the secure channel; with any but None, "
        "certificate and private_key are required.",
    )
    security_mode: choice("Sign", "SignAndEncrypt") = Field(
        "SignAndEncrypt", description="Sign only, or sign and encrypt (with a security policy)."
    )
    certificate: LocalPath = Field(
        None,
        description="qcllp's client certificate (DER or PEM) the PLC must trust; its URI "
        "becomes qcllp's application URI.",
    )
    private_key: LocalPath = Field(
        None, description="The certificate's private key (PEM or DER, unencrypted; chmod 600)."
    )
    server_certificate: LocalPath = Field(
        None,
        description="The PLC's certificate, to accept only that server; default: the one its "
        "endpoint presents.",
    )
    timeout_s: Number = Field(
        5.0,
        gt=0,
        description="A request without an answer this long counts the PLC as away "
        "(reconnect, with a backoff of 1 to 30 s).",
    )
    poll_s: Number = Field(
        0.05,
        gt=0,
        description="While the PLC has a record to take, qcllp reads ack 5 ms after the write, "
        "then twice as long each time, at most this long apart.",
    )
    ack_timeout_s: Number = Field(
        10.0,
        gt=0,
        description="A record the PLC has not acknowledged this long (or a method it keeps "
        "refusing) makes /healthz say degraded; qcllp keeps waiting, never overwrites it.",
    )
    session_timeout_s: Integer = Field(
        60, ge=10, description="The OPC UA session's lifetime without requests (seconds)."
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        secured = raw.get("security", "None") != "None"
        found = [
            Problem((key,), f"is required with security: {raw.get('security')}")
            for key in ("certificate", "private_key")
            if secured and key not in raw
        ]
        found += [
            Problem((key,), "is used only with a security policy (security)")
            for key in ("certificate", "private_key", "server_certificate")
            if not secured and key in raw
        ]
        return found + _nodes_used_twice(raw.get("stations"))


def _nodes_used_twice(stations: Any) -> list[Problem]:
    """A variable in two places of write mode would mix two records (or a record and its
    acknowledgement): each node id once across the stations."""
    if not isinstance(stations, Mapping):
        return []
    seen: dict[str, tuple] = {}
    found = []
    for name, station in stations.items():
        nodes = station.get("nodes") if isinstance(station, Mapping) else None
        if not isinstance(nodes, Mapping):
            continue
        for key, node in nodes.items():
            here = ("stations", str(name), "nodes", str(key))
            if isinstance(node, str) and node in seen:
                found.append(Problem(here, f"{node!r} is already {'.'.join(seen[node])}"))
            elif isinstance(node, str):
                seen[node] = here
    return found
