"""SQL sources: a plant historian or MES database, read incrementally by a watermark column.

A source (``connectors.sql.<name>`` in the plant config, or a mapping with the same keys) is
``url`` (any SQLAlchemy URL), ``table`` or ``query``, ``watermark`` (a column that grows with
new data: a timestamp or an id), ``kind`` (``measurements``, ``defects`` or ``inspections``),
``columns`` (``{<long-format, count or inspection column>: <source column>}``, for the names
that differ) and ``chunk_rows``. An inspection source's ``inspected_at`` is optional: a source
without it stores its inspections without a time.

Each call is one atomic batch: rows with ``watermark >= stored watermark`` are streamed in
chunks (server-side cursor), validated and stored like file rows, and the new watermark (the
largest value read) is stored in the *same* transaction -- so the mark never runs ahead of the
data, and a failed pull is simply repeated. ``>=`` rather than ``>`` because rows sharing the
last watermark value may still have been committed in the source after the previous pull;
reading the boundary again is harmless since stored readings are recognized by natural key
(they count as duplicates). When the watermark is the readings' timestamp, a reading stamped
beyond the future tolerance (quarantined as ``future_timestamp``) does not move it, so the
rows after it are still read; such a row is read, and quarantined, again at each pull until
its time comes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, date, datetime

import numpy as np
import pandas as pd
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url

from qcllp.ingest.batches import run_batch
from qcllp.ingest.defects import check_count_columns, ingest_count_frames
from qcllp.ingest.inspections import INSPECTION_COLUMNS, ingest_inspection_frames
from qcllp.ingest.measurements import DEFAULT_CHUNK_ROWS, ingest_reading_frames
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sources import Chunk
from qcllp.ingest.validate import LONG_COLUMNS, future_limit_us, parse_timestamps_us
from qcllp.plant.config import PlantConfig, SqlSource
from qcllp.store import Store, Watermark, dialect_insert
from qcllp.store.credentials import CredentialError, source_prefix, with_password

__all__ = ["REPORT_KINDS", "ingest_sql", "ingest_sql_sources"]

#: a SQL source's ``kind`` -> the kind of its batches and report
REPORT_KINDS = {
    "measurements": "measurements",
    "defects": "defect_counts",
    "inspections": "inspections",
}


def ingest_sql(
    store: Store,
    config: PlantConfig,
    source: str | SqlSource | Mapping,
    *,
    progress=None,  # noqa: ANN001
) -> IngestReport:
    """Pull new rows of a SQL source: a name in ``config.connectors.sql``, a
    :class:`~qcllp.plant.config.SqlSource`, or a mapping with its fields (``name`` defaults to
    the table, else ``"query"``)."""
    spec = _source(config, source)
    name, kind = spec.name, spec.kind
    wanted, optional = _wanted_columns(config, kind)
    source_label = f"sql:{name}"
    try:
        url = with_password(make_url(spec.url), prefix=source_prefix(name))
    except CredentialError as exc:
        raise IngestError(f"{source_label}: {exc}") from exc
    engine = create_engine(url)
    try:

        def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
            mark = conn.execute(
                text("SELECT value FROM watermarks WHERE source_name = :n"), {"n": name}
            ).scalar()
            last = _decode(mark) if mark is not None else None
            highest: list = [last]
            chunks = _pull(engine, spec, last, wanted, highest, _not_yet(config, spec), optional)
            if kind == "measurements":
                ingest_reading_frames(
                    conn, batch_id, report, config, source_label, chunks, progress=progress
                )
            elif kind == "inspections":
                ingest_inspection_frames(
                    conn, batch_id, report, config, source_label, chunks, progress
                )
            else:
                check_count_columns(source_label, wanted, config)
                ingest_count_frames(conn, batch_id, report, config, source_label, chunks, progress)
            if highest[0] is not None and highest[0] != last:
                _store_watermark(conn, name, spec.watermark, highest[0], batch_id)

        report = run_batch(store, REPORT_KINDS[kind], source_label, None, body)
    finally:
        engine.dispose()
    assert report is not None  # only checksummed batches are skipped
    return report


def _wanted_columns(config: PlantConfig, kind: str) -> tuple[list[str], list[str]]:
    """The columns a source of ``kind`` must deliver, and those it may."""
    if kind == "measurements":
        return list(LONG_COLUMNS), []
    if kind == "inspections":
        return list(INSPECTION_COLUMNS), ["inspected_at"]
    return ["charge_id", "n_sticks", *config.defect_types], []


def ingest_sql_sources(
    store: Store,
    config: PlantConfig,
    source: str | None = None,
    *,
    progress=None,  # noqa: ANN001
) -> dict[str, IngestReport]:
    """Pull one configured SQL source, or every one when ``source`` is ``None``; reports by
    source name. Raises :class:`IngestError` when the config declares none."""
    names = [source] if source else list(config.connectors.sql)
    if not names:
        where = config.path or "the plant config"
        raise IngestError(f"{where}: connectors.sql: no SQL source configured")
    return {name: ingest_sql(store, config, name, progress=progress) for name in names}


def _source(config: PlantConfig, source: str | SqlSource | Mapping) -> SqlSource:
    if isinstance(source, SqlSource):
        return source
    if isinstance(source, str):
        sources = config.connectors.sql
        if source not in sources:
            known = ", ".join(sources) or "none configured"
            raise IngestError(f"unknown SQL source '{source}'; known: {known}")
        return sources[source]
    spec = dict(source)
    spec.setdefault("name", str(spec.get("table") or "query"))
    return SqlSource(**spec)


def _not_yet(config: PlantConfig, spec: SqlSource) -> Callable[[pd.Series], np.ndarray] | None:
    """For a measurement source whose watermark is the readings' timestamp: which watermark
    values lie beyond the future tolerance (those rows are quarantined as
    ``future_timestamp``). They must not move the watermark: a reading stamped 2199 would
    leave every later row of the source unread. ``None`` for any other watermark."""
    if spec.kind != "measurements" or spec.watermark != spec.columns.get("timestamp", "timestamp"):
        return None

    def not_yet(values: pd.Series) -> np.ndarray:
        ts_us, status = parse_timestamps_us(values, config.timezone)
        return (status == 0) & (ts_us > future_limit_us(config))

    return not_yet


def _pull(
    engine,  # noqa: ANN001
    spec: SqlSource,
    last,  # noqa: ANN001
    wanted: list[str],
    highest: list,
    not_yet: Callable[[pd.Series], np.ndarray] | None = None,
    optional: list[str] | None = None,
) -> Iterator[Chunk]:
    """Stream the source's rows from watermark ``last`` on, renamed to our columns (the
    ``wanted`` ones and those of ``optional`` it has); the largest watermark seen is kept in
    ``highest[0]``, leaving out the values ``not_yet`` flags."""
    watermark, chunk_rows = spec.watermark, spec.chunk_rows or DEFAULT_CHUNK_ROWS
    quote = engine.dialect.identifier_preparer.quote
    if spec.table is not None:
        origin = ".".join(quote(part) for part in spec.table.split("."))
    else:
        origin = f"({spec.query}) AS qcllp_source"
    where = "" if last is None else f" WHERE {quote(watermark)} >= :last"
    sql = text(f"SELECT * FROM {origin}{where} ORDER BY {quote(watermark)}")
    rename = {src: dst for dst, src in spec.columns.items()}
    first_row = 1
    with engine.connect() as src:
        result = src.execution_options(stream_results=True, yield_per=chunk_rows).execute(
            sql, {} if last is None else {"last": last}
        )
        columns = list(result.keys())
        if watermark not in columns:
            raise IngestError(f"SQL source: watermark column '{watermark}' is not in the result")
        for rows in result.partitions(chunk_rows):
            frame = pd.DataFrame(rows, columns=columns)
            marks = frame[watermark]
            marks = marks if not_yet is None else marks[~not_yet(marks)]
            if len(marks):
                top = marks.max()
                highest[0] = top if highest[0] is None else max(highest[0], top)
            frame = frame.rename(columns=rename)
            missing = [c for c in wanted if c not in frame.columns]
            if missing:
                raise IngestError(
                    f"SQL source: missing column(s) {', '.join(missing)}; map them with "
                    "'columns: {<our name>: <source column>}'"
                )
            present = [c for c in optional or [] if c in frame.columns]
            yield Chunk(frame[[*wanted, *present]], first_row)
            first_row += len(frame)


def _encode(value) -> str:  # noqa: ANN001
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if isinstance(value, datetime | date):
        return json.dumps({"type": type(value).__name__, "value": value.isoformat()})
    if hasattr(value, "item"):
        value = value.item()
    return json.dumps({"type": "plain", "value": value})


def _decode(stored: str):  # noqa: ANN202
    mark = json.loads(stored)
    if mark["type"] == "datetime":
        return datetime.fromisoformat(mark["value"])
    if mark["type"] == "date":
        return date.fromisoformat(mark["value"])
    return mark["value"]


def _store_watermark(conn: Connection, name: str, column: str, value, batch_id: int) -> None:  # noqa: ANN001
    row = {
        "source_name": name,
        "column": column,
        "value": _encode(value),
        "batch_id": batch_id,
        "updated_at": datetime.now(UTC),
    }
    stmt = dialect_insert(conn, Watermark.__table__).values(**row)
    stmt = stmt.on_conflict_do_update(
        index_elements=["source_name"],
        set_={k: stmt.excluded[k] for k in ("column", "value", "batch_id", "updated_at")},
    )
    conn.execute(stmt)
