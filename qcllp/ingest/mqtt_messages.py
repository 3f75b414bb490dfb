"""Readings that arrive as MQTT messages, into the store: the payload, and one batch per flush.

**The payload, version 1** (one UTF-8 JSON object per message, on the station's readings
topic, ``connectors.mqtt.readings_topic``). Either a stick's series at the station::

    {"v": 1, "charge_id": "C0042", "stick_id": "C0042-S07", "station": "cooling",
     "series": {"temp": [["2026-11-27T10:15:00.250Z", 812.5], ...], "speed": [...]}}

or one reading::

    {"v": 1, "charge_id": "C0042", "stick_id": "C0042-S07", "station": "cooling",
     "sensor": "temp", "timestamp": "2026-11-27T10:15:00.250Z", "value": 812.5}

``station`` may be left out (the topic names it); given, it must be the topic's. Ids are
strings (a JSON number is taken as its text); timestamps ISO 8601, as in files. Every
reading is then validated and stored exactly as a file's (:func:`ingest_reading_frames`):
a reading already stored with the same key and value is a duplicate and stores nothing, which
is what makes a message the broker delivers twice (QoS 1) harmless. A message that is not such
an object is quarantined whole, as ``malformed_message`` or ``unsupported_version``, with its
topic and text; a reading that fails validation is quarantined alone (its station names its
topic). A batch's rows, stored or quarantined, have one source, ``mqtt:<host>:<port>``, and
go through validation and the writer once: per topic, the batch's fixed cost was paid four
times at the example plant. Nothing is dropped.

Why the ids and timestamps are not checked here: one validation (:mod:`.validate`) for files,
SQL sources and messages keeps their reasons and rules the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Connection

from qcllp.ingest.batches import run_batch
from qcllp.ingest.measurements import ingest_reading_frames
from qcllp.ingest.report import IngestReport
from qcllp.ingest.sources import MAX_RAW_FIELD, Chunk, Rejected
from qcllp.plant.config import PlantConfig
from qcllp.store import Store

__all__ = ["PAYLOAD_VERSION", "Message", "message_chunk", "series_payloads", "store_messages"]

PAYLOAD_VERSION = 1
_LONG = ["charge_id", "stick_id", "station", "timestamp", "sensor", "value"]


@dataclass(frozen=True)
class Message:
    """A message as it arrived: its topic, the station that topic is for, and its bytes."""

    topic: str
    station: str
    payload: bytes


class _Malformed(ValueError):
    """A message that is not a payload of :data:`PAYLOAD_VERSION`; ``reason`` says which way."""

    def __init__(self, detail: str, reason: str = "malformed_message"):
        super().__init__(detail)
        self.reason = reason


def message_chunk(messages: Sequence[Message]) -> Chunk:
    """The messages' readings as one long-format chunk, in arrival order, with the malformed
    messages as its rejected records (row number: none, a message has no rows)."""
    records: list[tuple] = []
    rejected: list[Rejected] = []
    for message in messages:
        try:
            records += _readings(message)
        except _Malformed as exc:
            rejected.append(_rejected(message, exc))
    return Chunk(
        frame=pd.DataFrame(records, columns=_LONG),
        first_row=0,
        rejected=rejected,
        rows=np.full(len(records), None, dtype=object),
    )


def store_messages(store: Store, config: PlantConfig, messages: Sequence[Message]) -> IngestReport:
    """Validate and store the messages' readings as one atomic ingestion batch (source
    ``mqtt:<host>:<port>``), quarantining what fails; the scorers see the batch once it
    commits. Returns its report (``records``: readings plus malformed messages)."""
    mqtt = config.connectors.mqtt
    source = f"mqtt:{mqtt.host}:{mqtt.broker_port}" if mqtt is not None else "mqtt"
    chunk = message_chunk(messages)

    def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
        ingest_reading_frames(conn, batch_id, report, config, source, [chunk])

    report = run_batch(store, "measurements", source, None, body)
    return report if report is not None else IngestReport(kind="measurements")


def series_payloads(readings: pd.DataFrame) -> list[tuple[str, str, str, bytes]]:
    """Long-format readings as series payloads, one per stick and station in the order of
    their first reading: ``(station, charge_id, stick_id, payload)``. What a gateway on the
    line publishes (the tests and ``benchmarks/bench_line_latency.py`` publish these)."""
    frame = readings.astype({c: str for c in ("charge_id", "stick_id", "station", "sensor")})
    stamps = pd.to_datetime(frame["timestamp"], utc=True).dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    frame = frame.assign(timestamp=stamps)
    keys = ["charge_id", "stick_id", "station"]
    payloads = []
    for (charge, stick, station), rows in frame.groupby(keys, sort=False):
        series: dict[str, list] = {}
        for sensor, ts, value in zip(rows["sensor"], rows["timestamp"], rows["value"], strict=True):
            series.setdefault(sensor, []).append([ts, float(value)])
        doc = {"v": PAYLOAD_VERSION, "charge_id": charge, "stick_id": stick, "station": station,
               "series": series}  # fmt: skip
        payloads.append((station, charge, stick, json.dumps(doc).encode()))
    return payloads


def _readings(message: Message) -> list[tuple]:
    """The readings of one message as long-format tuples (:data:`_LONG`)."""
    doc = _document(message)
    station = doc.get("station", message.station)
    if station != message.station:
        raise _Malformed(f"station {station!r} is not the topic's station {message.station!r}")
    charge, stick = _id(doc, "charge_id"), _id(doc, "stick_id")
    if "series" in doc:
        return [
            (charge, stick, station, ts, sensor, value)
            for sensor, ts, value in _series(doc["series"])
        ]
    missing = [k for k in ("sensor", "timestamp", "value") if k not in doc]
    if missing:
        raise _Malformed(f"neither 'series' nor a reading: missing {', '.join(missing)}")
    return [(charge, stick, station, doc["timestamp"], doc["sensor"], doc["value"])]


def _document(message: Message) -> dict:
    """The payload as a JSON object of a version this intake reads."""
    try:
        doc = json.loads(message.payload.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _Malformed(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise _Malformed(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _Malformed(f"a JSON {type(doc).__name__}, not an object")
    if doc.get("v") != PAYLOAD_VERSION:
        raise _Malformed(
            f"payload version {doc.get('v')!r}; this intake reads v {PAYLOAD_VERSION}",
            "unsupported_version",
        )
    return doc


def _id(doc: dict, key: str) -> str:
    """An id as text: a string as is, a whole JSON number as its digits, missing as empty
    (then quarantined per reading as ``missing_id``, as in files)."""
    value = doc.get(key, "")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Malformed(f"{key} must be a string, got {json.dumps(value)[:80]}")
    return str(value)


def _series(series: object) -> Iterable[tuple]:
    """(sensor, timestamp, value) of ``{"<sensor>": [[timestamp, value], ...]}``."""
    if not isinstance(series, dict):
        raise _Malformed("'series' must map sensor names to lists of [timestamp, value]")
    for sensor, points in series.items():
        if not isinstance(points, list) or not all(
            isinstance(p, list) and len(p) == 2 for p in points
        ):
            raise _Malformed(f"series {sensor!r} must be a list of [timestamp, value] pairs")
        for ts, value in points:
            yield sensor, ts, value


def _rejected(message: Message, exc: _Malformed) -> Rejected:
    """A quarantined message: its topic and (the beginning of) its text."""
    text = message.payload.decode("utf-8", errors="replace")
    if len(text) > MAX_RAW_FIELD:
        text = f"{text[:MAX_RAW_FIELD]}... ({len(text)} characters)"
    return Rejected(
        row_number=None,
        raw=json.dumps({"topic": message.topic, "payload": text}),
        reason=exc.reason,
        detail=f"topic {message.topic}: {exc}",
    )
