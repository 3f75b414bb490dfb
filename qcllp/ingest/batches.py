"""Ingestion batches: the unit that is stored atomically, and its bookkeeping row.

A batch is one input file (or one pull from a SQL source). Its life:

1. a ``running`` row in ``ingestion_batches`` is committed on its own, so an operator can see
   what is being ingested -- and what was being ingested when a process died;
2. everything the batch stores (readings, sticks, charges, counts, quarantine rows, the SQL
   watermark) and the batch row's final ``done`` status with its counts are written in ONE
   exclusive transaction (:meth:`qcllp.store.Store.write`). A failure or a kill before the
   commit leaves no trace of the batch's data: the database rolls it back (SQLite's WAL and
   PostgreSQL's MVCC both guarantee this across a SIGKILL). A rerun sees no ``done`` batch
   with that checksum and ingests the file again, completely; the dead run's row is marked
   ``abandoned`` then. The ``done`` row gets the next ``commit_seq`` under the writer lock,
   so station scorers can follow finished batches in the order they became visible.

Under the writer lock the batch checks again whether the same content was ingested meanwhile
(two pollers racing on the same file): then it stores nothing and is marked ``skipped``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Connection, func, insert, select, update

from qcllp.ingest.report import IngestError, IngestReport
from qcllp.ingest.sources import file_checksum, file_format, list_input_files
from qcllp.store import IngestionBatch, Store

__all__ = ["FileMemo", "already_ingested", "ingest_files", "run_batch"]

Body = Callable[[Connection, int, IngestReport], None]

log = logging.getLogger(__name__)
_T = IngestionBatch.__table__


def _now() -> datetime:
    return datetime.now(UTC)


def already_ingested(store: Store, kind: str, checksum: str) -> bool:
    """Whether a batch of ``kind`` with this content checksum was stored completely."""
    with store.engine.connect() as conn:
        return _done_id(conn, kind, checksum) is not None


def _done_id(conn: Connection, kind: str, checksum: str) -> int | None:
    stmt = select(_T.c.id).where(_T.c.kind == kind, _T.c.checksum == checksum)
    return conn.execute(stmt.where(_T.c.status == "done").limit(1)).scalar()


def run_batch(
    store: Store,
    kind: str,
    source: str,
    checksum: str | None,
    body: Callable[[Connection, int, IngestReport], None],
) -> IngestReport | None:
    """Run ``body(conn, batch_id, report)`` as one atomic batch; ``None`` if it was skipped.

    ``body`` writes through ``conn`` and fills ``report``; an :class:`IngestError` from it
    marks the batch ``failed`` with the message (nothing stored) and propagates.
    """
    with store.writing() as conn:
        batch_id = conn.execute(
            insert(_T).values(
                kind=kind, source=source, checksum=checksum, status="running", started_at=_now()
            )
        ).inserted_primary_key[0]
    report = IngestReport(kind=kind, batches=[batch_id])
    try:
        with store.write() as conn:
            if checksum is not None and _done_id(conn, kind, checksum) is not None:
                _set(conn, batch_id, status="skipped", finished_at=_now(), message="ingested")
                return None
            stale = _T.c.checksum == checksum if checksum is not None else _T.c.source == source
            conn.execute(
                update(_T)
                .where(_T.c.kind == kind, stale, _T.c.status == "running", _T.c.id < batch_id)
                .values(status="abandoned", message=f"interrupted; redone by batch {batch_id}")
            )
            body(conn, batch_id, report)
            _set(
                conn,
                batch_id,
                status="done",
                commit_seq=_next_commit_seq(conn),
                finished_at=_now(),
                rows_read=report.records,
                rows_stored=report.stored,
                rows_duplicate=report.duplicates,
                rows_quarantined=report.quarantined_total,
            )
    except BaseException as exc:
        message = str(exc) if isinstance(exc, IngestError) else f"{type(exc).__name__}: {exc}"
        try:
            with store.writing() as conn:
                _set(conn, batch_id, status="failed", finished_at=_now(), message=message)
        except Exception:  # pragma: no cover - the database itself is gone
            log.exception("could not mark batch %s failed", batch_id)
        raise
    return report


def _next_commit_seq(conn: Connection) -> int:
    """One more than the largest ``commit_seq``; unique because writers hold the writer lock."""
    return int(conn.execute(select(func.coalesce(func.max(_T.c.commit_seq), 0))).scalar()) + 1


def _set(conn: Connection, batch_id: int, **values) -> None:
    conn.execute(update(_T).where(_T.c.id == batch_id).values(**values))


class FileMemo:
    """The files a long-running poller has already handled, by (path, size, mtime): a watched
    folder's poll then reads only new or changed files, not every file's checksum again --
    its cost follows the new files, not the folder's history. A file that failed is handled
    too: it is reported once, and tried again when it changes. A file whose batch was cut
    short by a database error is not remembered: the next poll tries it again."""

    def __init__(self) -> None:
        self._handled: set[tuple[str, int, int]] = set()

    @staticmethod
    def key(file: Path) -> tuple[str, int, int] | None:
        """The file's identity now (``None`` if it vanished)."""
        try:
            st = file.stat()
        except OSError:
            return None
        return (str(file), st.st_size, st.st_mtime_ns)

    def __contains__(self, key: object) -> bool:
        return key is not None and key in self._handled

    def remember(self, key: tuple[str, int, int] | None) -> None:
        if key is not None:
            self._handled.add(key)


