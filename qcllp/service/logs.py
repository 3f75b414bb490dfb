"""Structured logs of the services: one JSON object per line (``ts``, ``event``, fields), the
format journald, Loki or a plain ``grep`` read alike; and errors cut to one line for them."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonLines", "log_event", "one_line"]


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
    """Every record one JSON line: the services' own events (:func:`log_event`) as they are,
    anything else (APScheduler's "skipped: maximum number of running instances", a library's
    warning, a traceback) wrapped as ``{"ts", "event": "log", "logger", "level", "message"}``
    with ``traceback`` when there is one, so a log reader never meets a line it cannot parse."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if message.startswith("{") and not record.exc_info and _is_json(message):
            return message
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "event": "log",
            "logger": record.name,
            "level": record.levelname,
            "message": message,
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
