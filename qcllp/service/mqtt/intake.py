"""The MQTT intake: ``qcllp serve intake``, readings from the line's broker into the store.

It subscribes to every station's readings topic (``connectors.mqtt.readings_topic``) at QoS 1
under a persistent session (:mod:`.link`) and stores what arrives in small
batches, each one transaction through the files' validation and quarantine
(:func:`qcllp.ingest.mqtt_messages.store_messages`). A batch is stored once
``batch_max_messages`` wait or ``batch_max_s`` after its first message, whichever comes first;
the station scorers see it the moment it commits. Why not at once when the stream pauses: a
batch has a fixed cost (about 20 ms on the 2-core reference machine, against 0.2 ms per
message), so at 2,000 messages a second the pauses between sticks made batches of a few
messages whose fixed costs alone took more than a core; bounded by time, a batch costs at most
``1 / batch_max_s`` of them a second, and a message waits at most ``batch_max_s``.

**Nothing lost, nothing twice.** A message is acknowledged to the broker only after the
batch holding it committed. Killed before that, the broker still holds it for the session and
delivers it again; stored twice, a reading is a duplicate and stores nothing
(:mod:`qcllp.ingest.mqtt_messages`). A database that is away fails the batch: it is kept and
retried (backing off to :data:`RETRY_MAX_S`), nothing acknowledged meanwhile, so the broker
holds back the rest (its in-flight window) and keeps it queued. Acknowledgements go back on
the connection a message came on: after a reconnect the broker resends whatever was not
acknowledged, so a late acknowledgement on the new connection is not needed (nor sent).

**Its own service, not part of a scorer**: readings are the plant's, not a station's. One
intake feeds every station's scorer and the retraining daemon, keeps storing while a scorer
restarts for a new model, and holds one broker session (a client id is one session: two
scorers subscribing under it would take it from each other). One per plant: a second
instance waits as a standby on the ``intake`` lease (:mod:`qcllp.store.leases`) and takes over
within :data:`LEASE_TTL_S` when the first dies.

SIGTERM or SIGINT: the batch in hand is stored and acknowledged, the session closed cleanly,
exit code 0. ``/healthz`` and ``/metrics`` as the other services (:mod:`.intake_health`).
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from qcllp.ingest.mqtt_messages import Message, store_messages
from qcllp.plant.config import ConfigError, PlantConfig, exposed_host_warning
from qcllp.service.http import HealthServer
from qcllp.service.logs import log_event, one_line
from qcllp.service.mqtt.intake_health import IntakeMetrics, IntakeState
from qcllp.service.mqtt.link import BrokerLink
from qcllp.store import Store
from qcllp.store.leases import HeldLease, LeaseBusy

__all__ = ["Intake", "run_intake"]

log = logging.getLogger("qcllp.intake")
LEASE = "intake"
LEASE_TTL_S = 10.0
RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class _Received:
    message: Message
    mid: int
    qos: int
    generation: int  # the connection it came on


class Intake:
    """One plant's intake: the broker link, the messages in hand, and the store."""

    def __init__(self, store: Store, config: PlantConfig):
        settings = config.connectors.mqtt
        if settings is None:
            raise ConfigError(f"{config.path}: connectors.mqtt is not configured")
        self.store, self.config, self.settings = store, config, settings
        self.topics = {settings.readings_topic_of(s): s for s in config.station_names}
        self.inbox: queue.Queue[_Received] = queue.Queue()
        self.stopping = threading.Event()
        self.metrics = IntakeMetrics()
        self.link = BrokerLink(
            settings,
            config.mqtt_client_id,
            manual_ack=True,
            on_connect=self._subscribe,
            on_message=self._received,
        )
        self.state = IntakeState(self.link.broker)

    def _subscribe(self, client) -> None:  # noqa: ANN001 - paho's client, network thread
        client.subscribe([(topic, 1) for topic in self.topics])

    def _received(self, message) -> None:  # noqa: ANN001 - paho's message, network thread
        station = self.topics.get(message.topic)
        if station is None:  # a topic of a station no longer configured (an old session's)
            station = message.topic
        found = Message(message.topic, station, bytes(message.payload))
        self.inbox.put(_Received(found, message.mid, message.qos, self.link.generation))
        self.metrics.messages.inc()

    def take(self) -> list[_Received]:
        """The next batch: what arrives within ``batch_max_s`` of its first message, up to
        ``batch_max_messages``; ``[]`` after half a second of nothing."""
        try:
            batch = [self.inbox.get(timeout=0.5)]
        except queue.Empty:
            return []
        deadline = time.monotonic() + self.settings.batch_max_s
        while len(batch) < self.settings.batch_max_messages:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append(self.inbox.get(timeout=remaining))
            except queue.Empty:
                break
        return batch

    def store_batch(self, batch: list[_Received]) -> bool:
        """Store a batch and acknowledge its messages; ``False`` (nothing acknowledged, the
        batch to be retried) when the store failed."""
        started = time.perf_counter()
        try:
            report = store_messages(self.store, self.config, [r.message for r in batch])
        except (SQLAlchemyError, OSError) as exc:
            self.metrics.errors.inc()
            with self.state.lock:
                self.state.last_error = one_line(exc)
            _log("store_failed", level=logging.ERROR, messages=len(batch), error=one_line(exc))
            return False
        generation = self.link.generation
        for r in batch:
            if r.generation == generation:
                self.link.ack(r.mid, r.qos)
        self.metrics.batch_seconds.observe(time.perf_counter() - started)
        self.metrics.count(report)
        with self.state.lock:
            self.state.last_error = None
            self.state.last_stored_at = datetime.now(UTC)
        if report.quarantined:
            _log("quarantined", batch=report.batches[0] if report.batches else None,
                 reasons=dict(report.quarantined), messages=len(batch))  # fmt: skip
        return True

    def serve(self, lease: HeldLease) -> None:
        """Connect and store batches until stopping or the lease is lost; then store what is
        in hand and disconnect."""
        self.link.start()
        batch: list[_Received] = []
        retry_s = 0.0
        try:
            while not self.stopping.is_set() and not lease.lost:
                self._show()
                batch = batch or self.take()
                if batch and self.store_batch(batch):
                    batch, retry_s = [], 0.0
                elif batch:
                    retry_s = min(max(2 * retry_s, 0.25), RETRY_MAX_S)
                    self.stopping.wait(retry_s)
            while not lease.lost and (batch or not self.inbox.empty()):  # SIGTERM: what is in hand
                batch = batch or self._drain()
                if not self.store_batch(batch):
                    break
                batch = []
        finally:
            self.link.stop()

    def _drain(self) -> list[_Received]:
        batch = []
        while not self.inbox.empty() and len(batch) < self.settings.batch_max_messages:
            batch.append(self.inbox.get_nowait())
        return batch

    def _show(self) -> None:
        connected = self.link.connected.is_set()
        self.metrics.connected.set(connected)
        self.metrics.waiting.set(self.inbox.qsize())
        with self.state.lock:
            self.state.connected = connected
            self.state.broker_problem = self.link.last_problem
            self.state.waiting = self.inbox.qsize()


