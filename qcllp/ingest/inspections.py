"""Inspections: a person's verdict on one stick at one station (``charge_id, stick_id, station,
result`` and optionally ``inspected_at``).

A stick the scorer locks out is looked at in the lock-out bay before it is scrapped, and audit
samples are taken aside and looked at too. Each inspection is a label of one stick, exactly
where the final-QC counts say least (the top of the model's ranking), so it is checked as
strictly as the counts:

* ``result`` is ``ok`` or one of the config's ``defect_types``, spelled as configured (``Crack``
  is not ``crack``: the detail names the configured spelling); anything else is
  ``unknown_result`` with the allowed values listed;
* the station must be configured; the stick must have readings stored (``unknown_stick``) and
  readings *at that station* (``stick_not_at_station``, the detail naming the stations where it
  has some). The second is its own reason because an inspection judges what the station's model
  decided: a stick never measured there has no flag and no features there, so it could neither
  check a lock-out nor train the station's model -- most often the station is a typo. Readings
  are ingested before inspections (connectors run in that order), so an inspection of a stick
  just measured finds its readings;
* ``inspected_at`` may be missing or empty (stored as null); a value is read like a reading's
  timestamp (ISO 8601, local time of the plant without an offset) and quarantined the same
  ways (``unparseable_timestamp``, ``future_timestamp``);
* one inspection per stick and station: the same result again is a duplicate; another result is
  ``conflicting_inspection`` -- the stored one (or, within one input, the first) is kept, never
  overwritten;
* a file without one of the four required columns fails whole, naming the file and column;
  other columns (an inspector, a remark) are not read.

At storage each inspection gets the station's flag of the stick (``flag_id``) and ``audit``:
false when that flag locked the stick out, true when it passed it, found it unscorable or there
is no flag yet (the inspection is then a sample of what the model let pass). All lookups are
one query per table and chunk of input (by station and charge, the tables' index prefixes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Connection, insert, select

from qcllp.ingest.batches import FileMemo, ingest_files
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sources import Chunk, read_chunks, read_columns
from qcllp.ingest.validate import (
    as_text,
    future_limit_us,
    id_length_detail,
    parse_timestamps_us,
    too_long,
)
from qcllp.ingest.writer import insert_quarantine, quarantine_rows, raw_json, read_rejects
from qcllp.plant.config import PlantConfig
from qcllp.store import IN_CHUNK, Flag, Inspection, Series, Stick, Store, rows_frame

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "INSPECTION_CHECKS",
    "INSPECTION_COLUMNS",
    "check_inspection_columns",
    "ingest_inspection_frames",
    "ingest_inspections",
]

#: the columns an inspection input must have; ``inspected_at`` is optional
INSPECTION_COLUMNS = ["charge_id", "stick_id", "station", "result"]
#: the quarantine reasons of an inspection, in the order they are checked (first one wins)
INSPECTION_CHECKS = (
    "missing_id",
    "id_too_long",
    "missing_field",
    "unknown_station",
    "unknown_result",
    "unparseable_timestamp",
    "future_timestamp",
    "unknown_stick",
    "stick_not_at_station",
    "conflicting_inspection",
)
_KEY = ["station", "charge_id", "stick_id"]
DEFAULT_CHUNK_ROWS = 100_000


def ingest_inspections(
    store: Store,
    config: PlantConfig,
    path: str | Path,
    *,
    fmt: str | None = None,
    pattern: str | None = None,
    encoding: str | None = None,
    memo: FileMemo | None = None,
    archive: str | Path | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Ingest an inspection file, or the new files of a folder (one atomic batch per file,
    a file already stored is skipped by checksum); ``encoding``, ``memo`` and ``archive`` as
    for defect counts; ``chunk_rows`` rows validated and stored at a time; ``progress`` gets
    the records done so far."""
    encoding = encoding or config.encoding

    def make_body(file: Path, fformat: str, tick: Callable[[int], None]):  # noqa: ANN202
        check_inspection_columns(str(file), read_columns(file, fformat, encoding))
        chunks = read_chunks(file, fformat, chunk_rows, encoding)

        def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
            ingest_inspection_frames(conn, batch_id, report, config, str(file), chunks, tick)

        return body

    return ingest_files(
        store,
        "inspections",
        path,
        pattern=pattern,
        fmt=fmt,
        make_body=make_body,
        progress=progress,
        memo=memo,
        archive=archive,
    )


def check_inspection_columns(source: str, columns: Iterable[str]) -> None:
    """Fail (one line naming ``source`` and the column) unless the required columns are there."""
    names = {c.strip() for c in columns}
    missing = [c for c in INSPECTION_COLUMNS if c not in names]
    if missing:
        raise IngestError(
            f"{source}: missing column(s) {', '.join(missing)}; expected "
            f"{', '.join(INSPECTION_COLUMNS)} and optionally inspected_at"
        )


