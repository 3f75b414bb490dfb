"""How one flag is handed to the PLC and when the PLC has taken it: the write handshake and the
method call. Each returns from :meth:`deliver` only once the PLC accepted the flag; the writer
(:mod:`.flag_writer`) moves its cursor then, and only then hands over the next one.

**Write mode** -- a one-record mailbox in the PLC, the handshake an automation engineer knows
from fieldbus data blocks:

1. qcllp reads ``flag_id`` and ``ack``. The mailbox is *free* when they are equal (the PLC
   took the last record; 0 and 0 after a cold start).
2. Free: qcllp writes ``charge_id``, ``stick_id``, ``decision`` (and ``probability``) in one
   request, and only once that returned Good, ``flag_id`` alone in a second one. ``flag_id``
   changing is the PLC's *new record* signal: when it sees it, every field is written.
3. The PLC program, on ``flag_id <> ack``, copies the fields and writes ``ack := flag_id``.
4. qcllp reads ``ack`` 5 ms after the write, then twice as long each time, at most every
   ``poll_s``; ``ack`` = the flag's id is the acknowledgement.

Why it holds:

* **The PLC never reads a half-written record**: the fields go before ``flag_id``, in a
  request of their own; a write cut half-way leaves ``flag_id = ack``, no new record.
* **qcllp never overwrites a record the PLC has not taken**: it writes only into a free
  mailbox; one that holds an untaken record (``flag_id <> ack``) -- its own after a restart,
  or anyone's -- it waits for, however long (after ``ack_timeout_s`` ``/healthz`` says so).
* **Nothing is skipped, a repeat is harmless**: the writer moves its cursor over a flag only
  after its acknowledgement and commits it before it posts the next, so after a ``kill -9``
  the one flag that can come again is the last one posted. If the PLC had acknowledged it,
  ``ack`` already holds its id and it counts as delivered without a write; if not, it is
  still in the mailbox and qcllp waits for its ``ack``; if the PLC lost it (a cold start
  cleared the mailbox), qcllp writes it again. A PLC program that also keeps the last id it
  took drops any repeat by ``flag_id``, whatever happened.

**Method mode** -- one call ``method(flag_id, charge_id, stick_id, decision, probability)``
on ``object`` per flag, in order; a Good status is the acknowledgement. A Bad status (the PLC's
queue full, say) is a refusal: the same flag is called again a second later, never skipped.
After a call whose answer was lost, the flag is called again: the PLC drops it by ``flag_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Protocol

from asyncua import Client, ua

from qcllp.plant.config import OpcuaConnector, PlcStation
from qcllp.service.logs import log_event
from qcllp.service.opcua.records import (
    FIELDS,
    PlcProblem,
    field_values,
    type_problem,
    variant,
    variant_type,
)

__all__ = ["Handshake", "MethodCall", "Stopped", "WriteHandshake", "handshake_for", "nap"]

log = logging.getLogger("qcllp.scorer.opcua")
REFUSED_RETRY_S = 1.0  # a refused method call is repeated after this pause
# the first read of ack after a write; each further one waits twice as long, up to poll_s: a
# PLC that scans every 10 ms is answered in about that, one that is slow is not read in vain
FIRST_POLL_S = 0.005


class Stopped(Exception):
    """The writer is stopping: a wait ends early, the flag stays where it is."""


async def nap(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``; :class:`Stopped` as soon as ``stopping`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    if stopping.is_set():
        raise Stopped


class Handshake(Protocol):
    """What the writer asks of a mode: read the types once connected, deliver one flag."""

    problem: str | None  # why the current flag is not accepted yet (after ack_timeout_s)

    async def prepare(self, client: Client) -> None: ...

    async def deliver(self, client: Client, row: dict) -> None: ...


def handshake_for(
    settings: OpcuaConnector, station: str, stopping: asyncio.Event
) -> WriteHandshake | MethodCall:
    """The station's mode of delivery."""
    plc = settings.stations[station]
    cls = WriteHandshake if plc.mode == "write" else MethodCall
    return cls(settings, plc, station, stopping)


class _Mode:
    """What both modes share: the settings, the types read at connect, the stall report."""

    def __init__(
        self, settings: OpcuaConnector, plc: PlcStation, station: str, stopping: asyncio.Event
    ):
        self.settings, self.plc, self.station, self.stopping = settings, plc, station, stopping
        self.types: dict[str, ua.VariantType] = {}
        self.problem: str | None = None
        self._said: int | None = None  # the flag whose stall was logged

    def _stalled(self, flag_id: int, since: float, why: str) -> None:
        """After ``ack_timeout_s`` without acceptance: the problem ``/healthz`` shows, logged
        once per flag."""
        waited = time.monotonic() - since
        if waited < self.settings.ack_timeout_s:
            return
        self.problem = f"{why} for {waited:.0f} s"
        if self._said != flag_id:
            self._said = flag_id
            log_event(log, "plc_stalled", level=logging.WARNING, station=self.station,
                      flag_id=flag_id, problem=why)  # fmt: skip

    def _checked(self, problems: list[str | None]) -> None:
        found = [p for p in problems if p is not None]
        if found:
            raise PlcProblem("; ".join(found))


