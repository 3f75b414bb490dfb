"""Structured logs of the services: one JSON object per line (``ts``, ``event``, fields), the
format journald, Loki or a plain ``grep`` read alike; and errors cut to one line for them."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["log_event", "one_line"]


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
