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
* Encoding: CSV text is in the plant config's ``encoding`` (default UTF-8; a UTF-8 byte-order
  mark is skipped). Fields are split on the raw bytes and then decoded column by column (one
  Arrow cast when the column is clean); a record with a field that is not text in that encoding
  (or holds a NUL byte, which no database text column takes) is handed back as
  ``undecodable_text`` with its row number, the bad bytes shown as ``\\xNN`` -- the file's
  other records go on. A file whose first line is not text (NUL bytes, a UTF-16 mark, bytes
  that do not decode) or whose header is one column separated by ``;``/tab/``|`` fails whole
  with a message saying so, as does a Parquet file that Arrow cannot open.
* Parquet is read row group by row group in batches of ``chunk_rows``, with its own types.
* ``row_number`` of a record: 1-based position among the file's well-formed records (for a
  CSV without malformed lines, blank lines or quoted line breaks: the line number minus one).
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from qcllp.ingest.report import IngestError

__all__ = [
    "Chunk",
    "Rejected",
    "file_checksum",
    "file_format",
    "list_input_files",
    "raw_json",
    "read_chunks",
    "read_columns",
]

_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_BYTES_PER_ROW = 64  # rough size of a long-format CSV line, to size pyarrow's read blocks
_MAX_HEADER_BYTES = 1 << 20  # a header line longer than this is not a header
_OTHER_DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "'|'"}
_ENCODING_HINT = "declare the files' encoding as 'encoding' in the plant config (e.g. cp1252)"


@dataclass(frozen=True)
class Rejected:
    """A record the reader cannot hand on as a row: quarantined as read, with its reason."""

    row_number: int | None  # None for a malformed line (pyarrow does not tell its number)
    raw: str  # the record as JSON
    reason: str  # a key of qcllp.ingest.report.REASONS
    detail: str


@dataclass
class Chunk:
    """Part of a file: a frame of records, their row numbers, and the records rejected while
    reading (malformed lines, undecodable text)."""

    frame: pd.DataFrame
    first_row: int  # row_number of the chunk's first well-formed record
    rejected: list[Rejected] = field(default_factory=list)
    rows: np.ndarray | None = None  # row_number of each frame row, when not first_row + i

    def row_numbers(self, positions: np.ndarray) -> np.ndarray:
        """The row numbers of the frame rows at ``positions``."""
        positions = np.asarray(positions, dtype=int)
        return self.first_row + positions if self.rows is None else self.rows[positions]


MAX_RAW_FIELD = 1000  # characters of one field kept in a quarantined row's ``raw``


def raw_json(frame: pd.DataFrame, positions: np.ndarray) -> list[str]:
    """The rows of ``frame`` at ``positions`` as JSON objects (the quarantine's ``raw``).

    A text field longer than :data:`MAX_RAW_FIELD` characters is kept as its beginning and a
    note of its length: the quarantine must show what was wrong, not store a 20 MB id again.
    """
    if not len(positions):
        return []
    rows = frame.iloc[positions].copy()
    for column in rows.columns:
        if not pd.api.types.is_string_dtype(rows[column]):
            continue
        text = rows[column]
        lengths = text.str.len()
        long = lengths > MAX_RAW_FIELD
        if long.any():
            rows[column] = text.where(
                ~long,
                text.str.slice(0, MAX_RAW_FIELD)
                + "... ["
                + lengths.map(lambda n: f"{n:,.0f}")
                + " characters]",
            )
    return rows.to_json(orient="records", lines=True, date_format="iso").splitlines()


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


def read_columns(path: Path, fmt: str, encoding: str = "utf-8") -> list[str]:
    """The column names of a file (header of a CSV, schema of a Parquet file).

    Raises :class:`IngestError` naming the file when it is not what ``fmt`` says: a Parquet
    file Arrow cannot open, a CSV file that is empty, binary, not text in ``encoding`` or
    separated by something other than commas.
    """
    if fmt == "parquet":
        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except OSError as exc:
            raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except pa.ArrowException as exc:
            raise IngestError(f"{path}: not a Parquet file Arrow can read ({exc})") from exc
    text = _header_line(path, encoding)
    header = next(csv.reader([text]), None)
    if not header:
        raise IngestError(f"{path}: empty file (no header line)")
    if len(header) == 1:
        _refuse_other_delimiter(path, text)
    return header


def _header_line(path: Path, encoding: str) -> str:
    """The first line of a CSV file, decoded; an :class:`IngestError` if it is not text."""
    try:
        with path.open("rb") as f:
            line = f.readline(_MAX_HEADER_BYTES)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if line.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise IngestError(f"{path}: UTF-16 text, not CSV in {encoding}; export it as UTF-8")
    if b"\0" in line:
        raise IngestError(f"{path}: a binary file (NUL bytes in its first line), not CSV text")
    try:
        return line.decode(_codec(encoding))
    except UnicodeDecodeError as exc:
        raise IngestError(
            f"{path}: the header line is not {encoding} text ({_bad_byte(exc)}): a binary file, "
            f"or text in another encoding; {_ENCODING_HINT}"
        ) from exc


def _bad_byte(exc: UnicodeDecodeError) -> str:
    """Where decoding failed, for a person: ``byte 0xfc at position 5``."""
    return f"byte 0x{exc.object[exc.start]:02x} at position {exc.start}"


