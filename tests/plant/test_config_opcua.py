"""``connectors.opcua``: the PLC a station's flags are written to (qcllp.service.opcua).

A valid section becomes :class:`OpcuaConnector` with a :class:`PlcStation` per station; an
invalid one is refused with every problem at once, each naming its key: a password or user in
the endpoint, a mode's keys missing or given to the other mode, a variable used twice (it would
mix two records), an unknown station, certificates without security and the reverse.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from qcllp.plant import ConfigError, parse_plant_config
from qcllp.plant.config import OpcuaConnector, PlcStation
from tests.plant.conftest import EXAMPLE

FIELDS = ("flag_id", "ack", "charge_id", "stick_id", "decision")


def _plant(opcua: dict) -> dict:
    mapping = yaml.safe_load(EXAMPLE.read_text())
    mapping.setdefault("connectors", {})["opcua"] = opcua
    return mapping


def _nodes(station: str) -> dict[str, str]:
    return {key: f'ns=3;s="Qcllp_{station}"."{key}"' for key in FIELDS}


GOOD = {
    "endpoint": "opc.tcp://plc.line1:4840",
    "username": "qcllp",
    "stations": {
        "cooling": {"nodes": {**_nodes("cooling"), "probability": "ns=3;i=5001"}},
        "rolling": {"mode": "method", "object": "ns=3;s=Qcllp", "method": "ns=3;s=Qcllp.Take"},
    },
}


def test_a_valid_section_gives_each_station_its_mode_and_nodes():
    opcua = parse_plant_config(_plant(copy.deepcopy(GOOD))).connectors.opcua
    assert isinstance(opcua, OpcuaConnector)
    assert opcua.endpoint == "opc.tcp://plc.line1:4840" and opcua.username == "qcllp"
    assert (opcua.security, opcua.timeout_s, opcua.poll_s, opcua.ack_timeout_s) == (
        "None", 5.0, 0.05, 10.0,
    )  # fmt: skip
    assert opcua.stations["cooling"] == PlcStation(
        mode="write", nodes={**_nodes("cooling"), "probability": "ns=3;i=5001"}
    )
    assert opcua.stations["rolling"] == PlcStation(
        mode="method", object="ns=3;s=Qcllp", method="ns=3;s=Qcllp.Take"
    )


def test_every_problem_of_the_section_is_named_at_once(tmp_path):
    bad = copy.deepcopy(GOOD)
    bad["endpoint"] = "opc.tcp://qcllp:secret@plc.line1:4840"
    bad["certificate"] = str(tmp_path / "qcllp.der")
    bad["stations"]["cooling"]["method"] = "ns=3;s=Qcllp.Take"
    bad["stations"]["cooling"]["nodes"]["decision"] = "Decision"
    bad["stations"]["rolling"] = {"mode": "method", "object": "ns=3;s=Qcllp"}
    bad["stations"]["straightening"] = {"nodes": _nodes("cooling")}
    bad["stations"]["coiling"] = {"mode": "method", "object": "i=1", "method": "i=2"}
    with pytest.raises(ConfigError) as caught:
        parse_plant_config(_plant(bad), source="plant.yaml")
    errors = caught.value.errors
    at = "plant.yaml: connectors.opcua."
    expected = [
        f"{at}endpoint: holds a user in the address; give it as username, its password in "
        "QCLLP_OPCUA_PASSWORD or QCLLP_OPCUA_PASSWORD_FILE",
        f"{at}certificate: is used only with a security policy (security)",
        f"{at}stations.cooling.method: is for mode: method",
        f"{at}stations.cooling.nodes.decision: 'Decision' is not an OPC UA node id",
        f"{at}stations.rolling.method: is required",
        f"{at}stations.straightening.nodes.flag_id: "
        f"'{_nodes('cooling')['flag_id']}' is already stations.cooling.nodes.flag_id",
        f"{at}stations.coiling: unknown station 'coiling'",
    ]
    for line in expected:
        assert any(e.startswith(line) for e in errors), (line, errors)
    assert "secret" not in "\n".join(errors)


def test_a_security_policy_needs_the_client_certificate_and_its_key():
    secured = {**copy.deepcopy(GOOD), "security": "Basic256Sha256"}
    with pytest.raises(ConfigError) as caught:
        parse_plant_config(_plant(secured), source="plant.yaml")
    assert caught.value.errors == [
        "plant.yaml: connectors.opcua.certificate: is required with security: Basic256Sha256",
        "plant.yaml: connectors.opcua.private_key: is required with security: Basic256Sha256",
    ]
