"""Readings that arrive as MQTT messages: the payload (series or single reading) stored as a
file's readings would be, a message delivered twice storing nothing twice, and every message
that is not a payload quarantined whole with its topic and reason."""

import json

import pytest
from sqlalchemy import select

from qcllp.ingest import REASONS
from qcllp.ingest.mqtt_messages import Message, store_messages
from qcllp.store import QuarantineRow
from tests.ingest.helpers import accounted, stored_readings

TOPIC = "qcllp/furnace/readings"


def _message(doc, topic: str = TOPIC, station: str = "furnace") -> Message:
    payload = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return Message(topic=topic, station=station, payload=payload)


SERIES = {
    "v": 1,
    "charge_id": "c1",
    "stick_id": "s1",
    "station": "furnace",
    "series": {
        "temperature": [["2025-01-06T06:00:00Z", 1100.0], ["2025-01-06T06:00:01Z", 1101.5]],
        "oxygen": [["2025-01-06T06:00:00Z", 2.5]],
    },
}
SINGLE = {
    "v": 1,
    "charge_id": "c1",
    "stick_id": 2,  # a JSON number is taken as its digits
    "sensor": "oxygen",
    "timestamp": "2025-01-06T06:00:02Z",
    "value": 3.0,
}


def test_series_and_single_readings_are_stored_and_a_redelivery_stores_nothing(store, tiny_config):
    messages = [_message(SERIES), _message(SINGLE)]
    first = store_messages(store, tiny_config, messages)
    assert (first.records, first.stored, first.duplicates) == (4, 4, 0) and accounted(first)
    again = store_messages(store, tiny_config, messages)  # QoS 1: the broker delivers again
    assert (again.stored, again.duplicates) == (0, 4) and accounted(again)
    readings = store.read_readings()
    assert stored_readings(store) == 4
    assert sorted(readings["stick_id"].unique()) == ["2", "s1"]
    assert sorted(readings["value"]) == [2.5, 3.0, 1100.0, 1101.5]


def _quarantined(store) -> list[tuple[str, str, str, str]]:
    with store.engine.connect() as conn:
        q = QuarantineRow.__table__
        rows = conn.execute(select(q.c.source, q.c.reason, q.c.detail, q.c.raw).order_by(q.c.id))
        return [tuple(r) for r in rows]


MALFORMED = {
    "not json": (b"{temperature: 1100", "malformed_message", "not JSON"),
    "not utf-8": (b"\xff\xfe{}", "malformed_message", "not UTF-8"),
    "a list": (b"[1, 2]", "malformed_message", "a JSON list, not an object"),
    "no version": ({"charge_id": "c1"}, "unsupported_version", "payload version None"),
    "version 2": ({**SERIES, "v": 2}, "unsupported_version", "payload version 2"),
    "other station": (
        {**SERIES, "station": "rolling"},
        "malformed_message",
        "station 'rolling' is not the topic's station 'furnace'",
    ),
    "series not pairs": (
        {**SERIES, "series": {"temperature": [1100.0]}},
        "malformed_message",
        "series 'temperature' must be a list of [timestamp, value] pairs",
    ),
    "neither": (
        {"v": 1, "charge_id": "c1", "stick_id": "s1"},
        "malformed_message",
        "missing sensor, timestamp, value",
    ),
    "id not text": ({**SINGLE, "charge_id": [1]}, "malformed_message", "charge_id must be"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_message_that_is_no_payload_is_quarantined_whole_with_its_topic(case, store, tiny_config):
    doc, reason, detail = MALFORMED[case]
    report = store_messages(store, tiny_config, [_message(doc), _message(SINGLE)])
    assert report.stored == 1 and dict(report.quarantined) == {reason: 1} and accounted(report)
    [(source, stored_reason, stored_detail, raw)] = _quarantined(store)
    assert stored_reason == reason and reason in REASONS
    assert stored_detail.startswith(f"topic {TOPIC}: ") and detail in stored_detail
    assert source == "mqtt" and json.loads(raw)["topic"] == TOPIC


def test_a_reading_that_fails_validation_is_quarantined_alone_naming_its_topic(store, tiny_config):
    bad = {**SERIES, "series": {**SERIES["series"], "force": [["2025-01-06T06:00:00Z", 5.0]]}}
    report = store_messages(store, tiny_config, [_message(bad)])
    assert report.stored == 3 and dict(report.quarantined) == {"unknown_sensor": 1}
    [(source, reason, detail, raw)] = _quarantined(store)
    assert (source, reason) == ("mqtt", "unknown_sensor")
    assert json.loads(raw)["sensor"] == "force" and "force" in detail
