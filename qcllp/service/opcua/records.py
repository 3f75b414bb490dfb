"""A flag as the PLC takes it: its fields, typed as the PLC's variables (or the method's
arguments) declare them.

A PLC's OPC UA server refuses a value of another type than its variable's
(``BadTypeMismatch``), so qcllp reads each variable's data type when it connects and writes
exactly that type; it does not ask the automation engineer to declare the types twice. What
each field may be:

============  ==========================================================================
flag_id, ack  an integer type (SByte ... UInt64); a flag id that does not fit is a problem
charge_id,    String
stick_id
decision      String (``lock_out``, ``pass``, ``inspect``, ``unscorable``) or an integer
              type with the codes of :data:`DECISION_CODES` (1 pass, 2 inspect, 3 lock_out,
              4 unscorable; 0 is never written: a PLC's cleared variable means no decision)
probability   Float or Double; NaN for an unscorable stick (no probability)
============  ==========================================================================
"""

from __future__ import annotations

import math
from typing import Any

from asyncua import Client, ua
from asyncua.common.ua_utils import data_type_to_variant_type

__all__ = [
    "DECISION_CODES",
    "FIELDS",
    "PlcProblem",
    "field_values",
    "type_problem",
    "variant",
    "variant_type",
]

VT = ua.VariantType
FIELDS = ("flag_id", "charge_id", "stick_id", "decision", "probability")  # a method's order
DECISION_CODES = {"pass": 1, "inspect": 2, "lock_out": 3, "unscorable": 4}
INTEGERS = {
    VT.SByte: (-(2**7), 2**7 - 1), VT.Byte: (0, 2**8 - 1),
    VT.Int16: (-(2**15), 2**15 - 1), VT.UInt16: (0, 2**16 - 1),
    VT.Int32: (-(2**31), 2**31 - 1), VT.UInt32: (0, 2**32 - 1),
    VT.Int64: (-(2**63), 2**63 - 1), VT.UInt64: (0, 2**64 - 1),
}  # fmt: skip
REALS = {VT.Float, VT.Double}
ACCEPTED = {  # field -> the variant types it may be written as
    "flag_id": set(INTEGERS), "ack": set(INTEGERS),
    "charge_id": {VT.String}, "stick_id": {VT.String},
    "decision": {VT.String, *INTEGERS}, "probability": REALS,
}  # fmt: skip
_SAYS = {
    "flag_id": "an integer type", "ack": "an integer type", "charge_id": "String",
    "stick_id": "String", "decision": "String or an integer type",
    "probability": "Float or Double",
}  # fmt: skip


class PlcProblem(Exception):
    """What the PLC's variables, method or answers keep from delivering (a type that does not
    fit, a refused write, an unreadable acknowledgement): reported in ``/healthz``, and retried
    after a reconnect, which reads the types again (the PLC program may have been fixed)."""


def field_values(row: dict) -> dict[str, Any]:
    """A flag of the outbox (:func:`qcllp.scoring.flag_outbox.undelivered`) as the PLC's
    fields, in Python types."""
    probability = row.get("probability")
    return {
        "flag_id": int(row["id"]),
        "charge_id": str(row["charge_id"]),
        "stick_id": str(row["stick_id"]),
        "decision": str(row["decision"]),
        "probability": math.nan if probability is None else float(probability),
    }


def type_problem(field: str, kind: ua.VariantType, where: str) -> str | None:
    """Why a variable (or argument) ``where`` of type ``kind`` cannot hold ``field``, or
    ``None``."""
    if kind in ACCEPTED[field]:
        return None
    return f"{where} for {field} is of type {kind.name}; it must be {_SAYS[field]}"


def variant(field: str, value: Any, kind: ua.VariantType) -> ua.Variant:
    """``value`` of ``field`` as a variant of ``kind`` (a decision as its code for an integer
    type); :class:`PlcProblem` for an integer that does not fit the type."""
    if field == "decision" and kind in INTEGERS:
        value = DECISION_CODES[value]
    if kind in INTEGERS:
        low, high = INTEGERS[kind]
        if not low <= value <= high:
            raise PlcProblem(f"{field} {value} does not fit the PLC's {kind.name}")
    return ua.Variant(value, kind)


async def variant_type(client: Client, data_type: ua.NodeId) -> ua.VariantType:
    """The variant type a value of data type ``data_type`` is written as (a subtype or an
    enumeration resolved to its base: a PLC's own types derive from the standard ones)."""
    return await data_type_to_variant_type(client.get_node(data_type))
