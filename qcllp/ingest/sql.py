"""SQL sources: a plant historian or MES database, read incrementally by a watermark column.

A source (``connectors.sql.<name>`` in the plant config, or a mapping with the same keys) is
``url`` (any SQLAlchemy URL), ``table`` or ``query``, ``watermark`` (a column that grows with
new data: a timestamp or an id), ``kind`` (``measurements`` or ``defects``), ``columns``
(``{<long-format or count column>: <source column>}``, for the names that differ) and
``chunk_rows``.

Each call is one atomic batch: rows with ``watermark >= stored watermark`` are streamed in
chunks (server-side cursor), validated and stored like file rows, and the new watermark (the
largest value read) is stored in the *same* transaction -- so the mark never runs ahead of the
data, and a failed pull is simply repeated. ``>=`` rather than ``>`` because rows sharing the
last watermark value may still have been committed in the source after the previous pull;
reading the boundary again is harmless since stored readings are recognized by natural key
(they count as duplicates).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime

import pandas as pd
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.dialects import postgresql, sqlite

from qcllp.ingest.batches import run_batch
from qcllp.ingest.defects import check_count_columns, ingest_count_frames
from qcllp.ingest.measurements import DEFAULT_CHUNK_ROWS, ingest_reading_frames
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sources import Chunk
from qcllp.ingest.validate import LONG_COLUMNS
from qcllp.plant.config import PlantConfig
from qcllp.store import Store, Watermark

__all__ = ["ingest_sql"]


def ingest_sql(
    store: Store,
    config: PlantConfig,
    source: str | Mapping,
    *,
    progress=None,  # noqa: ANN001
) -> IngestReport:
    """Pull new rows of a SQL source (a name in ``config.connectors['sql']`` or a mapping)."""
    if isinstance(source, str):
        sources = config.connectors.get("sql", {})
        if source not in sources:
            known = ", ".join(sources) or "none configured"
            raise IngestError(f"unknown SQL source '{source}'; known: {known}")
        name, spec = source, dict(sources[source])
    else:
        spec = dict(source)
        name = str(spec.get("name") or spec.get("table") or "query")
    kind = spec.get("kind", "measurements")
    report_kind = "measurements" if kind == "measurements" else "defect_counts"
    mapping = dict(spec.get("columns") or {})
    watermark = spec["watermark"]
    chunk_rows = int(spec.get("chunk_rows", DEFAULT_CHUNK_ROWS))
    wanted = LONG_COLUMNS if kind == "measurements" else ["charge_id", "n_sticks"]
    wanted = [*wanted, *([] if kind == "measurements" else config.defect_types)]
    source_label = f"sql:{name}"
    engine = create_engine(spec["url"])
    try:

        def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
            mark = conn.execute(
                text("SELECT value FROM watermarks WHERE source_name = :n"), {"n": name}
            ).scalar()
            last = _decode(mark) if mark is not None else None
            highest: list = [last]
            chunks = _pull(engine, spec, watermark, last, mapping, wanted, chunk_rows, highest)
            if kind == "measurements":
                ingest_reading_frames(
                    conn, batch_id, report, config, source_label, chunks, progress=progress
                )
            else:
                check_count_columns(source_label, wanted, config)
                ingest_count_frames(conn, batch_id, report, config, source_label, chunks, progress)
            if highest[0] is not None and highest[0] != last:
                _store_watermark(conn, name, watermark, highest[0], batch_id)

        report = run_batch(store, report_kind, source_label, None, body)
    finally:
        engine.dispose()
    assert report is not None  # only checksummed batches are skipped
    return report


def _pull(engine, spec, watermark, last, mapping, wanted, chunk_rows, highest) -> Iterator[Chunk]:  # noqa: ANN001
    quote = engine.dialect.identifier_preparer.quote
    if "table" in spec:
        origin = ".".join(quote(part) for part in str(spec["table"]).split("."))
    else:
        origin = f"({spec['query']}) AS qcllp_source"
    where = "" if last is None else f" WHERE {quote(watermark)} >= :last"
    sql = text(f"SELECT * FROM {origin}{where} ORDER BY {quote(watermark)}")
    rename = {src: dst for dst, src in mapping.items()}
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
            top = frame[watermark].max()
            highest[0] = top if highest[0] is None else max(highest[0], top)
            frame = frame.rename(columns=rename)
            missing = [c for c in wanted if c not in frame.columns]
            if missing:
                raise IngestError(
                    f"SQL source: missing column(s) {', '.join(missing)}; map them with "
                    "'columns: {<our name>: <source column>}'"
                )
            yield Chunk(frame[wanted], first_row)
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
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(Watermark.__table__).values(**row)
    stmt = stmt.on_conflict_do_update(
        index_elements=["source_name"],
        set_={k: stmt.excluded[k] for k in ("column", "value", "batch_id", "updated_at")},
    )
    conn.execute(stmt)
