"""Small builders for ingestion tests: CSV text files and counts of what the store holds."""

from __future__ import annotations

from pathlib import Path

from qcllp.store import QuarantineRow, Reading, Store

HEADER = "charge_id,stick_id,station,timestamp,sensor,value\n"
GOOD = "c1,s1,furnace,2025-01-06T06:00:00Z,temperature,1100\n"


def write_csv(folder: Path, name: str, body: str, header: str = HEADER) -> Path:
    path = folder / name
    path.write_text(header + body)
    return path


def stored_readings(store: Store) -> int:
    return store.count(Reading)


def quarantine_reasons(store: Store) -> list[tuple[str, str]]:
    rows = store.execute_sql("SELECT reason, detail FROM quarantine ORDER BY id")
    return [(r, d) for r, d in rows]


def accounted(report) -> bool:  # noqa: ANN001
    """Every record stored, duplicate or quarantined."""
    return report.stored + report.duplicates + report.quarantined_total == report.records


__all__ = [
    "GOOD",
    "HEADER",
    "QuarantineRow",
    "accounted",
    "quarantine_reasons",
    "stored_readings",
    "write_csv",
]
