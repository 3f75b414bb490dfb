"""What an ingestion did: the ``IngestReport`` and the quarantine reasons a person reads.

Accounting identity, checked by the tests: every input record is stored, recognized as a
duplicate of what is already stored, or quarantined with one reason::

    stored + duplicates + sum(quarantined.values()) == records

A record is a row of a long-format, defect-count or inspection input, or one non-empty sensor
cell of a wide-format row (a wide row whose sensor cells are all empty, or with a field that is
not text, is one quarantined record).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["REASONS", "IngestError", "IngestReport"]

#: reason key -> what it means (the quarantine table stores the key plus a row-specific detail)
REASONS: dict[str, str] = {
    "malformed_row": "the CSV line has the wrong number of fields",
    "undecodable_text": (
        "a field is not text in the files' encoding (the plant config's 'encoding', default "
        "utf-8) or holds a NUL byte"
    ),
    "missing_id": "charge_id or stick_id is empty",
    "id_too_long": "charge_id or stick_id is longer than the store's id columns take",
    "missing_timestamp": "the timestamp is empty",
    "unparseable_timestamp": (
        "the timestamp is not ISO 8601 between 1970 and 2200, or a nonexistent/ambiguous local time"
    ),
    "future_timestamp": (
        "the timestamp is later than the time of ingestion plus connectors.future_tolerance_s"
    ),
    "missing_column": "a long-layout file (it has a sensor column) has no value column",
    "unknown_station": "the station is not in the plant config",
    "unknown_sensor": "the station has no such sensor in the plant config",
    "missing_value": "the value is empty",
    "non_numeric_value": "the value is not a finite number",
    "value_out_of_range": "the value is outside the sensor's configured range",
    "conflicting_duplicate": "a reading with the same key and a different value is stored",
    "non_numeric_count": "n_sticks or a defect count is empty or not a whole number",
    "non_positive_n_sticks": "n_sticks is zero or negative",
    "negative_count": "a defect count is negative",
    "count_too_large": "n_sticks or a defect count is larger than the store holds (2,147,483,647)",
    "counts_exceed_n_sticks": "the defect counts add up to more than n_sticks",
    "conflicting_counts": "the charge was reported before with different counts (kept as conflict)",
    "malformed_message": (
        "an MQTT message is not a JSON object of the readings payload (docs/data.md)"
    ),
    "unsupported_version": "an MQTT message's payload version ('v') is not one this intake reads",
    "missing_field": "an inspection's station or result is empty",
    "unknown_result": "the inspection result is neither ok nor a defect type of the plant config",
    "unknown_stick": "no readings of the inspected stick (charge_id, stick_id) are stored",
    "stick_not_at_station": "the inspected stick has no readings at the inspection's station",
    "conflicting_inspection": (
        "the stick was inspected at the station before with another result (the first is kept)"
    ),
}


class IngestError(ValueError):
    """A whole input cannot be ingested (not CSV or Parquet, binary, wrong delimiter, missing
    or unknown columns); the message names the file and what is wrong, on one line."""


@dataclass
class IngestReport:
    """Counts of one ingestion call (one or more batches).

    ``quarantined`` maps reason keys (:data:`REASONS`) to counts; ``files_skipped`` lists inputs
    recognized as already ingested (same checksum); ``files_failed`` maps inputs that could not
    be ingested at all to the error (nothing of them was stored). ``audit_samples``: of the
    stored inspections, those of sticks the station did not lock out (kind ``inspections``).
    """

    kind: str
    records: int = 0
    stored: int = 0
    duplicates: int = 0
    quarantined: Counter = field(default_factory=Counter)
    batches: list[int] = field(default_factory=list)
    files_ingested: list[str] = field(default_factory=list)
    files_skipped: list[str] = field(default_factory=list)
    files_failed: dict[str, str] = field(default_factory=dict)
    audit_samples: int = 0

    @property
    def quarantined_total(self) -> int:
        """All quarantined records, whatever the reason."""
        return sum(self.quarantined.values())

    def add(self, other: IngestReport) -> None:
        """Fold another report's counts into this one."""
        self.records += other.records
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.quarantined.update(other.quarantined)
        self.batches += other.batches
        self.files_ingested += other.files_ingested
        self.files_skipped += other.files_skipped
        self.files_failed.update(other.files_failed)
        self.audit_samples += other.audit_samples

    def as_dict(self) -> dict:
        """A JSON-ready dict (for ``--json`` output and logs); ``audit_samples`` only for
        inspections."""
        audit = {"audit_samples": self.audit_samples} if self.kind == "inspections" else {}
        return {
            "kind": self.kind,
            "records": self.records,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "quarantined": dict(sorted(self.quarantined.items())),
            "quarantined_total": self.quarantined_total,
            "batches": list(self.batches),
            "files_ingested": list(self.files_ingested),
            "files_skipped": list(self.files_skipped),
            "files_failed": dict(self.files_failed),
            **audit,
        }
