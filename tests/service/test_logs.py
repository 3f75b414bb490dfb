"""The services' log format: every record one JSON line, whoever logs it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from qcllp.service.logs import JsonLines, SkippedRunsAsInfo, log_event


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
    assert [r["level"] for r in records] == ["INFO", "WARNING", "WARNING", "ERROR"]
    assert records[1]["event"] == "log"
    assert "maximum number of running instances" in records[1]["message"]
    assert records[1]["logger"] == "test.qcllp.logs.apscheduler"
    assert records[2]["event"] == "log" and records[2]["message"] == "{'a': 1}"
    assert records[3]["message"] == "unexpected error in job retrain"
    assert "ValueError: bad" in records[3]["traceback"]


def test_a_service_event_gets_its_record_s_level_once_and_stays_one_object():
    """``level`` is the record's, put in after ``ts``; the event is not JSON in a string."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("test.qcllp.logs.levels")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        log_event(logger, "job_failed", level=logging.ERROR, job="ingest", error='a "quote"')
        log_event(logger, "retry", level=logging.WARNING, attempt=2, wait_s=0.5)
        log_event(logger, "poll", level=logging.DEBUG, new={"batches": 0})
        logger.critical('{"event": "raw", "level": "INFO"}')  # the record's level wins
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["level"] for r in records] == ["ERROR", "WARNING", "DEBUG", "CRITICAL"]
    assert [list(r)[:3] for r in records[:3]] == [["ts", "level", "event"]] * 3
    assert records[0] == {
        "ts": records[0]["ts"],
        "level": "ERROR",
        "event": "job_failed",
        "job": "ingest",
        "error": 'a "quote"',
    }
    assert records[2]["new"] == {"batches": 0}
    assert records[3] == {"level": "CRITICAL", "event": "raw"}
    assert all(line.count('"level"') == 1 for line in lines)


def test_a_run_skipped_by_design_is_info_and_other_warnings_stay_warnings():
    stream = io.StringIO()
    logger = logging.getLogger("test.qcllp.logs.scheduler")
    logger.addFilter(SkippedRunsAsInfo())
    logger.propagate = False
    logger.setLevel(logging.WARNING)  # as the services set APScheduler's loggers
    with _json_lines_into(stream, logger):
        logger.warning(
            'Execution of job "%s" skipped: maximum number of running instances reached (1)',
            "ScorerService.tick",
        )
        logger.warning('Run time of job "%s" was missed by 0:00:03', "retrain")
        logger.info("Added job")  # below the logger's level: not written
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["level"], r["message"][:20]) for r in records] == [
        ("INFO", 'Execution of job "Sc'),
        ("WARNING", 'Run time of job "ret'),
    ]


@contextmanager
def _json_lines_into(stream: io.StringIO, logger: logging.Logger) -> Iterator[None]:
    """``logger``'s records as JSON lines into ``stream`` while the block runs."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
