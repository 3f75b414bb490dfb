"""The line's side of MQTT in the tests: a gateway that publishes readings (QoS 1, a persistent
session, so that what the broker has not acknowledged is sent again after a broker restart) and
a subscriber that collects flags. Real paho clients against the real broker of
:mod:`tests.mqttbroker`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

__all__ = ["Gateway", "FlagCollector"]


def _client(client_id: str, port: int) -> mqtt.Client:
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False,
        protocol=mqtt.MQTTv311,
    )  # fmt: skip
    client.reconnect_delay_set(0.2, 1)
    client.max_inflight_messages_set(100)
    return client


class Gateway:
    """Publishes payloads to topics at QoS 1 and knows which the broker acknowledged."""

    def __init__(
        self,
        port: int,
        client_id: str = "test-gateway",
        username: str | None = None,
        password: str | None = None,
        ca_file: Path | None = None,
    ):
        self.client = _client(client_id, port)
        if username is not None:
            self.client.username_pw_set(username, password)
        if ca_file is not None:
            self.client.tls_set(ca_certs=str(ca_file))
        self.lock = threading.Lock()
        self.acknowledged: set[int] = set()
        self.connected = threading.Event()
        self.client.on_connect = lambda *_: self.connected.set()
        self.client.on_publish = self._acknowledged
        self.client.connect_async("127.0.0.1", port, keepalive=5)
        self.client.loop_start()
        self.connected.wait(10)
        self.sent: list[int] = []

    def _acknowledged(self, _client, _userdata, mid, _reason, _properties) -> None:  # noqa: ANN001
        with self.lock:
            self.acknowledged.add(mid)

    def publish(self, items: Iterable[tuple[str, bytes]], per_s: float | None = None) -> None:
        """Publish ``(topic, payload)`` pairs, at most ``per_s`` a second when given."""
        started = time.monotonic()
        for n, (topic, payload) in enumerate(items):
            self.sent.append(self.client.publish(topic, payload, qos=1).mid)
            if per_s is not None:
                ahead = started + n / per_s - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)

    def all_acknowledged(self) -> bool:
        """Whether the broker acknowledged every message published (paho resends the others
        after a reconnect; message ids are reused only after an acknowledgement)."""
        with self.lock:
            return len(self.acknowledged.intersection(self.sent)) == len(set(self.sent))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class FlagCollector:
    """Subscribes to topics (QoS 1, persistent session) and keeps every message it got."""

    def __init__(self, port: int, topics: list[str], client_id: str = "test-line"):
        self.lock = threading.Lock()
        self.messages: list[dict] = []
        self.connects = 0
        self.client = _client(client_id, port)
        self.client.on_connect = lambda c, *_: self._connected(c, topics)
        self.client.on_message = self._got
        self.client.connect_async("127.0.0.1", port, keepalive=5)
        self.client.loop_start()

    def _connected(self, client, topics: list[str]) -> None:  # noqa: ANN001
        client.subscribe([(t, 1) for t in topics])
        with self.lock:
            self.connects += 1

    def _got(self, _client, _userdata, message) -> None:  # noqa: ANN001
        doc = json.loads(message.payload)
        with self.lock:
            self.messages.append({"topic": message.topic, **doc})

    def received(self) -> list[dict]:
        with self.lock:
            return list(self.messages)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
