"""The plant YAML's ``connectors.mqtt``: the line's MQTT broker, where readings arrive in real
time (``qcllp serve intake``) and where the station scorers publish their flags.

Part of the schema of :mod:`.document`, beside the file and SQL connectors of
:mod:`.sections`. The broker's password follows the database password's rules under its own
variables, ``QCLLP_MQTT_PASSWORD`` or ``QCLLP_MQTT_PASSWORD_FILE``
(:mod:`qcllp.store.credentials`): never in the YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from qcllp.plant.config.fields import Integer, LocalPath, Number, Switch, Text
from qcllp.plant.config.problems import Problem, Section

STATION_FIELD = "{station}"  # the placeholder a topic template must hold


class Mqtt(Section):
    """The plant's MQTT broker: readings in, flags out (QoS 1 both ways)."""

    cross_keys: ClassVar[bool] = True
    host: Text = Field(description="The broker's host name or address.")
    port: Integer = Field(
        None, ge=1, le=65535, description="The broker's port; default 1883, or 8883 with tls."
    )
    client_id: Text = Field(
        None,
        description="The intake's MQTT client id; its session (the readings the broker keeps "
        "for it while it is down) is bound to it, so it must stay the same across restarts and "
        "be unique on the broker. Default: qcllp-intake-<plant name>. A station's scorer "
        "publishes as <client_id>-flags-<station>.",
    )
    username: Text = Field(
        None,
        description="The user name, if the broker asks for one; its password comes from "
        "QCLLP_MQTT_PASSWORD or QCLLP_MQTT_PASSWORD_FILE, never from this file.",
    )
    tls: Switch = Field(False, description="Connect over TLS (the broker's certificate checked).")
    ca_file: LocalPath = Field(
        None,
        description="The CA certificate(s) the broker's certificate is checked against, with "
        "tls; default: the system's.",
    )
    readings_topic: Text = Field(
        "qcllp/{station}/readings",
        description="The topic of each station's readings (with {station}); the intake "
        "subscribes to one per station. The payload: docs/data.md, 'Readings over MQTT'.",
    )
    flags_topic: Text = Field(
        "qcllp/{station}/flags",
        description="The topic each station's scorer publishes its flags to (with {station}).",
    )
    publish_flags: Switch = Field(
        True, description="Whether the station scorers publish their flags to flags_topic."
    )
    batch_max_messages: Integer = Field(
        500,
        ge=1,
        description="The intake stores what arrived in one transaction once this many "
        "messages wait (or batch_max_s passed), and only then acknowledges them to the broker. "
        "The broker's max_inflight_messages must allow as many (deploy/mosquitto).",
    )
    batch_max_s: Number = Field(
        0.1,
        gt=0,
        description="The longest a message waits in the intake before it is stored (seconds).",
    )
    keepalive_s: Integer = Field(
        15, ge=5, description="MQTT keep-alive: a silent broker is noticed within 1.5 times this."
    )
    host_http: Text = Field(
        "127.0.0.1", description="Where the intake's /healthz and /metrics listen."
    )
    port_http: Integer = Field(
        9468, ge=1, le=65535, description="The port of the intake's /healthz and /metrics."
    )

    @classmethod
    def cross_problems(cls, raw: Mapping, context: dict) -> list[Problem]:
        found = []
        for key in ("readings_topic", "flags_topic"):
            topic = raw.get(key)
            if isinstance(topic, str) and not _one_station_topic(topic):
                found.append(
                    Problem(
                        (key,),
                        f"must hold {STATION_FIELD} once and no wildcard (+ or #), got {topic!r}",
                    )
                )
        if raw.get("ca_file") is not None and raw.get("tls") is not True:
            found.append(Problem(("ca_file",), "is used only with tls: true"))
        return found


def _one_station_topic(topic: str) -> bool:
    """A topic template that names one topic per station: ``{station}`` once, no wildcard."""
    return topic.count(STATION_FIELD) == 1 and not ({"+", "#"} & set(topic))
