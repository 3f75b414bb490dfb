"""The services' log format: every record one JSON line, whoever logs it."""

from __future__ import annotations

import io
import json
import logging

from qcllp.service.logs import JsonLines, log_event


def test_every_record_is_one_json_line_including_library_warnings_and_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("test.qcllp.logs")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        log_event(logger, "retrain", station="cooling", outcome="kept")
        logging.getLogger("test.qcllp.logs.apscheduler").warning(
            'Execution of job "ingest" skipped: maximum number of running instances reached (1)'
        )
        logger.warning("%s", {"a": 1})  # a dict's repr starts with "{" but is not JSON
        try:
            raise ValueError("bad\nartifact")
        except ValueError:
            logger.exception("unexpected error in job %s", "retrain")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 4
    assert records[0]["event"] == "retrain" and records[0]["station"] == "cooling"
    assert records[1]["event"] == "log" and records[1]["level"] == "WARNING"
    assert "maximum number of running instances" in records[1]["message"]
    assert records[1]["logger"] == "test.qcllp.logs.apscheduler"
    assert records[2]["event"] == "log" and records[2]["message"] == "{'a': 1}"
    assert records[3]["message"] == "unexpected error in job retrain"
    assert "ValueError: bad" in records[3]["traceback"]
