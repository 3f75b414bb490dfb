"""Run the connectors a plant config declares: what ``qcllp ingest`` and the daemon call.

``connectors.measurements`` (a file or folder; ``format``, ``layout``, ``pattern``,
``chunk_rows``), ``connectors.defects`` (a file or folder; ``format``, ``pattern``) and every
source under ``connectors.sql``, in that order: readings before the counts that label them. A
missing drop folder is reported as a failed input, not raised, so one broken connector does not
stop the others.
"""

from __future__ import annotations

from collections.abc import Callable

from qcllp.ingest.batches import FileMemo
from qcllp.ingest.defects import ingest_defect_counts
from qcllp.ingest.measurements import DEFAULT_CHUNK_ROWS, ingest_measurements
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sql import ingest_sql
from qcllp.plant.config import PlantConfig
from qcllp.store import Store

__all__ = ["ingest_from_config"]


def ingest_from_config(
    store: Store,
    config: PlantConfig,
    *,
    progress: Callable[[int], None] | None = None,
    memo: FileMemo | None = None,
) -> dict[str, IngestReport]:
    """Ingest from every configured connector; returns one report per connector name
    (``"measurements"``, ``"defects"``, ``"sql:<name>"``). ``memo``: a poller's record of the
    drop files it handled (:class:`qcllp.ingest.batches.FileMemo`)."""
    connectors = config.connectors
    reports: dict[str, IngestReport] = {}
    measurements = connectors.measurements
    if measurements is not None:
        reports["measurements"] = _guarded(
            "measurements",
            measurements.path,
            lambda: ingest_measurements(
                store,
                config,
                measurements.path,
                layout=measurements.layout,
                fmt=measurements.format,
                pattern=measurements.pattern,
                chunk_rows=measurements.chunk_rows or DEFAULT_CHUNK_ROWS,
                progress=progress,
                memo=memo,
                archive=measurements.archive,
            ),
        )
    defects = connectors.defects
    if defects is not None:
        reports["defects"] = _guarded(
            "defect_counts",
            defects.path,
            lambda: ingest_defect_counts(
                store,
                config,
                defects.path,
                fmt=defects.format,
                pattern=defects.pattern,
                memo=memo,
                archive=defects.archive,
            ),
        )
    for name, source in connectors.sql.items():
        reports[f"sql:{name}"] = _guarded(
            "measurements" if source.kind == "measurements" else "defect_counts",
            f"sql:{name}",
            lambda name=name: ingest_sql(store, config, name, progress=progress),
        )
    return reports


def _guarded(kind: str, source: str, run: Callable[[], IngestReport]) -> IngestReport:
    try:
        return run()
    except IngestError as exc:
        report = IngestReport(kind=kind)
        report.files_failed[str(source)] = str(exc)
        return report
