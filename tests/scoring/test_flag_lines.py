"""The sink's lines built from a template (:func:`qcllp.scoring.flag_sink.flag_lines`) are the
bytes the JSON encoder writes for each flag's record (:func:`flag_line`), whatever the text
and numbers in it, and whether a time comes as a datetime or as SQLite's text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from qcllp.scoring.flag_sink import flag_line, flag_lines, flag_record

T0 = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)


def _row(**changed) -> dict:
    row = {
        "id": 1,
        "station": "cooling",
        "charge_id": "C1",
        "stick_id": "S1",
        "decision": "pass",
        "probability": 0.1 + 0.2,
        "threshold": 0.5,
        "model_id": 3,
        "reason": None,
        "arrived_at": T0,
        "scored_at": T0 + timedelta(microseconds=250),
    }
    return row | changed


ROWS = [
    _row(),
    _row(probability=None, decision="unscorable", reason='no "reading" from\nsensor(s) Temp°'),
    _row(charge_id="Ch\u00e4rge/1\\2", stick_id="\U0001f600", probability=1e-300),
    _row(probability=float("nan"), threshold=1.0, model_id=2**40),
    _row(probability=float("inf"), threshold=-0.0, arrived_at=None),
    _row(scored_at="2026-03-01 06:00:00.000000", arrived_at="2026-03-01 05:59:59.123456"),
    _row(arrived_at=datetime(2026, 3, 1, 7, 0, tzinfo=timezone(timedelta(hours=1)))),
    _row(decision="lock_out", probability=0.9999999999999999, threshold=1 / 3),
    _row(threshold=0.0, model_id=3.0),  # equal to -0.0 and 3 above, written apart
    _row(threshold=None, model_id=None),
]


def test_each_line_is_the_encoders_bytes_for_its_record():
    lines = flag_lines(ROWS)
    assert lines == [flag_line(row) for row in ROWS]
    by_hand = [json.dumps(flag_record(row), separators=(",", ":")) for row in ROWS]
    assert lines == by_hand
    assert json.loads(lines[5])["scored_at"] == "2026-03-01T06:00:00+00:00"
    assert json.loads(lines[6])["arrived_at"] == "2026-03-01T07:00:00+01:00"  # as read, not T0
