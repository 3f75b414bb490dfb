"""A station scorer's flags, published to the line's MQTT broker as they are decided.

One thread of the scorer process (:mod:`qcllp.service.scorer`), woken after every step and at
least once a second. It reads the station's flags above its delivery cursor from the outbox
(:mod:`qcllp.scoring.flag_outbox`: the flags table itself, committed with each step), publishes
each at QoS 1 to the station's topic (``connectors.mqtt.flags_topic``), and moves the cursor
over the flags the broker acknowledged, each with all before it. So:

* a ``kill -9`` of the scorer, a broker restart or a network cut loses no flag: the cursor
  stands at the last acknowledged prefix, the rest is sent again (by paho after a reconnect,
  or from the cursor after a restart);
* a flag may reach the broker twice (acknowledged, then killed before the cursor's commit):
  each message carries its ``flag_id`` for the consumer to drop a repeat;
* the steps never wait for the broker: a broker away delays the line's flags, not the
  decisions (the sink, when there is one, still gets them). ``/healthz`` then says
  ``degraded`` with how many flags wait (:class:`PublisherStatus`).

At most :data:`MAX_IN_FLIGHT` flags are handed to paho and not yet acknowledged, so a broker
away for hours costs memory in proportion to that bound, not to the backlog (which waits in
the database).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy.exc import SQLAlchemyError

from qcllp.plant.config import PlantConfig
from qcllp.scoring.flag_outbox import advance, flag_message, start_cursor, undelivered
from qcllp.service.logs import log_event, one_line
from qcllp.service.mqtt.link import BrokerLink
from qcllp.store import Store

__all__ = ["CHANNEL", "FlagPublisher", "PublisherMetrics", "PublisherStatus"]

log = logging.getLogger("qcllp.scorer.mqtt")
CHANNEL = "mqtt"
BATCH = 1000  # flags read from the outbox at once
MAX_IN_FLIGHT = 5000  # flags handed to paho and not yet acknowledged
WAKE_S = 1.0


@dataclass(frozen=True)
class PublisherStatus:
    """What ``/healthz`` says of the publisher: connected, and the flags not yet acknowledged
    that it knows of (handed to paho; the database may hold more)."""

    topic: str
    connected: bool
    in_flight: int
    problem: str | None

    def problems(self) -> list[str]:
        if self.connected and self.problem is None:
            return []
        why = self.problem or "not connected to the broker"
        return [f"flags not published to {self.topic}: {why}; {self.in_flight} in hand"]


class PublisherMetrics:
    """The publisher's metrics, on the scorer's registry (labelled by station)."""

    def __init__(self, registry: CollectorRegistry, station: str):
        labels = {"station": station}
        self.published = Counter(
            "qcllp_scorer_flags_published_total", "Flags the broker acknowledged.",
            ["station"], registry=registry,
        ).labels(**labels)  # fmt: skip
        self.in_flight = Gauge(
            "qcllp_scorer_flags_in_flight",
            "Flags handed to the broker and not yet acknowledged.", ["station"],
            registry=registry,
        ).labels(**labels)  # fmt: skip
        self.connected = Gauge(
            "qcllp_scorer_mqtt_connected", "1 while connected to the broker.", ["station"],
            registry=registry,
        ).labels(**labels)  # fmt: skip


class FlagPublisher:
    """The MQTT channel of one station's flags (module docstring)."""

    def __init__(
        self, store: Store, config: PlantConfig, station: str, registry: CollectorRegistry
    ):
        settings = config.connectors.mqtt
        assert settings is not None, "FlagPublisher needs connectors.mqtt"
        self.store, self.station = store, station
        self.topic = settings.flags_topic_of(station)
        self.link = BrokerLink(settings, f"{config.mqtt_client_id}-flags-{station}")
        self.link.client.on_publish = self._acknowledged
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.cursor: int | None = None  # committed: acknowledged with every flag before it
        self.sent_up_to = 0  # the newest flag handed to paho
        self.in_flight: OrderedDict[int, int] = OrderedDict()  # flag id -> message id
        self._acked: set[int] = set()  # message ids the broker acknowledged (paho's thread)
        self._lock = threading.Lock()
        self.problem: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"mqtt-{station}", daemon=True)
        self.metrics = PublisherMetrics(registry, station)

    def start(self) -> None:
        self.link.start()
        self._thread.start()

    def nudge(self) -> None:
        """New flags may be in the outbox (called after a step)."""
        self.wake.set()

    def status(self) -> PublisherStatus:
        return PublisherStatus(
            self.topic, self.link.connected.is_set(), len(self.in_flight),
            self.problem or self.link.last_problem,
        )  # fmt: skip

    def stop(self, wait_s: float = 5.0) -> None:
        """Stop the thread (waiting at most ``wait_s`` + 5 s for its round) after counting the
        acknowledgements already in; what is still unacknowledged goes again from the cursor
        at the next start."""
        self.stopping.set()
        self.wake.set()
        self._thread.join(timeout=wait_s + 5)
        self.link.stop()

    def _acknowledged(self, _client, _userdata, mid, _reason, _properties) -> None:  # noqa: ANN001
        with self._lock:
            self._acked.add(mid)

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.wake.wait(WAKE_S)
            self.wake.clear()
            try:
                self.round()
                self.problem = None
            except SQLAlchemyError as exc:
                if self.problem is None:
                    log_event(log, "publish_failed", level=logging.ERROR, station=self.station,
                              error=one_line(exc))  # fmt: skip
                self.problem = f"database: {one_line(exc)}"
        # the acknowledgements that came in meanwhile; a database away leaves the cursor
        # behind, and those flags go again at the next start
        with contextlib.suppress(SQLAlchemyError):
            self._settle()

    def round(self) -> None:
        """Hand the next flags of the outbox to paho, then count the acknowledgements.

        In that order: reading the outbox takes no lock, moving the cursor is a write, and on
        SQLite a write waits for the one writer lock behind the intake and the steps -- the
        line's new flags do not wait for it (``benchmarks/bench_line_latency.py``)."""
        if self.cursor is None:
            self.cursor = start_cursor(self.store, self.station, CHANNEL)
            self.sent_up_to = self.cursor
        self.metrics.connected.set(self.link.connected.is_set())
        full = self._publish()
        self._settle()
        if full and len(self.in_flight) < MAX_IN_FLIGHT:
            self.wake.set()  # settling made room: the next flags without the pause

    def _publish(self) -> bool:
        """Hand the flags above the newest sent to paho, at most the room in flight; whether
        there was no room."""
        room = MAX_IN_FLIGHT - len(self.in_flight)
        if not self.link.connected.is_set() or room <= 0:
            return room <= 0
        rows = undelivered(self.store, self.station, self.sent_up_to, min(BATCH, room))
        for row in rows:
            info = self.link.client.publish(self.topic, flag_message(row), qos=1)
            self.in_flight[int(row["id"])] = info.mid
            self.sent_up_to = int(row["id"])
        self.metrics.in_flight.set(len(self.in_flight))
        if len(rows) == min(BATCH, room):
            self.wake.set()  # more waiting: go on without the pause
        return False

    def _settle(self) -> None:
        """Move the cursor over the acknowledged prefix of the flags in flight."""
        done, count = None, 0
        with self._lock:
            while self.in_flight:
                flag_id, mid = next(iter(self.in_flight.items()))
                if mid not in self._acked:
                    break
                self._acked.discard(mid)
                self.in_flight.popitem(last=False)
                done, count = flag_id, count + 1
        if done is None:
            return
        self.metrics.published.inc(count)
        self.metrics.in_flight.set(len(self.in_flight))
        advance(self.store, self.station, CHANNEL, done)
        self.cursor = done
