"""A station scorer's flags, written to the line's PLC over OPC UA as they are decided.

One thread of the scorer process (:mod:`qcllp.service.scorer`), woken after every step and at
least once a second, beside the MQTT publisher and built the same way on the flags table as
an outbox (:mod:`qcllp.scoring.flag_outbox`, channel ``opcua``): it reads the station's flags
above its delivery cursor, hands each to the PLC by the station's mode (:mod:`.handshake`:
the write handshake or a method call), and moves the cursor over each flag the PLC accepted,
in order, committing it before the next flag goes. So:

* a ``kill -9`` of the scorer, a PLC stopped, restarted or frozen, or a network cut loses no
  flag: the cursor stands at the last accepted flag, and the rest goes from there after a
  reconnect or a restart;
* at most one flag reaches the PLC twice -- the last one, accepted just before a kill and not
  yet past the cursor -- with the same ``flag_id`` and content, for the PLC program to drop
  (in write mode the handshake itself recognises it, :mod:`.handshake`);
* the steps never wait for the PLC: a PLC away delays its flags, not the decisions (the sink
  and MQTT still get them). ``/healthz`` then says ``degraded`` with how many flags wait
  (:class:`PlcStatus`); so does a PLC that has not taken a record for ``ack_timeout_s``.

Why a thread with its own asyncio loop, not ``asyncua.sync``: the sync wrapper runs a loop in
a thread of its own too, and turns every call into a blocking round trip through it; here the
loop *is* the writer -- waiting for the next poll, a nudge or a stop is one ``await`` -- and
the blocking database calls go to a worker thread (``asyncio.to_thread``) so that asyncua's
keep-alive is never held up by them.

A PLC that cannot be reached, or whose variables do not fit (:mod:`.records`), is tried again
after 1, 2, 4 ... up to 30 seconds; each change of the reason is logged once (``plc_lost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asyncua import Client, ua
from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy.exc import SQLAlchemyError

from qcllp.plant.config import PlantConfig
from qcllp.scoring.flag_outbox import advance, start_cursor, undelivered, waiting
from qcllp.service.logs import log_event, one_line
from qcllp.service.opcua.handshake import Handshake, Stopped, handshake_for, nap
from qcllp.service.opcua.link import PlcLink
from qcllp.service.opcua.records import PlcProblem
from qcllp.store import Store

__all__ = ["CHANNEL", "PlcFlagWriter", "PlcMetrics", "PlcStatus"]

log = logging.getLogger("qcllp.scorer.opcua")
CHANNEL = "opcua"
BATCH = 1000  # flags read from the outbox at once
WAKE_S = 1.0
RECONNECT_MIN_S, RECONNECT_MAX_S = 1.0, 30.0
# what ends a session: the PLC away or not answering, a refusal, variables that do not fit
LOST = (OSError, TimeoutError, ConnectionError, ua.UaError, PlcProblem)


@dataclass(frozen=True)
class PlcStatus:
    """What ``/healthz`` says of the writer: connected, the flags above its cursor when last
    counted, and what keeps them, if anything."""

    endpoint: str
    connected: bool
    waiting: int
    problem: str | None

    def problems(self) -> list[str]:
        if self.connected and self.problem is None:
            return []
        why = self.problem or "not connected"
        return [f"flags not delivered to the PLC at {self.endpoint}: {why}; {self.waiting} wait"]


class PlcMetrics:
    """The writer's metrics, on the scorer's registry (labelled by station)."""

    def __init__(self, registry: CollectorRegistry, station: str):
        labels = {"station": station}
        self.delivered = Counter(
            "qcllp_scorer_plc_flags_delivered_total", "Flags the PLC accepted (OPC UA).",
            ["station"], registry=registry,
        ).labels(**labels)  # fmt: skip
        self.waiting = Gauge(
            "qcllp_scorer_plc_flags_waiting",
            "Flags decided and not yet accepted by the PLC (as last counted).", ["station"],
            registry=registry,
        ).labels(**labels)  # fmt: skip
        self.connected = Gauge(
            "qcllp_scorer_plc_connected", "1 while a session with the PLC is open.",
            ["station"], registry=registry,
        ).labels(**labels)  # fmt: skip


class PlcFlagWriter:
    """The OPC UA channel of one station's flags (module docstring)."""

    def __init__(
        self, store: Store, config: PlantConfig, station: str, registry: CollectorRegistry
    ):
        settings = config.connectors.opcua
        assert settings is not None and station in settings.stations, "not configured"
        self.store, self.station, self.settings = store, station, settings
        self.metrics = PlcMetrics(registry, station)
        self.cursor: int | None = None  # committed: accepted with every flag before it
        self.waiting = 0
        self.connected = False
        self.link_problem: str | None = None  # the last connect or session failure
        self.db_problem: str | None = None
        self.handshake: Handshake | None = None  # the current session's
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=f"opcua-{station}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def nudge(self) -> None:
        """New flags may be in the outbox (called after a step)."""
        self._call_in_loop(lambda: self._wake.set())

    def status(self) -> PlcStatus:
        stalled = self.handshake.problem if self.handshake is not None else None
        problem = self.db_problem or (stalled if self.connected else self.link_problem)
        return PlcStatus(self.settings.endpoint, self.connected, self.waiting, problem)

    def stop(self, wait_s: float = 5.0) -> None:
        """Stop waiting for the PLC and close the session; a flag posted and not yet
        acknowledged goes again (or is found acknowledged) at the next start."""
        self._stop.set()
        self._call_in_loop(lambda: (self._stopping.set(), self._wake.set()))
        self._thread.join(timeout=wait_s + self.settings.timeout_s)

    def _call_in_loop(self, action: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just ended
                loop.call_soon_threadsafe(action)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._wake, self._stopping = asyncio.Event(), asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop.is_set():  # stopped before the loop was there to hear it
            return
        try:  # at start, PLC or not: what is decided from now on is the PLC's to get
            self.cursor = await self._db(start_cursor, self.store, self.station, CHANNEL)
        except Stopped:
            return
        delay = RECONNECT_MIN_S
        while True:
            link = PlcLink(self.settings)
            try:
                await link.open()
                handshake = handshake_for(self.settings, self.station, self._stopping)
                self.handshake = handshake
                await handshake.prepare(link.client)
                self._connected(True)
                delay = RECONNECT_MIN_S
                await self._deliver(link.client, handshake)
            except Stopped:
                pass
            except LOST as exc:
                self._lost(exc)
            except Exception as exc:  # noqa: BLE001 - a bug must not end the channel silently
                log.exception("unexpected error in the PLC writer")
                self._lost(exc)
            finally:
                self._connected(False)
                await link.close()
            try:
                await self._count_waiting()
                await nap(self._stopping, delay)
            except Stopped:
                return
            delay = min(2 * delay, RECONNECT_MAX_S)

    async def _deliver(self, client: Client, handshake: Handshake) -> None:
        """Hand the outbox's flags to the PLC, one by one, for as long as the session lasts."""
        while True:
            rows = await self._db(undelivered, self.store, self.station, self.cursor, BATCH)
            if len(rows) < BATCH:
                self._waiting(len(rows))
            else:
                await self._count_waiting()
            if not rows:
                await self._idle(client)
                continue
            for row in rows:
                await handshake.deliver(client, row)
                flag_id = int(row["id"])
                await self._db(advance, self.store, self.station, CHANNEL, flag_id)
                self.cursor = flag_id
                self.metrics.delivered.inc()
                self._waiting(max(self.waiting - 1, 0))

    async def _db(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` in a worker thread, repeated every second while the database is
        away (the flag at hand waits: the cursor must not fall behind what the PLC took)."""
        while True:
            try:
                result = await asyncio.to_thread(call, *args)
            except SQLAlchemyError as exc:
                if self.db_problem is None:
                    log_event(log, "deliver_failed", level=logging.ERROR, station=self.station,
                              error=one_line(exc))  # fmt: skip
                self.db_problem = f"database: {one_line(exc)}"
                await nap(self._stopping, WAKE_S)
                continue
            self.db_problem = None
            return result

    async def _idle(self, client: Client) -> None:
        """Until a nudge, a second or a stop; a second without a nudge reads the server's
        state, so that a PLC gone while no flag is due shows in ``/healthz`` all the same."""
        try:
            await asyncio.wait_for(self._wake.wait(), WAKE_S)
        except TimeoutError:
            await client.nodes.server_state.read_value()
        self._wake.clear()
        if self._stopping.is_set():
            raise Stopped

    async def _count_waiting(self) -> None:
        """Count the flags above the cursor (best effort: the database may be away too)."""
        if self.cursor is None:
            return
        with contextlib.suppress(SQLAlchemyError):
            self._waiting(await asyncio.to_thread(waiting, self.store, self.station, self.cursor))

    def _waiting(self, count: int) -> None:
        self.waiting = count
        self.metrics.waiting.set(count)

    def _connected(self, connected: bool) -> None:
        if connected and not self.connected:
            self.link_problem = None
            log_event(log, "plc_connected", station=self.station,
                      endpoint=self.settings.endpoint,
                      mode=self.settings.stations[self.station].mode)  # fmt: skip
        self.connected = connected
        self.metrics.connected.set(int(connected))

    def _lost(self, exc: BaseException) -> None:
        """Record why the session ended or could not open; logged when the reason changes."""
        why = one_line(exc) if not isinstance(exc, PlcProblem) else str(exc)
        if why != self.link_problem:
            log_event(log, "plc_lost", level=logging.WARNING, station=self.station,
                      endpoint=self.settings.endpoint, error=why)  # fmt: skip
        self.link_problem = why
