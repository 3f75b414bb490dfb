"""The plant database: schema, migrations, sessions and read helpers.

``Store.open(url)`` is the entry point; :mod:`qcllp.store.schema` holds the tables and
:mod:`qcllp.store.migrate` the versioned Alembic migrations that ``open`` applies.
"""

from qcllp.store.bulk_insert import insert_columns, sqlite_timestamps
from qcllp.store.core import (
    IN_CHUNK,
    Store,
    StoreError,
    charge_time_bounds,
    dialect_insert,
    placeholders,
    rows_frame,
    stored_utc,
    us_to_utc,
)
from qcllp.store.schema import (
    Base,
    BatchStick,
    Charge,
    DefectCount,
    DefectCountConflict,
    Flag,
    IngestionBatch,
    Inspection,
    Model,
    QuarantineRow,
    Reading,
    Series,
    SeriesStatistics,
    ShadowFlag,
    Stick,
    Watermark,
)
from qcllp.store.schema_services import (
    RETRAINER_JOBS,
    Alarm,
    FlagDelivery,
    Lease,
    LockoutGuard,
    RetrainerEvent,
    ScorerCheckpoint,
    ScorerPending,
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
    "FlagDelivery",
    "IngestionBatch",
    "Inspection",
    "Lease",
    "LockoutGuard",
    "Model",
    "QuarantineRow",
    "Reading",
    "RetrainerEvent",
    "ScorerCheckpoint",
    "ScorerPending",
    "Series",
    "SeriesStatistics",
    "ShadowFlag",
    "Stick",
    "Store",
    "StoreError",
    "Watermark",
    "charge_time_bounds",
    "dialect_insert",
    "insert_columns",
    "placeholders",
    "rows_frame",
    "sqlite_timestamps",
    "stored_utc",
    "us_to_utc",
]
