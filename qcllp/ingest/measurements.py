"""Measurement files (CSV/Parquet, long or wide, a file or a folder) into the store.

``ingest_measurements`` is what the CLI's ``ingest`` and the retraining daemon call. Per file:
checksum -> skip if already ingested -> one atomic batch (:mod:`qcllp.ingest.batches`) that
streams the file in chunks: read (:mod:`.sources`) -> wide to long -> validate
(:mod:`.validate`) -> store or quarantine (:mod:`.writer`). Memory is bounded by the chunk
size, whatever the file size.

Wide layout: ``charge_id, stick_id, station, timestamp, <sensor columns...>``; every non-empty
sensor cell is one reading (record) of the row's station -- a cell in a column that is not a
sensor of that station is quarantined as ``unknown_sensor``. Empty cells are "not measured"
and no record; a row whose sensor cells are all empty is one record, quarantined as
``missing_value``. Which layout a file has is taken from the connector (``layout``) or, by
default, from its columns (a ``sensor`` column -> long; no sensor can be named ``sensor``).
A long file without its ``value`` column holds no reading: every row is quarantined as
``missing_column`` (one reason naming the column, the rows kept) instead of failing the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Connection

from qcllp.ingest.batches import FileMemo, ingest_files
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sources import file_format, read_chunks, read_columns
from qcllp.ingest.validate import KEY, LONG_COLUMNS, SensorTable, validate_readings
from qcllp.ingest.writer import (
    ReadingWriter,
    insert_quarantine,
    quarantine_rows,
    raw_json,
    read_rejects,
)
from qcllp.plant.config import PlantConfig
from qcllp.store import Store, us_to_utc

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "ingest_measurements",
    "ingest_reading_frames",
    "quarantine_all",
    "read_readings",
]

DEFAULT_CHUNK_ROWS = 200_000
_ID_COLUMNS = ["charge_id", "stick_id", "station", "timestamp"]
_NO_VALUE = "missing_column"  # the reason, and the layout of a long file without values
_DETAILS = {
    _NO_VALUE: "the file has a sensor column but no value column (long layout: "
    + ", ".join(LONG_COLUMNS)
    + ")"
}
Progress = Callable[[int], None] | None


def ingest_measurements(
    store: Store,
    config: PlantConfig,
    path: str | Path,
    *,
    layout: str | None = None,
    fmt: str | None = None,
    pattern: str | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress = None,
    encoding: str | None = None,
    memo: FileMemo | None = None,
    archive: str | Path | None = None,
) -> IngestReport:
    """Ingest a measurement file, or the new files of a folder.

    ``layout``: ``"long"``, ``"wide"`` or ``None`` (from the columns); ``fmt``: ``"csv"``,
    ``"parquet"`` or ``None`` (from the suffix); ``encoding`` of CSV text: ``None`` is the plant
    config's. ``progress(records_done)`` is called after each chunk with the running total of
    this call. A file that cannot be ingested at all (not CSV or Parquet, missing columns) is
    listed in ``files_failed`` and the other files go on; nothing of it is stored. ``memo``:
    a poller's record of the files it handled (:class:`qcllp.ingest.batches.FileMemo`);
    ``archive``: where done files are moved (:func:`qcllp.ingest.batches.ingest_files`).
    """
    encoding = encoding or config.encoding

    def make_body(file: Path, fformat: str, tick: Callable[[int], None]):  # noqa: ANN202
        kind = _layout_of(file, read_columns(file, fformat, encoding), layout)
        chunks = read_chunks(file, fformat, chunk_rows, encoding)

        def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
            if kind == _NO_VALUE:
                quarantine_all(conn, batch_id, report, str(file), chunks, _NO_VALUE, tick)
                return
            wide = kind == "wide"
            ingest_reading_frames(
                conn, batch_id, report, config, str(file), chunks, wide=wide, progress=tick
            )

        return body

    return ingest_files(
        store,
        "measurements",
        path,
        pattern=pattern,
        fmt=fmt,
        make_body=make_body,
        progress=progress,
        memo=memo,
        archive=archive,
    )


def ingest_reading_frames(
    conn: Connection,
    batch_id: int,
    report: IngestReport,
    config: PlantConfig,
    source: str,
    chunks,
    *,
    wide: bool = False,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Validate and store chunks of long (or wide) frames within an open batch.

    Shared by the file connector and the SQL connector.
    """
    table = SensorTable.from_config(config)
    writer = ReadingWriter(conn, batch_id)
    for chunk in chunks:
        quarantine = read_rejects(batch_id, source, chunk, report)
        frame = chunk.frame
        if len(frame):
            long, origin, empty_rows = _long_records(frame, wide)
            valid, rejects = validate_readings(long, config, table)
            stored, duplicates, conflicts = writer.write(valid)
            rejects = pd.concat([rejects, conflicts], ignore_index=True)
            rows, reasons, details = _rejected(long, origin, empty_rows, rejects, wide)
            raw = raw_json(frame, rows)
            quarantine += quarantine_rows(
                batch_id, source, chunk.row_numbers(rows), raw, reasons, details
            )
            report.records += len(long) + len(empty_rows)
            report.stored += stored
            report.duplicates += duplicates
            report.quarantined.update(reasons)
        insert_quarantine(conn, quarantine)
        if progress is not None:
            progress(report.records)


