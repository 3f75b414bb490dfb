"""Bulk writes of validated chunks: readings (deduplicated by natural key), sticks, charges,
quarantine rows.

How a chunk of valid readings is stored, inside the batch's exclusive transaction:

1. the chunk's time series (station, charge, stick, sensor) are factorized in pandas and
   looked up in ``series`` by station and charge; missing ones are created
   (``ON CONFLICT DO NOTHING``), so every row gets a ``series_id``;
2. duplicates *within* the chunk: the first row of a key wins; a later row with the same value
   is a duplicate, one with a different value a ``conflicting_duplicate``;
3. only for series that existed before this chunk, their stored readings are fetched
   (primary-key prefix lookup within the chunk's time span) and merged on ``(series_id,
   ts_us)``: equal value -> duplicate, different value -> ``conflicting_duplicate`` (the
   stored value is kept);
4. on a partitioned ``readings`` (PostgreSQL) the months the new rows fall in get their
   partitions (:func:`qcllp.store.partitions.ensure_partitions`); the remaining rows are
   inserted with ``INSERT ... ON CONFLICT DO NOTHING`` -- on SQLite with
   the driver's ``executemany`` (one prepared statement); on PostgreSQL with ``COPY`` (inside a
   savepoint; should a key exist after all, through a staging table and one
   ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``);
5. sticks and charges are upserted with ``first_seen_us = min(stored, new)`` (charges also
   ``last_seen_us = max(stored, new)``: the time bounds readers prune partitions by), and every
   (station, charge, stick) with new readings is listed in ``batch_sticks`` under the batch,
   which is how the station scorers find new work without scanning ``readings``;
6. the statistics of the new readings are merged into their sticks' rows of
   ``stick_stats`` (:func:`qcllp.store.kept_stats.keep_series_stats`), from which every
   feature follows: only the readings this batch stored count, so a re-sent file adds
   nothing.

Because the batch holds the writer lock, steps 2 and 3 see the same database state, so the
numbers reported are exact; ``ON CONFLICT DO NOTHING`` is the belt to those braces.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import Connection, func, insert, select

from qcllp.ingest.report import IngestReport
from qcllp.ingest.sources import Chunk, raw_json
from qcllp.ingest.validate import SERIES_KEY
from qcllp.store import (
    IN_CHUNK,
    QuarantineRow,
    Reading,
    Series,
    driver_cursor,
    insert_columns,
    rows_frame,
)
from qcllp.store.driver_sql import copy_binary
from qcllp.store.kept_stats import keep_series_stats
from qcllp.store.partitions import ensure_partitions
from qcllp.store.series_stats import series_stats

# the PostgreSQL types of readings' series_id, ts_us, value and batch_id
READING_TYPES = ("integer", "bigint", "double precision", "integer")

__all__ = ["ReadingWriter", "insert_quarantine", "raw_json", "read_rejects"]


def insert_quarantine(conn: Connection, rows: list[dict]) -> None:
    """Insert quarantine rows (dicts with the quarantine columns)."""
    if rows:
        conn.execute(insert(QuarantineRow.__table__), rows)


class ReadingWriter:
    """Stores validated readings of one batch (see the module docstring)."""

    def __init__(self, conn: Connection, batch_id: int):
        self.conn = conn
        self.batch_id = batch_id
        self.postgres = conn.dialect.name == "postgresql"
        self._staged = False

    def write(self, valid: pd.DataFrame) -> tuple[int, int, pd.DataFrame]:
        """Store ``valid`` (columns ``pos``, station, charge_id, stick_id, sensor, ts_us, value).

        Returns ``(stored, duplicates, conflicts)`` with ``conflicts`` a frame ``pos, reason,
        detail`` of the rows quarantined as conflicting duplicates.
        """
        if valid.empty:
            return 0, 0, _no_conflicts()
        code, keys = _series_of(valid)
        ids, existed, earlier = self._series_ids(keys)
        sid = ids[code]
        ts = valid["ts_us"].to_numpy(dtype=np.int64)
        value = valid["value"].to_numpy(dtype=np.float64)
        pairs = pd.DataFrame({"sid": sid, "ts": ts})
        dup = pairs.duplicated(keep="first").to_numpy().copy()
        conflict = np.zeros(len(valid), dtype=bool)
        detail = np.full(len(valid), "", dtype=object)
        if dup.any():
            first_value = pd.Series(value).groupby([sid, ts], sort=False).transform("first")
            first_value = first_value.to_numpy()
            differs = dup & (first_value != value)
            conflict |= differs
            detail[differs] = [
                f"an earlier row of this input has the same key with value {float(v)!r}"
                for v in first_value[differs]
            ]
        if existed.any():
            stored_value = self._stored_values(pairs, ids[existed])
            present = ~np.isnan(stored_value) & ~dup
            differs = present & (stored_value != value)
            conflict |= differs
            detail[differs] = [
                f"a reading with this key is stored with value {float(v)!r}"
                for v in stored_value[differs]
            ]
            dup |= present
        new = ~dup
        ensure_partitions(self.conn, ts[new])
        stored = self.insert_readings(sid[new], ts[new], value[new])
        if stored != int(new.sum()):
            raise RuntimeError(  # would mean another writer bypassed the lock
                f"expected to store {int(new.sum())} readings, the database took {stored}"
            )
        self._upsert_sticks(keys, code[new], ts[new])
        kept = series_stats(sid[new], ts[new], value[new])
        keep_series_stats(self.conn, kept, ids, keys, maybe=earlier)
        conflicts = pd.DataFrame(
            {
                "pos": valid["pos"].to_numpy()[conflict],
                "reason": "conflicting_duplicate",
                "detail": detail[conflict],
            }
        )
        return stored, int(dup.sum() - conflict.sum()), conflicts

    # --------------------------------------------------------------- internals
    def _select_series(self, keys: pd.DataFrame) -> dict[tuple, int]:
        """The stored series among ``keys``' stations and charges: key tuple -> id."""
        t = Series.__table__
        stations = keys["station"].unique().tolist()
        charges = keys["charge_id"].unique().tolist()
        found: dict[tuple, int] = {}
        for start in range(0, len(charges), IN_CHUNK):
            stmt = select(t.c.id, t.c.station, t.c.charge_id, t.c.stick_id, t.c.sensor).where(
                t.c.station.in_(stations), t.c.charge_id.in_(charges[start : start + IN_CHUNK])
            )
            found.update((tuple(row[1:]), row[0]) for row in self.conn.execute(stmt))
        return found

    def _series_ids(self, keys: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, set]:
        """Database id of each series in ``keys`` (created if new), whether it existed, and
        the (station, charge_id, stick_id) of the series of these charges stored before (the
        only sticks that may have kept statistics).

        Looked up in a dict of key tuples rather than by a pandas merge: a batch from the
        line holds a few hundred series, and two merges on text keys were a third of its
        write (``benchmarks/bench_line_latency.py``)."""
        wanted = list(zip(*(keys[c].to_numpy(dtype=object) for c in SERIES_KEY), strict=True))
        stored = self._select_series(keys)
        ids = np.array([stored.get(key, -1) for key in wanted], dtype=np.int64)
        existed = ids >= 0
        earlier = {key[:3] for key in stored}
        if not existed.all():
            missing = keys[~existed]
            t = Series.__table__
            before = self.conn.execute(select(func.coalesce(func.max(t.c.id), 0))).scalar_one()
            insert_columns(
                self.conn,
                "INSERT INTO series (station, charge_id, stick_id, sensor)",
                ("text",) * 4,
                _columns(missing, SERIES_KEY),
                "ON CONFLICT DO NOTHING",
            )
            # ids only grow and this batch holds the writer lock: the new rows are id > before
            created = {
                tuple(row[1:]): row[0]
                for row in self.conn.execute(
                    select(t.c.id, t.c.station, t.c.charge_id, t.c.stick_id, t.c.sensor).where(
                        t.c.id > before
                    )
                )
            }
            ids[~existed] = [created[key] for key, e in zip(wanted, existed, strict=True) if not e]
        return ids, existed, earlier

    def _stored_values(self, pairs: pd.DataFrame, series_ids: np.ndarray) -> np.ndarray:
        """Stored value for each (sid, ts) pair, NaN where there is none."""
        t = Reading.__table__
        rows = []
        ids = series_ids.tolist()
        # the chunk's own time span: on a partitioned table only its months are probed
        within = t.c.ts_us.between(int(pairs["ts"].min()), int(pairs["ts"].max()))
        for start in range(0, len(ids), IN_CHUNK):
            stmt = select(t.c.series_id, t.c.ts_us, t.c.value).where(within)
            rows += self.conn.execute(
                stmt.where(t.c.series_id.in_(ids[start : start + IN_CHUNK]))
            ).all()
        if not rows:
            return np.full(len(pairs), np.nan)
        stored = rows_frame(rows, ["sid", "ts", "value"])
        stored = stored.astype({"sid": "int64", "ts": "int64", "value": "float64"})
        return pairs.merge(stored, on=["sid", "ts"], how="left")["value"].to_numpy()

    def insert_readings(self, sid: np.ndarray, ts: np.ndarray, value: np.ndarray) -> int:
        """Insert readings (series id, time, value) of this batch; keys already stored are
        skipped (``ON CONFLICT DO NOTHING``). Returns how many were stored."""
        if not len(sid):
            return 0
        cols = "series_id, ts_us, value, batch_id"
        with driver_cursor(self.conn) as cursor:
            if self.postgres:
                return self._copy(cursor, sid, ts, value)
            cursor.executemany(
                f"INSERT INTO readings ({cols}) VALUES (?, ?, ?, {int(self.batch_id)}) "
                "ON CONFLICT DO NOTHING",
                list(zip(sid.tolist(), ts.tolist(), value.tolist(), strict=True)),
            )
            return cursor.rowcount

    def _copy(self, cursor, sid: np.ndarray, ts: np.ndarray, value: np.ndarray) -> int:  # noqa: ANN001
        """PostgreSQL: binary ``COPY`` straight into ``readings`` (the rows were checked to be
        new under the writer lock); should a key exist after all, the savepoint is rolled back
        and the rows go through a staging table and ``INSERT ... ON CONFLICT DO NOTHING``."""
        import psycopg

        batch = np.full(len(sid), int(self.batch_id), dtype=np.int64)
        cursor.execute("SAVEPOINT qcllp_copy")
        try:
            copy_binary(cursor, "COPY readings (series_id, ts_us, value, batch_id)",
                        [sid, ts, value, batch], READING_TYPES)  # fmt: skip
            cursor.execute("RELEASE SAVEPOINT qcllp_copy")
            return len(sid)
        except psycopg.errors.UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT qcllp_copy")
        if not self._staged:
            cursor.execute(
                "CREATE TEMP TABLE IF NOT EXISTS qcllp_stage_readings "
                "(series_id integer, ts_us bigint, value double precision) ON COMMIT DROP"
            )
            self._staged = True
        cursor.execute("TRUNCATE qcllp_stage_readings")
        copy_binary(cursor, "COPY qcllp_stage_readings (series_id, ts_us, value)",
                    [sid, ts, value], READING_TYPES[:3])  # fmt: skip
        cursor.execute(
            "INSERT INTO readings (series_id, ts_us, value, batch_id) SELECT series_id, ts_us, "
            f"value, {int(self.batch_id)} FROM qcllp_stage_readings ON CONFLICT DO NOTHING"
        )
        return cursor.rowcount

    def _upsert_sticks(self, keys: pd.DataFrame, code: np.ndarray, ts: np.ndarray) -> None:
        """The charges, sticks and visits (``batch_sticks``) of the stored readings: their
        first and last times, grouped by codes in NumPy (a pandas groupby per table cost a
        batch from the line more than its readings' insert)."""
        if not len(code):
            return
        first = _reduce(np.minimum, code, ts, len(keys))
        last = _reduce(np.maximum, code, ts, len(keys))
        seen = first < np.iinfo(np.int64).max
        first, last = first[seen], last[seen]
        station, charge, stick = (
            keys[c].to_numpy(dtype=object)[seen] for c in ("station", "charge_id", "stick_id")
        )
        of_stick, stick_rows = _group_codes(charge, stick)
        stick_first = _reduce(np.minimum, of_stick, first, len(stick_rows))
        of_charge, charge_rows = _group_codes(charge)
        charge_first = _reduce(np.minimum, of_charge, first, len(charge_rows))
        charge_last = _reduce(np.maximum, of_charge, last, len(charge_rows))
        _, visit_rows = _group_codes(station, charge, stick)
        least, greatest = ("least", "greatest") if self.postgres else ("min", "max")
        insert_columns(
            self.conn,
            "INSERT INTO charges (charge_id, first_seen_us, last_seen_us)",
            ("text", "bigint", "bigint"),
            [charge[charge_rows].tolist(), charge_first.tolist(), charge_last.tolist()],
            "ON CONFLICT (charge_id) DO UPDATE SET "
            f"first_seen_us = {least}(coalesce(charges.first_seen_us, "
            "excluded.first_seen_us), excluded.first_seen_us), "
            f"last_seen_us = {greatest}(coalesce(charges.last_seen_us, "
            "excluded.last_seen_us), excluded.last_seen_us)",
        )
        insert_columns(
            self.conn,
            "INSERT INTO sticks (charge_id, stick_id, first_seen_us)",
            ("text", "text", "bigint"),
            [charge[stick_rows].tolist(), stick[stick_rows].tolist(), stick_first.tolist()],
            "ON CONFLICT (charge_id, stick_id) DO UPDATE SET "
            f"first_seen_us = {least}(sticks.first_seen_us, excluded.first_seen_us)",
        )
        insert_columns(
            self.conn,
            "INSERT INTO batch_sticks (batch_id, station, charge_id, stick_id)",
            ("integer", "text", "text", "text"),
            [[int(self.batch_id)] * len(visit_rows)]
            + [column[visit_rows].tolist() for column in (station, charge, stick)],
            "ON CONFLICT DO NOTHING",
        )


