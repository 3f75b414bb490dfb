"""Final-QC defect counts (``charge_id, n_sticks, <one count column per defect type>``).

The counts are the labels of LLP, so nothing about them is guessed:

* a row with an empty or too long charge id, a count that is not a whole number,
  ``n_sticks < 1``, a negative count, a count larger than the store's integer columns hold
  (:data:`MAX_COUNT`, 2,147,483,647: PostgreSQL's ``INTEGER``) or counts adding up to more
  than ``n_sticks`` is quarantined, with the value as written;
* the file must have exactly the configured defect-type columns: a missing one would make
  every ok count wrong, an unknown one may be a defect type the config does not know yet --
  both fail the whole file with a message instead of storing wrong labels;
* a charge reported again with the same counts is a duplicate; with *different* counts it is a
  conflict: the stored counts are never overwritten, the new report is kept in
  ``defect_count_conflicts`` (and quarantined as ``conflicting_counts``), and
  :meth:`qcllp.store.Store.read_defect_counts` leaves the charge out until a person resolves
  it. Within one input the first report of a charge is the one compared against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Connection, insert, select, text

from qcllp.ingest.batches import FileMemo, ingest_files
from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sources import Chunk, read_chunks, read_columns
from qcllp.ingest.validate import as_text, id_length_detail, largest_storable, too_long
from qcllp.ingest.writer import insert_quarantine, quarantine_rows, raw_json, read_rejects
from qcllp.plant.config import PlantConfig
from qcllp.store import IN_CHUNK, Charge, DefectCount, DefectCountConflict, Store

__all__ = ["MAX_COUNT", "check_count_columns", "ingest_count_frames", "ingest_defect_counts"]

#: the largest n_sticks or defect count the store's columns hold (32-bit on PostgreSQL)
MAX_COUNT: int = largest_storable(Charge.n_sticks, DefectCount.count, DefectCountConflict.n_sticks)


def ingest_defect_counts(
    store: Store,
    config: PlantConfig,
    path: str | Path,
    *,
    fmt: str | None = None,
    pattern: str | None = None,
    encoding: str | None = None,
    memo: FileMemo | None = None,
    archive: str | Path | None = None,
) -> IngestReport:
    """Ingest a defect-count file, or the new files of a folder (one batch per file); CSV
    text in ``encoding`` (``None``: the plant config's); ``memo`` and ``archive`` as for
    measurements."""
    encoding = encoding or config.encoding

    def make_body(file: Path, fformat: str, tick: Callable[[int], None]):  # noqa: ANN202
        check_count_columns(str(file), read_columns(file, fformat, encoding), config)
        chunks = read_chunks(file, fformat, 100_000, encoding)

        def body(conn: Connection, batch_id: int, report: IngestReport) -> None:
            ingest_count_frames(conn, batch_id, report, config, str(file), chunks, tick)

        return body

    return ingest_files(
        store,
        "defect_counts",
        path,
        pattern=pattern,
        fmt=fmt,
        make_body=make_body,
        memo=memo,
        archive=archive,
    )


def check_count_columns(source: str, columns: Iterable[str], config: PlantConfig) -> None:
    """Fail unless the columns are ``charge_id, n_sticks`` plus exactly the defect types."""
    names = [c.strip() for c in columns]
    expected = ["charge_id", "n_sticks", *config.defect_types]
    missing = [c for c in expected if c not in names]
    unknown = [c for c in names if c not in expected]
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    if unknown:
        problems.append(
            f"unknown column(s) {', '.join(unknown)} (defect types in the plant config: "
            f"{', '.join(config.defect_types)})"
        )
    if problems:
        raise IngestError(f"{source}: {'; '.join(problems)}; expected {', '.join(expected)}")


def ingest_count_frames(
    conn: Connection,
    batch_id: int,
    report: IngestReport,
    config: PlantConfig,
    source: str,
    chunks: Iterable[Chunk],
    progress: Callable[[int], None] | None = None,
) -> None:
    """Validate and store chunks of defect-count rows within an open batch."""
    types = list(config.defect_types)
    for chunk in chunks:
        quarantine = read_rejects(batch_id, source, chunk, report)
        frame = chunk.frame
        if len(frame):
            charge, counts, reason, detail = _validate(frame, types)
            ok = reason == ""
            dup, conflict = _compare(conn, charge, counts, ok, types, detail)
            reason[conflict] = "conflicting_counts"
            new = ok & ~dup & ~conflict
            _store_counts(conn, batch_id, charge[new], counts[new], types)
            _store_conflicts(conn, batch_id, charge, counts, conflict, detail, types)
            bad = np.flatnonzero(reason != "")
            quarantine += quarantine_rows(
                batch_id,
                source,
                chunk.row_numbers(bad),
                raw_json(frame, bad),
                reason[bad],
                detail[bad],
            )
            report.records += len(frame)
            report.stored += int(new.sum())
            report.duplicates += int(dup.sum())
            report.quarantined.update(reason[bad].tolist())
        insert_quarantine(conn, quarantine)
        if progress is not None:
            progress(report.records)


def _validate(frame: pd.DataFrame, types: list[str]):  # noqa: ANN202
    """(charge ids, int count matrix [n_sticks, *types], reason, detail) per row.

    The counts are judged as the float numbers read; only whole numbers within what the
    count columns hold (:data:`MAX_COUNT`) are cast to int, so nothing wraps or overflows
    (the others are quarantined before they would be), and details quote the values as
    written in the file.
    """
    text_ids = as_text(frame["charge_id"])
    charge = text_ids.to_numpy(dtype=object)
    columns = ["n_sticks", *types]
    raw, numbers, whole = _read_counts(frame, columns)
    storable = whole & (np.abs(numbers) <= MAX_COUNT)
    counts = np.where(storable, numbers, 0).astype(np.int64)
    reason = np.full(len(frame), "", dtype=object)
    detail = np.full(len(frame), "", dtype=object)

    def mark(hit: np.ndarray, why: str, text_of: Callable[[int], str]) -> None:
        hit = hit & (reason == "")
        reason[hit] = why
        detail[hit] = [text_of(i) for i in np.flatnonzero(hit)]  # rejected rows only

    def listed(hits: np.ndarray, text_of: Callable[[str, int], str]) -> Callable[[int], str]:
        """Row i's detail: ``text_of(column, i)`` for each of its columns in ``hits``."""
        return lambda i: "; ".join(text_of(c, i) for j, c in enumerate(columns) if hits[i, j])

    mark(charge == "", "missing_id", lambda i: "charge_id is empty")
    mark(too_long(text_ids), "id_too_long", lambda i: id_length_detail("charge_id", charge[i]))
    not_whole = ~whole
    mark(
        not_whole.any(axis=1),
        "non_numeric_count",
        listed(not_whole, lambda c, i: f"{c} '{raw[c][i]}' is not a whole number"),
    )
    mark(numbers[:, 0] < 1, "non_positive_n_sticks", lambda i: f"n_sticks is {raw['n_sticks'][i]}")
    negative = numbers < 0
    negative[:, 0] = False
    mark(
        negative.any(axis=1), "negative_count", listed(negative, lambda c, i: f"{c} is {raw[c][i]}")
    )
    too_large = numbers > MAX_COUNT
    mark(
        too_large.any(axis=1),
        "count_too_large",
        listed(too_large, lambda c, i: f"{c} {raw[c][i]} exceeds the largest storable {MAX_COUNT}"),
    )
    total = counts[:, 1:].sum(axis=1)
    mark(
        total > counts[:, 0],
        "counts_exceed_n_sticks",
        lambda i: f"defect counts add up to {total[i]} > n_sticks {counts[i, 0]}",
    )
    return charge, counts, reason, detail


def _read_counts(frame: pd.DataFrame, columns: list[str]) -> tuple[dict, np.ndarray, np.ndarray]:
    """The count columns as written (stripped text per column), as float numbers (NaN where
    not a number; a float holds every value the count columns take exactly) and which are
    whole numbers -- an integer of more digits than a float takes (read as ``inf``) too."""
    written = {c: as_text(frame[c]) for c in columns}
    numbers = np.column_stack(
        [
            pd.to_numeric(written[c], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
            for c in columns
        ]
    )
    whole = np.isfinite(numbers) & (numbers == np.round(numbers))
    for j in np.flatnonzero(np.isposinf(numbers).any(axis=0)):  # rare: only such columns
        digits = written[columns[j]].str.fullmatch(r"\+?\d+").to_numpy(dtype=bool)
        whole[:, j] |= np.isposinf(numbers[:, j]) & digits
    return {c: written[c].to_numpy(dtype=object) for c in columns}, numbers, whole


def _describe(counts_row: np.ndarray, types: list[str]) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(["n_sticks", *types], counts_row, strict=True))


def _compare(conn, charge, counts, ok, types, detail):  # noqa: ANN001, ANN202
    """Duplicate / conflict flags against earlier rows of the chunk and the store."""
    n = len(charge)
    dup = np.zeros(n, dtype=bool)
    conflict = np.zeros(n, dtype=bool)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return dup, conflict
    frame = pd.DataFrame(counts[rows], columns=["n_sticks", *types])
    frame.insert(0, "charge_id", charge[rows])
    reference = frame.groupby("charge_id", sort=False).transform("first")
    later = frame["charge_id"].duplicated(keep="first").to_numpy()
    stored = _stored_counts(conn, frame["charge_id"].unique().tolist(), types)
    if len(stored):
        from_store = stored.reindex(frame["charge_id"]).to_numpy()
        known = ~np.isnan(from_store).all(axis=1)
        reference_values = np.where(known[:, None], from_store, reference.to_numpy())
    else:
        known = np.zeros(len(frame), dtype=bool)
        reference_values = reference.to_numpy()
    compared = later | known
    same = (reference_values == frame[["n_sticks", *types]].to_numpy()).all(axis=1)
    dup[rows[compared & same]] = True
    differs = compared & ~same
    conflict[rows[differs]] = True
    for i in np.flatnonzero(differs):  # conflicts only
        where = "stored" if known[i] else "reported earlier in this input"
        ref = np.nan_to_num(reference_values[i], nan=-1).astype(np.int64)
        detail[rows[i]] = (
            f"charge {frame['charge_id'].iat[i]} {where} with {_describe(ref, types)}; "
            f"this report: {_describe(counts[rows[i]], types)}"
        )
    return dup, conflict


def _stored_counts(conn: Connection, charge_ids: list[str], types: list[str]) -> pd.DataFrame:
    """Stored n_sticks and counts (float, NaN where missing) of those charges that have them."""
    parts = []
    for start in range(0, len(charge_ids), IN_CHUNK):
        ids = charge_ids[start : start + IN_CHUNK]
        charges = conn.execute(
            select(Charge.charge_id, Charge.n_sticks).where(
                Charge.charge_id.in_(ids), Charge.n_sticks.is_not(None)
            )
        ).all()
        if not charges:
            continue
        counts = conn.execute(
            select(DefectCount.charge_id, DefectCount.defect_type, DefectCount.count).where(
                DefectCount.charge_id.in_([c for c, _ in charges])
            )
        ).all()
        wide = pd.DataFrame(counts, columns=["charge_id", "defect_type", "count"]).pivot(
            index="charge_id", columns="defect_type", values="count"
        )
        part = pd.DataFrame(charges, columns=["charge_id", "n_sticks"]).set_index("charge_id")
        parts.append(part.join(wide.reindex(columns=types)).astype("float64"))
    if not parts:
        return pd.DataFrame(columns=["n_sticks", *types], dtype="float64")
    return pd.concat(parts)[["n_sticks", *types]]


def _store_counts(conn, batch_id, charge, counts, types) -> None:  # noqa: ANN001
    if not len(charge):
        return
    conn.execute(
        text(
            "INSERT INTO charges (charge_id, n_sticks, counts_batch_id) "
            "VALUES (:charge_id, :n_sticks, :batch_id) ON CONFLICT (charge_id) DO UPDATE SET "
            "n_sticks = excluded.n_sticks, counts_batch_id = excluded.counts_batch_id"
        ),
        [
            {"charge_id": c, "n_sticks": int(k[0]), "batch_id": batch_id}
            for c, k in zip(charge, counts, strict=True)
        ],
    )
    conn.execute(
        insert(DefectCount.__table__),
        [
            {"charge_id": c, "defect_type": t, "count": int(k[j + 1])}
            for c, k in zip(charge, counts, strict=True)
            for j, t in enumerate(types)
        ],
    )


def _store_conflicts(conn, batch_id, charge, counts, conflict, detail, types) -> None:  # noqa: ANN001
    rows = np.flatnonzero(conflict)
    if not len(rows):
        return
    now = datetime.now(UTC)
    conn.execute(
        insert(DefectCountConflict.__table__),
        [
            {
                "charge_id": charge[i],
                "batch_id": batch_id,
                "n_sticks": int(counts[i, 0]),
                "counts": dict(zip(types, counts[i, 1:].tolist(), strict=True)),
                "detail": detail[i],
                "created_at": now,
            }
            for i in rows
        ],
    )