def ingest_inspection_frames(
    conn: Connection,
    batch_id: int,
    report: IngestReport,
    config: PlantConfig,
    source: str,
    chunks: Iterable[Chunk],
    progress: Callable[[int], None] | None = None,
) -> None:
    """Validate and store chunks of inspection rows within an open batch (module docstring)."""
    for chunk in chunks:
        quarantine = read_rejects(batch_id, source, chunk, report)
        frame = chunk.frame
        if len(frame):
            rows = _text_fields(frame, config)
            checks = _Checks(len(frame))
            _check_fields(rows, config, checks)
            _check_sticks(conn, rows, config, checks)
            dup = _check_repeats(conn, batch_id, rows, checks)
            new = (checks.reason == "") & ~dup
            report.audit_samples += _store(conn, batch_id, rows, new)
            bad = np.flatnonzero(checks.reason != "")
            quarantine += quarantine_rows(
                batch_id,
                source,
                chunk.row_numbers(bad),
                raw_json(frame, bad),
                checks.reason[bad],
                checks.detail[bad],
            )
            report.records += len(frame)
            report.stored += int(new.sum())
            report.duplicates += int(dup.sum())
            report.quarantined.update(checks.reason[bad].tolist())
        insert_quarantine(conn, quarantine)
        if progress is not None:
            progress(report.records)


class _Checks:
    """Per row the first reason it fails (``""``: none yet) and its detail."""

    def __init__(self, n: int) -> None:
        self.reason = np.full(n, "", dtype=object)
        self.detail = np.full(n, "", dtype=object)

    @property
    def open(self) -> np.ndarray:
        """Rows no check has rejected yet."""
        return self.reason == ""

    def mark(self, hit: np.ndarray, why: str, text_of: Callable[[int], str]) -> None:
        """Reject the open rows in ``hit`` for ``why``; details built for those rows only."""
        hit = hit & self.open
        self.reason[hit] = why
        self.detail[hit] = [text_of(i) for i in np.flatnonzero(hit)]


def _text_fields(frame: pd.DataFrame, config: PlantConfig) -> dict[str, np.ndarray]:
    """The row fields as stripped text (``inspected_at`` ``""`` when absent), plus the parsed
    ``inspected_at``: ``ts_us`` (epoch µs, UTC) and its parse ``ts_status`` (0 ok, 1 not a
    time, 2 nonexistent or ambiguous local time; ``-1`` where empty)."""
    rows = {c: as_text(frame[c]).to_numpy(dtype=object) for c in INSPECTION_COLUMNS}
    if "inspected_at" in frame.columns:
        raw = frame["inspected_at"]
        empty = raw.isna().to_numpy() | (as_text(raw) == "").to_numpy(dtype=bool)
        ts_us, status = parse_timestamps_us(raw, config.timezone)
        rows["inspected_at"] = as_text(raw).to_numpy(dtype=object)
    else:
        empty = np.ones(len(frame), dtype=bool)
        ts_us, status = np.zeros(len(frame), dtype=np.int64), np.zeros(len(frame), np.int8)
        rows["inspected_at"] = np.full(len(frame), "", dtype=object)
    rows["ts_us"] = np.where(empty, 0, ts_us)
    rows["ts_status"] = np.where(empty, -1, status)
    return rows


