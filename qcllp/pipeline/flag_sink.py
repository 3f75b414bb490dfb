"""The flag file for the line's PLC/MES gateway: one JSON line per flag, each exactly once.

The scorer appends a step's new flags and commits the file's size with the flags
(:mod:`qcllp.pipeline.scoring`); whatever lies beyond the committed size was written by a step
that never committed, and is cut off before the next append.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FlagSink", "flag_line"]


class FlagSink:
    """An append-only JSON-lines file of flags for the line's PLC/MES gateway.

    Holds committed flags only: :meth:`prepare` (under the station lock, before appending)
    cuts off whatever a step that died before its commit had written; the offset after
    :meth:`append` is committed with the flags. One line per flag: ``station, charge_id,
    stick_id, decision, probability, threshold, model_id, reason, arrived_at, scored_at``.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def prepare(self, committed: int) -> tuple[int, str | None]:
        """Cut the file back to ``committed`` bytes; returns (offset, problem or None).

        A file shorter than the committed offset was rotated or truncated by someone else:
        appending goes on at its end and the problem is returned for an alarm.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size > committed:
                fh.truncate(committed)
                os.fsync(fh.fileno())
                return committed, None
        if size < committed:
            return size, (
                f"sink {self.path} holds {size} bytes, fewer than the {committed} committed; "
                "it was rotated or truncated outside qcllp: appending at its end"
            )
        return committed, None

    def append(self, lines: list[str]) -> int:
        """Append lines, flush them to disk; returns the new size (the offset to commit)."""
        with open(self.path, "ab") as fh:
            if lines:
                fh.write(("\n".join(lines) + "\n").encode())
                fh.flush()
                os.fsync(fh.fileno())
            return fh.tell()


def flag_line(row: dict) -> str:
    """A flag (as written to the ``flags`` table) as one compact JSON line."""
    return json.dumps(
        {
            "station": row["station"],
            "charge_id": row["charge_id"],
            "stick_id": row["stick_id"],
            "decision": row["decision"],
            "probability": row["probability"],
            "threshold": row["threshold"],
            "model_id": row["model_id"],
            "reason": row["reason"],
            "arrived_at": row["arrived_at"].isoformat(),
            "scored_at": row["scored_at"].isoformat(),
        },
        separators=(",", ":"),
    )