def _refuse_other_delimiter(path: Path, text: str) -> None:
    """A one-column header that csv.Sniffer finds separated by ``;``, tab or ``|``: say so
    rather than report every expected column as missing."""
    try:
        delimiter = csv.Sniffer().sniff(text, delimiters="".join(_OTHER_DELIMITERS)).delimiter
    except csv.Error:
        return
    raise IngestError(
        f"{path}: the delimiter looks wrong: the header line is separated by "
        f"{_OTHER_DELIMITERS[delimiter]}, not commas; export the file comma-separated"
    )


def _codec(encoding: str) -> str:
    """Decode UTF-8 as ``utf-8-sig``, so a byte-order mark is not part of the first name."""
    return "utf-8-sig" if _is_utf8(encoding) else encoding


def _is_utf8(encoding: str) -> bool:
    return codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")


def read_chunks(path: Path, fmt: str, chunk_rows: int, encoding: str = "utf-8") -> Iterator[Chunk]:
    """Stream a file in chunks of roughly ``chunk_rows`` records (CSV text in ``encoding``)."""
    try:
        if fmt == "parquet":
            yield from _parquet_chunks(path, chunk_rows)
        else:
            yield from _csv_chunks(path, chunk_rows, encoding)
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"{path}: cannot read {fmt}: {exc}") from exc


def _csv_chunks(path: Path, chunk_rows: int, encoding: str) -> Iterator[Chunk]:
    """Fields as raw bytes (the header, read by :func:`read_columns`, is skipped), decoded per
    chunk by :func:`_decoded`."""
    names = read_columns(path, "csv", encoding)
    stripped = [n.strip() for n in names]
    malformed: list[Rejected] = []

    def on_invalid(row) -> str:  # noqa: ANN001
        detail = f"expected {row.expected_columns} fields, found {row.actual_columns}"
        malformed.append(Rejected(None, json.dumps({"line": row.text}), "malformed_row", detail))
        return "skip"

    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(
            block_size=max(1 << 16, chunk_rows * _BYTES_PER_ROW),
            use_threads=True,
            column_names=names,
            skip_rows=1,
        ),
        parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.binary() for name in names},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    first_row = 1
    for batch in reader:
        chunk = _decoded(batch, stripped, encoding, first_row)
        chunk.rejected[:0] = malformed
        malformed.clear()
        yield chunk
        first_row += batch.num_rows
    if malformed:
        yield Chunk(pd.DataFrame(columns=stripped), first_row, malformed[:])


def _decoded(batch: pa.RecordBatch, names: list[str], encoding: str, first_row: int) -> Chunk:
    """A batch of raw fields as a chunk of text: records with a field that does not decode
    (or holds a NUL byte) become ``undecodable_text`` rejects, the others the frame."""
    columns, problems = [], {}
    for name, column in zip(names, batch.columns, strict=True):
        text, bad = _decode_column(column, encoding)
        columns.append(text)
        for i, why in bad.items():
            problems.setdefault(i, []).append(f"{name}: {why}")
    frame = pa.RecordBatch.from_arrays(columns, names=names).to_pandas()
    if not problems:
        return Chunk(frame, first_row)
    bad_rows = np.array(sorted(problems))
    rejected = [
        Rejected(first_row + i, raw, "undecodable_text", "; ".join([*problems[i], _ENCODING_HINT]))
        for i, raw in zip(bad_rows.tolist(), raw_json(frame, bad_rows), strict=True)
    ]
    keep = np.ones(len(frame), dtype=bool)
    keep[bad_rows] = False
    rows = first_row + np.flatnonzero(keep)
    return Chunk(frame[keep].reset_index(drop=True), first_row, rejected, rows)


def _decode_column(column: pa.Array, encoding: str) -> tuple[pa.Array, dict[int, str]]:
    """Raw fields -> text; ``{position: what is wrong}`` for the fields that are not text.

    One Arrow cast when the column is valid UTF-8 without NUL bytes (and, for another
    encoding, pure ASCII, which every allowed encoding reads alike); field by field otherwise.
    """
    try:
        text = pc.cast(column, pa.string())
    except pa.ArrowInvalid:
        return _decode_fields(column.to_pylist(), encoding)
    clean = not pc.any(pc.match_substring(column, "\0")).as_py()
    if clean and (_is_utf8(encoding) or _all_ascii(text)):
        return text, {}
    return _decode_fields(column.to_pylist(), encoding)


def _all_ascii(text: pa.Array) -> bool:
    return len(text) == 0 or bool(pc.all(pc.string_is_ascii(text)).as_py())


def _decode_fields(fields: list[bytes], encoding: str) -> tuple[pa.Array, dict[int, str]]:
    """Decode field by field; undecodable bytes are kept visible as ``\\xNN``."""
    out, bad = [], {}
    for i, raw in enumerate(fields):
        try:
            value = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            value = raw.decode(encoding, "backslashreplace")
            bad[i] = f"{_bad_byte(exc)} is not {encoding} text"
        else:
            if "\0" in value:
                bad[i] = "contains a NUL byte, which is not text"
        out.append(value)
    return pa.array(out, pa.string()), bad


def _parquet_chunks(path: Path, chunk_rows: int) -> Iterator[Chunk]:
    first_row = 1
    for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
        frame = batch.to_pandas()
        frame.columns = [str(c).strip() for c in frame.columns]
        yield Chunk(frame, first_row)
        first_row += len(frame)
