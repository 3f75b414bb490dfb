"""The plant database: schema, migrations, sessions and read helpers.

``Store.open(url)`` is the entry point; :mod:`qcllp.store.schema` holds the tables and
:mod:`qcllp.store.migrate` the versioned Alembic migrations that ``open`` applies.
"""

from qcllp.store.core import (
    IN_CHUNK,
    Store,
    StoreError,
    dialect_insert,
    placeholders,
    rows_frame,
    stored_utc,
    us_to_utc,
)
from qcllp.store.schema import (
    RETRAINER_JOBS,
    Alarm,
    Base,
    BatchStick,
    Charge,
    DefectCount,
    DefectCountConflict,
    Flag,
    IngestionBatch,
    Lease,
    LockoutGuard,
    Model,
    QuarantineRow,
    Reading,
    RetrainerEvent,
    ScorerCheckpoint,
    ScorerPending,
    Series,
    Stick,
    Watermark,
)

__all__ = [
    "IN_CHUNK",
    "RETRAINER_JOBS",
    "Alarm",
    "Base",
    "BatchStick",
    "Charge",
    "DefectCount",
    "DefectCountConflict",
    "Flag",
    "IngestionBatch",
    "Lease",
    "LockoutGuard",
    "Model",
    "QuarantineRow",
    "Reading",
    "RetrainerEvent",
    "ScorerCheckpoint",
    "ScorerPending",
    "Series",
    "Stick",
    "Store",
    "StoreError",
    "Watermark",
    "dialect_insert",
    "placeholders",
    "rows_frame",
    "stored_utc",
    "us_to_utc",
]
