"""Structured logs of the services: one JSON object per line (``ts``, ``level``, ``event``,
fields), the format journald, Loki or a plain ``grep`` read alike; and errors cut to one line
for them."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonLines", "SkippedRunsAsInfo", "log_event", "one_line"]


def log_event(
    logger: logging.Logger, event: str, *, level: int = logging.INFO, **fields: Any
) -> None:
    """One structured (JSON) log line."""
    line = {"ts": datetime.now(UTC).isoformat(), "event": event, **fields}
    logger.log(level, json.dumps(line, default=str))


def one_line(exc: BaseException) -> str:
    """``"<ExceptionType>: <first line of the message>"`` (at most 300 characters of it)."""
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class JsonLines(logging.Formatter):
    """Every record one JSON line with the record's ``level`` (``INFO``, ``WARNING``,
    ``ERROR``, ...: what an on-call filter reads, ``jq 'select(.level != "INFO")'`` or Loki's
    ``| json | level="ERROR"``): the services' own events (:func:`log_event`) with ``level``
    put in after ``ts``, anything else (APScheduler's lines, a library's warning, a
    traceback) wrapped as ``{"ts", "level", "event":
    "log", "logger", "message"}`` with ``traceback`` when there is one, so a log reader never
    meets a line it cannot parse."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        event = _json_object(message) if not record.exc_info else None
        if event is not None:
            ts = {"ts": event["ts"]} if "ts" in event else {}
            line = {**ts, "level": None, **event}
            line["level"] = record.levelname  # the record's, whatever the message said
            return json.dumps(line, default=str)
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "event": "log",
            "logger": record.name,
            "message": message,
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class SkippedRunsAsInfo(logging.Filter):
    """APScheduler's "skipped: maximum number of running instances reached" at INFO, not
    WARNING: the services' jobs run with ``max_instances=1`` on purpose, so a scorer draining a
    backlog longer than its interval, or a retraining outlasting its schedule, skips runs by
    design; as warnings they filled the on-call filter (``jq 'select(.level != "INFO")'``)
    with a line per interval. Installed on the ``apscheduler.scheduler`` logger; every other
    record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and "maximum number of running instances" in str(
            record.msg
        ):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` as the JSON object it is (a service's own event), else None."""
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