def ingest_files(
    store: Store,
    kind: str,
    path: str | Path,
    *,
    pattern: str | None,
    fmt: str | None,
    make_body: Callable[[Path, str, Callable[[int], None]], Body],
    progress: Callable[[int], None] | None = None,
    memo: FileMemo | None = None,
    archive: str | Path | None = None,
) -> IngestReport:
    """One batch per new file under ``path``; files already ingested (checksum) are skipped.

    ``make_body(file, format, tick)`` checks the file's columns (raising :class:`IngestError`
    for a file that cannot be ingested at all: it is listed in ``files_failed`` and the other
    files go on) and returns the batch body; ``tick(records_done_in_file)`` drives
    ``progress`` with the running total of the call. ``memo``: files handled by earlier calls
    of a poller are passed over without reading them (:class:`FileMemo`). ``archive``: a folder
    every stored or already-stored file is moved to after its batch committed (a kill in
    between leaves it in place; the next poll finds its checksum stored and moves it then);
    a file that failed stays where it is, for a person to look at.
    """
    report = IngestReport(kind=kind)
    memo = memo if memo is not None else FileMemo()
    for file in list_input_files(path, pattern):
        key = memo.key(file)  # taken before reading: a file changed meanwhile is read again
        if key in memo:
            continue
        checksum = file_checksum(file)
        if already_ingested(store, kind, checksum):
            report.files_skipped.append(str(file))
            memo.remember(key)
            _archive(file, archive)
            continue

        def tick(n: int, done: int = report.records) -> None:
            if progress is not None:
                progress(done + n)

        try:
            body = make_body(file, file_format(file, fmt), tick)
            one = run_batch(store, kind, str(file), checksum, body)
        except IngestError as exc:
            report.files_failed[str(file)] = str(exc)
            memo.remember(key)
            continue
        memo.remember(key)
        _archive(file, archive)
        if one is None:
            report.files_skipped.append(str(file))
            continue
        one.files_ingested.append(str(file))
        report.add(one)
    return report


def _archive(file: Path, archive: str | Path | None) -> None:
    """Move a done file into ``archive`` (a name taken there gets a numbered suffix); a file
    that cannot be moved stays, with a warning -- it is stored, so nothing is lost."""
    if archive is None:
        return
    folder = Path(archive)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / file.name
        n = 1
        while target.exists():
            target = folder / f"{file.stem}.{n}{file.suffix}"
            n += 1
        shutil.move(str(file), str(target))
    except OSError as exc:
        log.warning("could not move %s to %s: %s", file, folder, exc)