def _columns(frame: pd.DataFrame, columns: list[str]) -> list[list]:
    """The values of ``columns`` of ``frame`` as lists of Python objects (for the driver)."""
    return [frame[c].tolist() for c in columns]


def _group_codes(*columns: np.ndarray | pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per row a dense code (0..k-1, in order of first appearance) of its combination of
    values in ``columns``, and the first row of each of the k combinations."""
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        part, uniques = pd.factorize(column, use_na_sentinel=False)  # a missing value: a key
        code, _ = pd.factorize(code * len(uniques) + part)
    _, first = np.unique(code, return_index=True)
    return code, first


def _reduce(ufunc: np.ufunc, codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``ufunc`` (``np.minimum``, ``np.maximum``) of ``values`` per code 0..n-1."""
    start = np.iinfo(np.int64).max if ufunc is np.minimum else np.iinfo(np.int64).min
    out = np.full(n, start, dtype=np.int64)
    ufunc.at(out, codes, values)
    return out


def _series_of(valid: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Series code per row (0..k-1, in order of first appearance) and the k series keys."""
    code, first = _group_codes(*(valid[c] for c in SERIES_KEY))
    keys = valid[SERIES_KEY].iloc[first].reset_index(drop=True)
    return code, keys


def _no_conflicts() -> pd.DataFrame:
    return pd.DataFrame({"pos": np.array([], dtype=int), "reason": [], "detail": []})


def quarantine_rows(
    batch_id: int,
    source: str,
    row_numbers: np.ndarray | list,
    raw: list[str],
    reasons: np.ndarray | list,
    details: np.ndarray | list,
) -> list[dict]:
    """Quarantine rows as dicts for :func:`insert_quarantine`."""
    return [
        {
            "batch_id": batch_id,
            "source": source,
            "row_number": None if n is None else int(n),
            "raw": r,
            "reason": str(why),
            "detail": str(d),
        }
        for n, r, why, d in zip(row_numbers, raw, reasons, details, strict=True)
    ]


def read_rejects(batch_id: int, source: str, chunk: Chunk, report: IngestReport) -> list[dict]:
    """Quarantine rows for the records the reader rejected (malformed lines, undecodable
    text), counted in ``report`` as records and quarantined by reason."""
    rejected = chunk.rejected
    report.records += len(rejected)
    report.quarantined.update(r.reason for r in rejected)
    return quarantine_rows(
        batch_id,
        source,
        [r.row_number for r in rejected],
        [r.raw for r in rejected],
        [r.reason for r in rejected],
        [r.detail for r in rejected],
    )
