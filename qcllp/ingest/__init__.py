"""Connectors and validated, idempotent, atomic ingestion into the plant store.

* :func:`ingest_measurements` -- measurement files (CSV/Parquet, long or wide, file or folder);
* :func:`ingest_defect_counts` -- final-QC defect counts per charge (CSV/Parquet);
* :func:`ingest_inspections` -- inspections of single sticks (lock-out bay, audit samples);
* :func:`ingest_sql` -- a SQL source (plant historian / MES), incrementally by a watermark;
  :func:`ingest_sql_sources` -- one or all of the configured ones;
* :func:`ingest_from_config` -- all connectors of a plant config (CLI ``ingest``, daemon);
* :class:`IngestReport` -- stored / duplicate / quarantined-per-reason counts.

Nothing here prints; callers get reports and may pass ``progress`` callables.
"""

from qcllp.ingest.connectors import ingest_from_config
from qcllp.ingest.defects import ingest_defect_counts
from qcllp.ingest.inspections import ingest_inspections
from qcllp.ingest.measurements import DEFAULT_CHUNK_ROWS, ingest_measurements
from qcllp.ingest.report import REASONS, IngestError, IngestReport
from qcllp.ingest.sql import ingest_sql, ingest_sql_sources

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "REASONS",
    "IngestError",
    "IngestReport",
    "ingest_defect_counts",
    "ingest_from_config",
    "ingest_inspections",
    "ingest_measurements",
    "ingest_sql",
    "ingest_sql_sources",
]