class WriteHandshake(_Mode):
    """Write mode (module docstring)."""

    async def prepare(self, client: Client) -> None:
        """Read the data type of every configured variable; :class:`PlcProblem` when one
        cannot hold its field."""
        nodes = self.plc.nodes
        answers = await client.uaclient.read_attributes(
            [ua.NodeId.from_string(n) for n in nodes.values()], ua.AttributeIds.DataType
        )
        problems: list[str | None] = []
        for (field, node), answer in zip(nodes.items(), answers, strict=True):
            if not answer.StatusCode.is_good():
                problems.append(f"variable {node} for {field}: {answer.StatusCode.name}")
                continue
            self.types[field] = await variant_type(client, answer.Value.Value)
            problems.append(type_problem(field, self.types[field], f"variable {node}"))
        self._checked(problems)

    async def deliver(self, client: Client, row: dict) -> None:
        values = field_values(row)
        flag_id = values["flag_id"]
        record = [f for f in FIELDS if f != "flag_id" and f in self.plc.nodes]
        since, pause = time.monotonic(), FIRST_POLL_S
        while True:
            posted, ack = await self._mailbox(client)
            if ack == flag_id:
                self.problem = None
                return
            if posted == ack:  # free: the record, then its id
                await self._write(client, {f: values[f] for f in record})
                await self._write(client, {"flag_id": flag_id})
                pause = FIRST_POLL_S
            elif posted == flag_id:
                self._stalled(flag_id, since, f"the PLC has not acknowledged flag {flag_id}")
            else:
                why = (
                    f"the PLC has not taken the record of flag {posted} in its variables "
                    f"(ack {ack}), which qcllp does not overwrite"
                )
                self._stalled(flag_id, since, why)
            await nap(self.stopping, min(pause, self.settings.poll_s))
            pause *= 2

    async def _mailbox(self, client: Client) -> tuple[int, int]:
        """The values of ``flag_id`` and ``ack``, in one request."""
        nodes = [self.plc.nodes["flag_id"], self.plc.nodes["ack"]]
        answers = await client.uaclient.read_attributes(
            [ua.NodeId.from_string(n) for n in nodes], ua.AttributeIds.Value
        )
        for node, answer in zip(nodes, answers, strict=True):
            if not answer.StatusCode.is_good():
                raise PlcProblem(f"reading {node}: {answer.StatusCode.name}")
        return tuple(int(a.Value.Value or 0) for a in answers)  # type: ignore[return-value]

    async def _write(self, client: Client, values: dict[str, Any]) -> None:
        """Write ``values`` (field -> value) in one request; :class:`PlcProblem` naming the
        first variable the PLC refused."""
        nodes = [ua.NodeId.from_string(self.plc.nodes[f]) for f in values]
        data = [ua.DataValue(variant(f, v, self.types[f])) for f, v in values.items()]
        answers = await client.uaclient.write_attributes(nodes, data, ua.AttributeIds.Value)
        for field, answer in zip(values, answers, strict=True):
            if not answer.is_good():
                raise PlcProblem(
                    f"the PLC refused the write of {field} to {self.plc.nodes[field]}: "
                    f"{answer.name}"
                )


class MethodCall(_Mode):
    """Method mode (module docstring)."""

    async def prepare(self, client: Client) -> None:
        """Read the method's declared input arguments; :class:`PlcProblem` unless they are
        five that can hold the fields of :data:`.records.FIELDS`, in that order."""
        method = client.get_node(self.plc.method)
        try:
            declared = await (await method.get_child("0:InputArguments")).read_value()
        except ua.UaStatusCodeError as exc:
            why = f"method {self.plc.method} declares no input arguments: {exc}"
            raise PlcProblem(why) from None
        if len(declared) != len(FIELDS):
            raise PlcProblem(
                f"method {self.plc.method} takes {len(declared)} arguments, not the "
                f"{len(FIELDS)} ({', '.join(FIELDS)})"
            )
        problems: list[str | None] = []
        for i, (field, argument) in enumerate(zip(FIELDS, declared, strict=True)):
            self.types[field] = await variant_type(client, argument.DataType)
            where = f"argument {i + 1} of method {self.plc.method}"
            problems.append(type_problem(field, self.types[field], where))
        self._checked(problems)

    async def deliver(self, client: Client, row: dict) -> None:
        values = field_values(row)
        request = ua.CallMethodRequest(
            ObjectId=ua.NodeId.from_string(self.plc.object),
            MethodId=ua.NodeId.from_string(self.plc.method),
            InputArguments=[variant(f, values[f], self.types[f]) for f in FIELDS],
        )
        since = time.monotonic()
        while True:
            (answer,) = await client.uaclient.call([request])
            if answer.StatusCode.is_good():
                self.problem = None
                return
            why = f"the PLC has refused flag {values['flag_id']} ({answer.StatusCode.name})"
            self._stalled(values["flag_id"], since, why)
            await nap(self.stopping, REFUSED_RETRY_S)