def quarantine_all(
    conn: Connection,
    batch_id: int,
    report: IngestReport,
    source: str,
    chunks,  # noqa: ANN001
    reason: str,
    progress: Progress = None,
) -> None:
    """Quarantine every row of the chunks with ``reason`` (its detail: :data:`_DETAILS`): a
    file that holds no reading at all is kept row by row in the quarantine, nothing lost."""
    for chunk in chunks:
        quarantine = read_rejects(batch_id, source, chunk, report)
        rows = np.arange(len(chunk.frame))
        quarantine += quarantine_rows(
            batch_id,
            source,
            chunk.row_numbers(rows),
            raw_json(chunk.frame, rows),
            [reason] * len(rows),
            [_DETAILS[reason]] * len(rows),
        )
        report.records += len(rows)
        report.quarantined[reason] += len(rows)
        insert_quarantine(conn, quarantine)
        if progress is not None:
            progress(report.records)


def read_readings(
    config: PlantConfig,
    path: str | Path,
    *,
    layout: str | None = None,
    fmt: str | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    max_listed: int = 5,
) -> pd.DataFrame:
    """The readings of one file, checked as ingest checks them, without storing anything.

    For scoring a file outside the database (``qcllp score --input``). All or nothing: if any
    record is malformed or fails validation, :class:`IngestError` names the file, how many
    records failed, and the first ``max_listed`` with row number, reason and detail -- a stick
    is not scored from a partial record. A reading repeated with the same key (station, charge,
    stick, sensor, timestamp) counts once, as in the store; repeated with another value it is a
    ``conflicting_duplicate``, which ingest would quarantine. Returns the long frame
    (``charge_id, stick_id, station, timestamp, sensor, value``; timestamps in UTC). A file
    whose suffix names no format is read as CSV, as the command always did.
    """
    file = Path(path)
    try:
        fformat = file_format(file, fmt)
    except IngestError:  # the suffix names no format
        fformat = "csv"
    kind = _layout_of(file, read_columns(file, fformat, config.encoding), layout)
    if kind == _NO_VALUE:
        raise IngestError(f"{file}: {_DETAILS[_NO_VALUE]}")
    wide = kind == "wide"
    table = SensorTable.from_config(config)
    parts, problems, n_records = [], [], 0
    for chunk in read_chunks(file, fformat, chunk_rows, config.encoding):
        problems += [(r.row_number, r.reason, r.detail) for r in chunk.rejected]
        n_records += len(chunk.rejected)
        if not len(chunk.frame):
            continue
        long, origin, empty_rows = _long_records(chunk.frame, wide)
        valid, rejects = validate_readings(long, config, table)
        rows, reasons, details = _rejected(long, origin, empty_rows, rejects, wide)
        problems += zip(chunk.row_numbers(rows).tolist(), reasons, details, strict=True)
        n_records += len(long) + len(empty_rows)
        row = chunk.row_numbers(origin[valid["pos"].to_numpy(dtype=int)])
        parts.append(valid.assign(row=row))
    valid = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=KEY + ["value"])
    valid, conflicts = _same_key(valid)
    problems += conflicts
    if problems:
        raise _invalid(file, problems, n_records, max_listed)
    timestamp = us_to_utc(valid["ts_us"].to_numpy(dtype="int64"))
    return pd.DataFrame(
        {
            "charge_id": valid["charge_id"].to_numpy(dtype=object),
            "stick_id": valid["stick_id"].to_numpy(dtype=object),
            "station": valid["station"].to_numpy(dtype=object),
            "timestamp": timestamp,
            "sensor": valid["sensor"].to_numpy(dtype=object),
            "value": valid["value"].to_numpy(dtype="float64"),
        }
    )


def _invalid(file: Path, problems: list[tuple], n_records: int, max_listed: int) -> IngestError:
    """The error of a file with invalid records: how many, and the first ``max_listed`` (row,
    reason, detail) in file order."""
    listed = "; ".join(
        f"{'row ' + str(row) if row is not None else 'a malformed line'}: {why}: {detail}"
        for row, why, detail in sorted(problems, key=lambda p: (p[0] is None, p[0] or 0))[
            :max_listed
        ]
    )
    return IngestError(
        f"{file}: {len(problems)} of {n_records} records invalid, nothing scored; {listed}"
    )


