"""Run the connectors a plant config declares: what ``qcllp ingest`` and the daemon call.

``connectors.measurements`` (a file or folder; ``format``, ``layout``, ``pattern``,
``chunk_rows``), ``connectors.defects`` and ``connectors.inspections`` (each a file or folder;
``format``, ``pattern``) and every source under ``connectors.sql``, in that order: readings
before the counts and inspections that label them (an inspection is checked against the
stick's readings). A missing drop folder is reported as a failed input, not raised, so one
broken connector does not stop the others.
"""

from __future__ import annotations

from collections.abc import Callable

from qcllp.ingest.batches import FileMemo
from qcllp.ingest.defects import ingest_defect_counts
from qcllp.ingest.inspections import ingest_inspections
from qcllp.ingest.measurements import DEFAULT_CHUNK_ROWS, ingest_measurements
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sql import REPORT_KINDS, ingest_sql
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
    (``"measurements"``, ``"defects"``, ``"inspections"``, ``"sql:<name>"``). ``memo``: a
    poller's record of the drop files it handled (:class:`qcllp.ingest.batches.FileMemo`)."""
    reports: dict[str, IngestReport] = {}
    for name, kind, path, run in _file_runs(store, config, progress, memo):
        reports[name] = _guarded(kind, path, run)
    for name, source in config.connectors.sql.items():
        reports[f"sql:{name}"] = _guarded(
            REPORT_KINDS[source.kind],
            f"sql:{name}",
            lambda name=name: ingest_sql(store, config, name, progress=progress),
        )
    return reports


def _file_runs(
    store: Store,
    config: PlantConfig,
    progress: Callable[[int], None] | None,
    memo: FileMemo | None,
) -> list[tuple[str, str, str, Callable[[], IngestReport]]]:
    """(connector name, report kind, path, run) of each configured drop file or folder, in
    the order they are ingested (module docstring)."""
    connectors = config.connectors
    runs = []
    m = connectors.measurements
    if m is not None:
        runs.append(
            (
                "measurements",
                "measurements",
                m.path,
                lambda: ingest_measurements(
                    store,
                    config,
                    m.path,
                    layout=m.layout,
                    fmt=m.format,
                    pattern=m.pattern,
                    chunk_rows=m.chunk_rows or DEFAULT_CHUNK_ROWS,
                    progress=progress,
                    memo=memo,
                    archive=m.archive,
                ),
            )
        )
    for name, kind, ingest in (
        ("defects", "defect_counts", ingest_defect_counts),
        ("inspections", "inspections", ingest_inspections),
    ):
        c = getattr(connectors, name)
        if c is not None:
            runs.append(
                (
                    name,
                    kind,
                    c.path,
                    lambda c=c, ingest=ingest: ingest(
                        store,
                        config,
                        c.path,
                        fmt=c.format,
                        pattern=c.pattern,
                        memo=memo,
                        archive=c.archive,
                    ),
                )
            )
    return runs


def _guarded(kind: str, source: str, run: Callable[[], IngestReport]) -> IngestReport:
    try:
        return run()
    except IngestError as exc:
        report = IngestReport(kind=kind)
        report.files_failed[str(source)] = str(exc)
        return report