def run_intake(store: Store, config: PlantConfig, *, port: int | None = None) -> int:
    """Run the intake until SIGTERM/SIGINT (module docstring); returns the exit code, 0."""
    intake = Intake(store, config)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: intake.stopping.set())
    settings = intake.settings
    http = HealthServer(
        settings.host_http,
        settings.port_http if port is None else port,
        intake.state,
        intake.metrics.registry,
    )
    http.start()
    _log("started", broker=intake.link.broker, client_id=intake.link.client_id,
         topics=sorted(intake.topics), http=f"http://{settings.host_http}:{http.port}",
         database=store.display_url)  # fmt: skip
    exposed = exposed_host_warning("connectors.mqtt.host_http", settings.host_http)
    if exposed:
        _log("exposed", level=logging.WARNING, warning=exposed)
    while not intake.stopping.is_set():
        lease = _lease(store, intake)
        if lease is None:
            continue
        with lease:
            _log("active", holder=lease.holder)
            intake.serve(lease)
    _log("stopping")
    http.stop()
    _log("stopped")
    return 0


def _lease(store: Store, intake: Intake) -> HeldLease | None:
    """The plant's intake lease, or ``None`` after a wait as a standby (another intake holds
    it, or the database is away)."""
    try:
        lease = HeldLease.take(store, LEASE, ttl_s=LEASE_TTL_S)
    except (LeaseBusy, SQLAlchemyError) as exc:
        busy = isinstance(exc, LeaseBusy)
        with intake.state.lock:
            was, intake.state.standby = intake.state.standby, busy
            intake.state.last_error = None if busy else one_line(exc)
        if busy and not was:
            _log("standby", reason=one_line(exc))
        intake.stopping.wait(LEASE_TTL_S / 5)
        return None
    with intake.state.lock:
        intake.state.standby = False
    return lease


def _log(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    log_event(log, event, level=level, service="intake", **fields)