def _same_key(valid: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[int, str, str]]]:
    """``valid`` without repeated readings, and the conflicts: as ingest does, the first record
    of a :data:`KEY` wins, a repeat with the same value is dropped and one with another value
    is a ``conflicting_duplicate`` (row, reason, detail naming the sensor and the first row)."""
    repeat = valid.duplicated(KEY, keep="first").to_numpy()
    if not repeat.any():
        return valid, []
    first = valid.groupby(KEY, sort=False)[["value", "row"]].transform("first")
    differs = repeat & (first["value"].to_numpy() != valid["value"].to_numpy())
    conflicts = [
        (
            int(row),
            "conflicting_duplicate",
            f"{sensor}: row {int(first_row)} of this file has the same key with value "
            f"{float(first_value)!r}",
        )
        for row, sensor, first_row, first_value in zip(
            valid["row"][differs],
            valid["sensor"][differs],
            first["row"][differs],
            first["value"][differs],
            strict=True,
        )
    ]
    return valid[~repeat], conflicts


def _long_records(frame: pd.DataFrame, wide: bool) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """A chunk as long records: (records, row of origin per record, all-empty wide rows)."""
    if wide:
        return _wide_to_long(frame)
    return frame, np.arange(len(frame)), np.array([], dtype=int)


def _rejected(
    long: pd.DataFrame,
    origin: np.ndarray,
    empty_rows: np.ndarray,
    rejects: pd.DataFrame,
    wide: bool,
) -> tuple[np.ndarray, list, list]:
    """Chunk rows, reasons and details of the rejected records, then of the all-empty wide rows;
    a wide record's detail names its cell's sensor."""
    pos = rejects["pos"].to_numpy(dtype=int)
    rows = np.concatenate([origin[pos], empty_rows]).astype(int)
    details = list(rejects["detail"])
    if wide:
        sensors = long["sensor"].to_numpy()[pos]
        details = [f"{s}: {d}" for s, d in zip(sensors, details, strict=True)]
    reasons = [*rejects["reason"], *["missing_value"] * len(empty_rows)]
    return rows, reasons, details + ["all sensor cells are empty"] * len(empty_rows)


def _layout_of(file: Path, columns: list[str], layout: str | None) -> str:
    """``"long"``, ``"wide"`` or :data:`_NO_VALUE` (long, all columns but ``value``); a file
    missing other columns of its layout, or a wide one without sensor columns, fails."""
    names = {c.strip() for c in columns}
    if layout is None:
        layout = "long" if "sensor" in names else "wide"
    required = LONG_COLUMNS if layout == "long" else _ID_COLUMNS
    missing = [c for c in required if c not in names]
    if missing == ["value"]:
        return _NO_VALUE
    if missing:
        raise IngestError(
            f"{file}: missing column(s) {', '.join(missing)} for the {layout} layout "
            f"({', '.join(required)}{'' if layout == 'long' else ', <sensor columns>'})"
        )
    if layout == "wide" and len(names - set(_ID_COLUMNS)) == 0:
        raise IngestError(f"{file}: a wide-layout file needs at least one sensor column")
    return layout


def _wide_to_long(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Melt a wide chunk to long: (long frame, row of origin per record, all-empty rows)."""
    sensors = [c for c in frame.columns if c not in _ID_COLUMNS]
    cells = frame[sensors]
    if all(pd.api.types.is_numeric_dtype(cells[c].dtype) for c in sensors):
        present = cells.notna().to_numpy()
    else:
        present = np.column_stack(
            [
                cells[c].notna().to_numpy()
                & (cells[c].astype("str").str.strip() != "").to_numpy(dtype=bool)
                for c in sensors
            ]
        )
    row, col = np.nonzero(present)  # row-major: records in file order
    empty_rows = np.flatnonzero(~present.any(axis=1))
    values = cells.to_numpy(dtype=object)[row, col]
    long = pd.DataFrame(
        {
            "charge_id": frame["charge_id"].to_numpy()[row],
            "stick_id": frame["stick_id"].to_numpy()[row],
            "station": frame["station"].to_numpy()[row],
            "timestamp": frame["timestamp"].to_numpy()[row],
            "sensor": np.asarray(sensors, dtype=object)[col],
            "value": values,
        }
    )
    if isinstance(frame["timestamp"].dtype, pd.DatetimeTZDtype):
        long["timestamp"] = frame["timestamp"].iloc[row].reset_index(drop=True)
    return long, row, empty_rows
