"""A connection to the line's MQTT broker, as the intake and the scorers' flag publisher use it.

paho-mqtt (Eclipse's client, the reference Python implementation, kept by the Eclipse
Foundation) holds the protocol: QoS 1 handshakes, resending what was in flight after a
reconnect, keep-alive, TLS. Both users connect the same way:

* **MQTT 3.1.1 with a persistent session** (``clean_session=False`` under a fixed client id):
  the broker keeps the subscriptions and every QoS 1 message for the session while the client
  is away, and resends what it had not acknowledged when it is back. That is what makes a
  ``kill -9`` or a network cut lose nothing. 3.1.1 rather than 5: every broker a plant runs
  speaks it, and the session semantics needed here are the same.
* **Reconnect by itself**: paho's network thread (``loop_start``) reconnects with a backoff
  of 1 to 30 seconds; the caller only watches :attr:`BrokerLink.connected`.
* **Credentials** by the database password's rules (:func:`qcllp.store.credentials.
  secret_from_env` under ``QCLLP_MQTT``), TLS with the system's CAs or ``ca_file``.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from qcllp.plant.config import MqttConnector
from qcllp.service.logs import log_event
from qcllp.store.credentials import MQTT, secret_from_env

__all__ = ["BrokerLink"]

log = logging.getLogger("qcllp.mqtt")
RECONNECT_MIN_S, RECONNECT_MAX_S = 1, 30


class BrokerLink:
    """A paho client connected (and reconnected) to the configured broker in the background.

    ``on_connect(client)`` runs in paho's network thread after every successful connect
    (subscribe there: after a broker restart without persistence the subscriptions are gone).
    ``manual_ack``: QoS 1 messages are acknowledged only by :meth:`ack` (the intake, once
    stored) instead of when the callback returns.
    """

    def __init__(
        self,
        settings: MqttConnector,
        client_id: str,
        *,
        manual_ack: bool = False,
        on_connect: Callable[[mqtt.Client], None] | None = None,
        on_message: Callable[[Any], None] | None = None,
    ):
        self.settings = settings
        self.client_id = client_id
        self.connected = threading.Event()
        self.generation = 0  # counts connects: a message's acknowledgement belongs to one
        self.last_problem: str | None = None
        self._on_connect = on_connect
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=False,
            protocol=mqtt.MQTTv311,
            manual_ack=manual_ack,
        )
        password = secret_from_env(MQTT)
        if settings.username is not None or password is not None:
            client.username_pw_set(settings.username or "", password)
        if settings.tls:
            client.tls_set(ca_certs=settings.ca_file, cert_reqs=ssl.CERT_REQUIRED)
        client.reconnect_delay_set(RECONNECT_MIN_S, RECONNECT_MAX_S)
        client.max_queued_messages_set(0)  # what waits for the broker is bounded by the caller
        client.on_connect = self._connected
        client.on_disconnect = self._disconnected
        if on_message is not None:
            client.on_message = lambda _c, _u, message: on_message(message)
        self.client = client

    @property
    def broker(self) -> str:
        return f"{self.settings.host}:{self.settings.broker_port}"

    def start(self) -> None:
        """Connect in the background (a broker that is away is retried, not an error)."""
        self.client.connect_async(
            self.settings.host, self.settings.broker_port, keepalive=self.settings.keepalive_s
        )
        self.client.loop_start()

    def stop(self) -> None:
        """Disconnect cleanly (the session stays on the broker) and stop the network thread."""
        self.client.disconnect()
        self.client.loop_stop()
        self.connected.clear()

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received QoS 1 message (with ``manual_ack``)."""
        self.client.ack(mid, qos)

    def _connected(self, client, _userdata, _flags, reason_code, _properties) -> None:  # noqa: ANN001
        if reason_code.is_failure:
            self.last_problem = f"the broker refused the connection: {reason_code}"
            log_event(log, "mqtt_refused", level=logging.ERROR, broker=self.broker,
                      client_id=self.client_id, reason=str(reason_code))  # fmt: skip
            return
        self.generation += 1
        self.last_problem = None
        if self._on_connect is not None:
            self._on_connect(client)
        self.connected.set()
        log_event(log, "mqtt_connected", broker=self.broker, client_id=self.client_id)

    def _disconnected(self, _client, _userdata, _flags, reason_code, _properties) -> None:  # noqa: ANN001
        was = self.connected.is_set()
        self.connected.clear()
        if was:
            self.last_problem = f"disconnected from the broker: {reason_code}"
            # our own disconnect at a stop is news for no one on call
            level = logging.WARNING if reason_code.is_failure else logging.INFO
            log_event(log, "mqtt_disconnected", level=level, broker=self.broker,
                      client_id=self.client_id, reason=str(reason_code))  # fmt: skip
