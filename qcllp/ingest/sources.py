"""Input files: which files a connector path names, their checksums, and chunked readers.

* A path is a single file or a folder; a folder yields its ``*.csv``/``*.parquet`` files (or
  those matching ``pattern``) sorted by name, ignoring hidden files and ``*.part``/``*.tmp``
  (exporters should write under such a name and rename when done, so a half-written export is
  never picked up). Which of them are new is decided by checksum (SHA-256 of the bytes) against
  the ``ingestion_batches`` table, so a renamed or re-dropped file is still recognized.
* CSV is read with pyarrow's streaming reader, every column as text (so the raw row can be
  quarantined exactly as it was written), in blocks of about ``chunk_rows`` rows: memory is
  bounded by the chunk, not by the file. Lines with the wrong number of fields are handed back
  as malformed records (pyarrow does not report their line numbers, so quarantine rows of
  malformed lines have no row number but keep the line's text). Blank lines are not records.
* Parquet is read row group by row group in batches of ``chunk_rows``, with its own types.
* ``row_number`` of a record: 1-based position among the file's well-formed records (for a
  CSV without malformed lines, blank lines or quoted line breaks: the line number minus one).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from qcllp.ingest.report import IngestError

__all__ = ["Chunk", "file_checksum", "file_format", "list_input_files", "read_chunks"]

_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_BYTES_PER_ROW = 64  # rough size of a long-format CSV line, to size pyarrow's read blocks


@dataclass
class Chunk:
    """Part of a file: a frame of records, their row numbers, and malformed lines seen."""

    frame: pd.DataFrame
    first_row: int  # row_number of frame's first record
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (line text, detail)


def list_input_files(path: str | Path, pattern: str | None = None) -> list[Path]:
    """The input files a connector path names (see module docstring)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise IngestError(f"{path}: no such file or folder")
    candidates = path.glob(pattern) if pattern else path.iterdir()
    files = [
        p
        for p in candidates
        if p.is_file()
        and not p.name.startswith(".")
        and p.suffix not in (".part", ".tmp")
        and (pattern or p.suffix.lower() in _SUFFIXES)
    ]
    return sorted(files)


def file_format(path: Path, fmt: str | None = None) -> str:
    """``"csv"`` or ``"parquet"``: as given, else from the file suffix."""
    if fmt:
        return fmt
    try:
        return _SUFFIXES[path.suffix.lower()]
    except KeyError:
        raise IngestError(
            f"{path}: cannot tell the format from the suffix; give csv or parquet"
        ) from None


def file_checksum(path: Path) -> str:
    """SHA-256 of the file's bytes (hex)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def read_columns(path: Path, fmt: str) -> list[str]:
    """The column names of a file (header of a CSV, schema of a Parquet file)."""
    if fmt == "parquet":
        return list(pq.ParquetFile(path).schema_arrow.names)
    with path.open(newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(f), None)
    if not header:
        raise IngestError(f"{path}: empty file (no header line)")
    return header


def read_chunks(path: Path, fmt: str, chunk_rows: int) -> Iterator[Chunk]:
    """Stream a file in chunks of roughly ``chunk_rows`` records."""
    try:
        if fmt == "parquet":
            yield from _parquet_chunks(path, chunk_rows)
        else:
            yield from _csv_chunks(path, chunk_rows)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: cannot read {fmt}: {exc}") from exc


def _csv_chunks(path: Path, chunk_rows: int) -> Iterator[Chunk]:
    names = read_columns(path, "csv")
    malformed: list[tuple[str, str]] = []

    def on_invalid(row) -> str:  # noqa: ANN001
        detail = f"expected {row.expected_columns} fields, found {row.actual_columns}"
        malformed.append((row.text, detail))
        return "skip"

    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(
            block_size=max(1 << 16, chunk_rows * _BYTES_PER_ROW), use_threads=True
        ),
        parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    first_row = 1
    for batch in reader:
        frame = batch.to_pandas()
        frame.columns = [str(c).strip() for c in frame.columns]
        yield Chunk(frame, first_row, malformed[:])
        malformed.clear()
        first_row += len(frame)
    if malformed:
        yield Chunk(pd.DataFrame(columns=[n.strip() for n in names]), first_row, malformed[:])


def _parquet_chunks(path: Path, chunk_rows: int) -> Iterator[Chunk]:
    first_row = 1
    for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
        frame = batch.to_pandas()
        frame.columns = [str(c).strip() for c in frame.columns]
        yield Chunk(frame, first_row)
        first_row += len(frame)