def _check_fields(rows: dict[str, np.ndarray], config: PlantConfig, checks: _Checks) -> None:
    """The checks the plant config alone decides: ids, station, result, ``inspected_at``."""
    charge, stick, station, result = (rows[c] for c in INSPECTION_COLUMNS)
    ts, status = rows["inspected_at"], rows["ts_status"]
    checks.mark(charge == "", "missing_id", lambda i: "charge_id is empty")
    checks.mark(stick == "", "missing_id", lambda i: "stick_id is empty")
    long_charge = too_long(pd.Series(charge, dtype="str"))
    checks.mark(long_charge, "id_too_long", lambda i: id_length_detail("charge_id", charge[i]))
    long_stick = too_long(pd.Series(stick, dtype="str"))
    checks.mark(long_stick, "id_too_long", lambda i: id_length_detail("stick_id", stick[i]))
    checks.mark(station == "", "missing_field", lambda i: "station is empty")
    checks.mark(result == "", "missing_field", lambda i: "result is empty")
    stations = list(config.station_names)
    checks.mark(
        ~np.isin(station, stations),
        "unknown_station",
        lambda i: f"unknown station '{station[i]}'; known: {', '.join(stations)}",
    )
    classes = list(config.classes)
    checks.mark(
        ~np.isin(result, classes), "unknown_result", lambda i: _result_detail(result[i], classes)
    )
    checks.mark(
        status > 0,
        "unparseable_timestamp",
        lambda i: (
            f"inspected_at '{ts[i]}' does not exist or is ambiguous in {config.timezone} "
            "(DST change); give it with a UTC offset"
            if status[i] == 2
            else f"inspected_at '{ts[i]}' is not an ISO 8601 time between 1970 and 2200"
        ),
    )
    limit_us = future_limit_us(config)
    limit = datetime.fromtimestamp(limit_us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    checks.mark(
        (status == 0) & (rows["ts_us"] > limit_us),
        "future_timestamp",
        lambda i: (
            f"inspected_at '{ts[i]}' is after {limit} (the time of ingestion plus "
            f"connectors.future_tolerance_s {config.connectors.future_tolerance_s:g} s)"
        ),
    )


def _result_detail(value: str, classes: list[str]) -> str:
    """Why a result is refused: the allowed ones, and the configured spelling if only the
    case differs."""
    spelled = [c for c in classes if c.casefold() == value.casefold()]
    hint = f" (spelled '{spelled[0]}' in the plant config)" if spelled else ""
    return f"result '{value}' is not ok or a defect type{hint}; allowed: {', '.join(classes)}"


def _lookup(
    conn: Connection, columns: list, stations: list[str], charges: list[str]
) -> pd.DataFrame:
    """Rows of ``columns`` (of one table with station and charge_id) of these stations and
    charges, as a frame: one query per :data:`IN_CHUNK` charges."""
    table = columns[0].table
    found = []
    for start in range(0, len(charges), IN_CHUNK):
        stmt = select(*columns).where(
            table.c.station.in_(stations), table.c.charge_id.in_(charges[start : start + IN_CHUNK])
        )
        found += conn.execute(stmt).all()
    return rows_frame(found, [c.name for c in columns])


def _keys(frame: pd.DataFrame) -> pd.MultiIndex:
    """The (station, charge_id, stick_id) of each row of ``frame``."""
    return pd.MultiIndex.from_frame(frame[_KEY].astype(object))


def _known_sticks(conn: Connection, charges: list[str]) -> pd.MultiIndex:
    """(charge_id, stick_id) of the stored sticks of these charges (the primary key's prefix:
    one query per :data:`IN_CHUNK` charges)."""
    found = []
    for start in range(0, len(charges), IN_CHUNK):
        stmt = select(Stick.charge_id, Stick.stick_id).where(
            Stick.charge_id.in_(charges[start : start + IN_CHUNK])
        )
        found += conn.execute(stmt).all()
    return pd.MultiIndex.from_frame(rows_frame(found, ["charge_id", "stick_id"]).astype(object))


def _check_sticks(
    conn: Connection, rows: dict[str, np.ndarray], config: PlantConfig, checks: _Checks
) -> None:
    """Unknown sticks, and sticks without readings at the inspection's station."""
    at = np.flatnonzero(checks.open)
    if not len(at):
        return
    charge, stick, station = rows["charge_id"][at], rows["stick_id"][at], rows["station"][at]
    charges = pd.unique(charge).tolist()
    known = _known_sticks(conn, charges)
    stations = list(config.station_names)
    columns = [Series.station, Series.charge_id, Series.stick_id]
    seen = _lookup(conn, columns, stations, charges).drop_duplicates()
    pairs = pd.MultiIndex.from_arrays([charge, stick])
    is_known = pairs.isin(known)
    wanted = pd.MultiIndex.from_arrays([station, charge, stick])
    here = wanted.isin(_keys(seen)) if len(seen) else np.zeros(len(at), dtype=bool)
    hit = np.zeros(len(checks.reason), dtype=bool)
    hit[at[~is_known]] = True
    checks.mark(
        hit,
        "unknown_stick",
        lambda i: (
            f"no readings of stick '{rows['stick_id'][i]}' of charge "
            f"'{rows['charge_id'][i]}' are stored"
        ),
    )
    hit[:] = False
    hit[at[~here]] = True
    where = _stations_of(seen, hit)
    checks.mark(
        hit,
        "stick_not_at_station",
        lambda i: (
            f"stick '{rows['stick_id'][i]}' of charge '{rows['charge_id'][i]}' has no "
            f"readings at station '{rows['station'][i]}'; it has at: "
            f"{where.get((rows['charge_id'][i], rows['stick_id'][i]), 'none')}"
        ),
    )


def _stations_of(seen: pd.DataFrame, hit: np.ndarray) -> pd.Series:
    """``(charge_id, stick_id) -> "station, ..."`` where the sticks have readings; built only
    when some stick is rejected (the detail of the rejected rows needs it)."""
    if not hit.any() or not len(seen):
        return pd.Series(dtype=object)
    grouped = seen.sort_values("station").groupby(["charge_id", "stick_id"])["station"]
    return grouped.agg(", ".join)


def _check_repeats(
    conn: Connection, batch_id: int, rows: dict[str, np.ndarray], checks: _Checks
) -> np.ndarray:
    """Duplicates (same stick, station and result as stored or as an earlier row of the
    input) and ``conflicting_inspection`` for another result; the stored one or the first
    is kept. Returns the duplicate mask."""
    dup = np.zeros(len(checks.reason), dtype=bool)
    at = np.flatnonzero(checks.open)
    if not len(at):
        return dup
    frame = pd.DataFrame({c: rows[c][at] for c in [*_KEY, "result"]})
    reference, where = _earlier_results(conn, batch_id, frame)
    compared = pd.notna(reference)
    same = compared & (reference == frame["result"].to_numpy(dtype=object))
    dup[at[same]] = True
    hit = np.zeros(len(checks.reason), dtype=bool)
    hit[at[compared & ~same]] = True
    position = dict(zip(at.tolist(), range(len(at)), strict=True))

    def detail(i: int) -> str:
        j = position[i]
        return (
            f"an inspection of stick '{rows['stick_id'][i]}' of charge '{rows['charge_id'][i]}' "
            f"at {rows['station'][i]} {where[j]} with result '{reference[j]}'; "
            f"this row: '{rows['result'][i]}'"
        )

    checks.mark(hit, "conflicting_inspection", detail)
    return dup


def _earlier_results(
    conn: Connection, batch_id: int, frame: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Per row the result it is compared with (``None``: the first of its stick and station)
    and where that one is from: stored by an earlier batch, or an earlier row of this input
    (an earlier chunk of it is stored by this batch already)."""
    first = frame.groupby(_KEY, sort=False)["result"].transform("first").to_numpy(dtype=object)
    later = frame.duplicated(_KEY, keep="first").to_numpy()
    reference = np.where(later, first, None)
    where = np.full(len(frame), "was given earlier in this input", dtype=object)
    columns = [Inspection.station, Inspection.charge_id, Inspection.stick_id]
    columns += [Inspection.result, Inspection.batch_id]
    stored = _lookup(
        conn, columns, frame["station"].unique().tolist(), frame["charge_id"].unique().tolist()
    )
    if len(stored):
        matched = stored.set_index(_KEY).reindex(pd.MultiIndex.from_frame(frame[_KEY]))
        found = matched["result"].to_numpy(dtype=object)
        from_store = pd.notna(found)
        reference = np.where(from_store, found, reference)
        earlier = from_store & (matched["batch_id"].to_numpy() != batch_id)
        where[earlier] = [f"is stored (batch {int(b)})" for b in matched["batch_id"][earlier]]
    return reference, where


def _store(conn: Connection, batch_id: int, rows: dict[str, np.ndarray], new: np.ndarray) -> int:
    """Insert the new inspections with the station's flag of each stick; returns how many
    are audit samples (no lock-out by that flag)."""
    at = np.flatnonzero(new)
    if not len(at):
        return 0
    frame = pd.DataFrame({c: rows[c][at] for c in [*_KEY, "result"]})
    flags = _lookup(
        conn,
        [Flag.station, Flag.charge_id, Flag.stick_id, Flag.id, Flag.decision],
        frame["station"].unique().tolist(),
        frame["charge_id"].unique().tolist(),
    )
    flag_id = np.full(len(frame), None, dtype=object)
    audit = np.ones(len(frame), dtype=bool)
    if len(flags):
        matched = flags.set_index(_KEY).reindex(pd.MultiIndex.from_frame(frame[_KEY]))
        flag_id = matched["id"].to_numpy(dtype=object)
        audit = matched["decision"].to_numpy(dtype=object) != "lock_out"
    timed = rows["ts_status"][at] == 0
    inspected = pd.to_datetime(rows["ts_us"][at], unit="us", utc=True).to_pydatetime()
    columns = {
        **{c: frame[c].to_numpy(dtype=object) for c in [*_KEY, "result"]},
        "inspected_at": np.where(timed, inspected, None),
        "flag_id": [None if pd.isna(f) else int(f) for f in flag_id],
        "audit": audit.tolist(),
    }
    fixed = {"batch_id": batch_id, "stored_at": datetime.now(UTC)}
    names = list(columns)
    conn.execute(
        insert(Inspection.__table__),
        [
            {**dict(zip(names, row, strict=True)), **fixed}
            for row in zip(*columns.values(), strict=True)
        ],
    )
    return int(audit.sum())
