"""Bulk writes of validated chunks: readings (deduplicated by natural key), sticks, charges,
quarantine rows.

How a chunk of valid readings is stored, inside the batch's exclusive transaction:

1. duplicates *within* the chunk: the first row of a key wins; a later row with the same value
   is a duplicate, one with a different value a ``conflicting_duplicate``;
2. the stored readings of the chunk's stations and charges are fetched (primary-key prefix
   lookup; usually nothing for new data) and merged on the natural key: equal value ->
   duplicate, different value -> ``conflicting_duplicate`` (the stored value is kept);
3. the remaining rows are inserted with ``INSERT ... ON CONFLICT DO NOTHING`` -- on SQLite with
   the driver's ``executemany`` (one prepared statement), on PostgreSQL with ``COPY`` into a
   temporary staging table and one ``INSERT ... SELECT ... ON CONFLICT DO NOTHING``;
4. sticks and charges are upserted with ``first_seen_us = min(stored, new)``.

Because the batch holds the writer lock, steps 2 and 3 see the same database state, so the
numbers reported are exact; ``ON CONFLICT DO NOTHING`` is the belt to those braces.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from sqlalchemy import Connection, insert, select

from qcllp.ingest.validate import KEY
from qcllp.store import QuarantineRow, Reading

__all__ = ["ReadingWriter", "insert_quarantine", "raw_json"]

_IN_CHUNK = 2000
_QCOLS = ["batch_id", "source", "row_number", "raw", "reason", "detail"]


def raw_json(frame: pd.DataFrame, positions: np.ndarray) -> list[str]:
    """The rows of ``frame`` at ``positions`` as JSON objects (the quarantine's ``raw``)."""
    if not len(positions):
        return []
    rows = frame.iloc[positions]
    return rows.to_json(orient="records", lines=True, date_format="iso").splitlines()


def insert_quarantine(conn: Connection, rows: list[dict]) -> None:
    """Insert quarantine rows (dicts with the quarantine columns)."""
    if rows:
        conn.execute(insert(QuarantineRow.__table__), rows)


def _placeholders(conn: Connection, n: int) -> str:
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    return ", ".join([mark] * n)


class ReadingWriter:
    """Stores validated readings of one batch (see the module docstring)."""

    def __init__(self, conn: Connection, batch_id: int):
        self.conn = conn
        self.batch_id = batch_id
        self.postgres = conn.dialect.name == "postgresql"
        self._staged = False

    def write(self, valid: pd.DataFrame) -> tuple[int, int, pd.DataFrame]:
        """Store ``valid`` (columns ``pos``, KEY, ``value``).

        Returns ``(stored, duplicates, conflicts)`` with ``conflicts`` a frame ``pos, reason,
        detail`` of the rows quarantined as conflicting duplicates.
        """
        if valid.empty:
            return 0, 0, _no_conflicts()
        dup = valid.duplicated(KEY, keep="first").to_numpy().copy()
        conflict = np.zeros(len(valid), dtype=bool)
        detail = np.full(len(valid), "", dtype=object)
        if dup.any():
            first_value = valid.groupby(KEY, sort=False)["value"].transform("first").to_numpy()
            differs = dup & (first_value != valid["value"].to_numpy())
            conflict |= differs
            detail[differs] = [
                f"an earlier row of this input has the same key with value {float(v)!r}"
                for v in first_value[differs]
            ]
        existing = self._existing(valid)
        if len(existing):
            stored_value = valid[KEY].merge(existing, on=KEY, how="left")["value"].to_numpy()
            present = ~np.isnan(stored_value) & ~dup
            differs = present & (stored_value != valid["value"].to_numpy())
            conflict |= differs
            detail[differs] = [
                f"a reading with this key is stored with value {float(v)!r}"
                for v in stored_value[differs]
            ]
            dup |= present
        new = valid[~dup]
        stored = self._insert(new)
        if stored != len(new):
            raise RuntimeError(  # would mean another writer bypassed the lock
                f"expected to store {len(new)} readings, the database took {stored}"
            )
        self._upsert_sticks(new)
        conflicts = pd.DataFrame(
            {
                "pos": valid["pos"].to_numpy()[conflict],
                "reason": "conflicting_duplicate",
                "detail": detail[conflict],
            }
        )
        return stored, int(dup.sum() - conflict.sum()), conflicts

    # --------------------------------------------------------------- internals
    def _existing(self, valid: pd.DataFrame) -> pd.DataFrame:
        t = Reading.__table__
        stations = valid["station"].unique().tolist()
        charges = valid["charge_id"].unique().tolist()
        parts = []
        for start in range(0, len(charges), _IN_CHUNK):
            stmt = select(t.c.station, t.c.charge_id, t.c.stick_id, t.c.sensor, t.c.ts_us)
            stmt = stmt.add_columns(t.c.value).where(
                t.c.station.in_(stations), t.c.charge_id.in_(charges[start : start + _IN_CHUNK])
            )
            rows = self.conn.execute(stmt).all()
            if rows:
                parts.append(pd.DataFrame(rows, columns=[*KEY, "value"]))
        if not parts:
            return pd.DataFrame(columns=[*KEY, "value"])
        existing = pd.concat(parts, ignore_index=True)
        return existing.astype({"ts_us": "int64", "value": "float64"})

    def _rows(self, new: pd.DataFrame) -> list[tuple]:
        batch = np.full(len(new), self.batch_id)
        columns = [new[c].to_numpy(dtype=object) for c in ("station", "charge_id")]
        columns += [new[c].to_numpy(dtype=object) for c in ("stick_id", "sensor")]
        columns += [new["ts_us"].to_numpy().tolist(), new["value"].to_numpy().tolist()]
        return list(zip(*columns, batch.tolist(), strict=True))

    def _insert(self, new: pd.DataFrame) -> int:
        if new.empty:
            return 0
        cols = "station, charge_id, stick_id, sensor, ts_us, value, batch_id"
        dbapi = self.conn.connection.dbapi_connection
        cursor = dbapi.cursor()
        try:
            if not self.postgres:
                cursor.executemany(
                    f"INSERT INTO readings ({cols}) VALUES ({_placeholders(self.conn, 7)}) "
                    "ON CONFLICT DO NOTHING",
                    self._rows(new),
                )
                return cursor.rowcount
            if not self._staged:
                cursor.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS qcllp_stage_readings "
                    "(LIKE readings) ON COMMIT DROP"
                )
                self._staged = True
            cursor.execute("TRUNCATE qcllp_stage_readings")
            with cursor.copy(f"COPY qcllp_stage_readings ({cols}) FROM STDIN") as copy:
                for row in self._rows(new):
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO readings ({cols}) SELECT {cols} FROM qcllp_stage_readings "
                "ON CONFLICT DO NOTHING"
            )
            return cursor.rowcount
        finally:
            cursor.close()

    def _upsert_sticks(self, new: pd.DataFrame) -> None:
        if new.empty:
            return
        sticks = new.groupby(["charge_id", "stick_id"], sort=False)["ts_us"].min().reset_index()
        charges = sticks.groupby("charge_id", sort=False)["ts_us"].min().reset_index()
        least = "least" if self.postgres else "min"
        dbapi = self.conn.connection.dbapi_connection
        cursor = dbapi.cursor()
        try:
            cursor.executemany(
                f"INSERT INTO charges (charge_id, first_seen_us) "
                f"VALUES ({_placeholders(self.conn, 2)}) ON CONFLICT (charge_id) DO UPDATE SET "
                f"first_seen_us = {least}(coalesce(charges.first_seen_us, "
                "excluded.first_seen_us), excluded.first_seen_us)",
                list(zip(charges["charge_id"].tolist(), charges["ts_us"].tolist(), strict=True)),
            )
            cursor.executemany(
                f"INSERT INTO sticks (charge_id, stick_id, first_seen_us) "
                f"VALUES ({_placeholders(self.conn, 3)}) "
                "ON CONFLICT (charge_id, stick_id) DO UPDATE SET "
                f"first_seen_us = {least}(sticks.first_seen_us, excluded.first_seen_us)",
                list(
                    zip(
                        sticks["charge_id"].tolist(),
                        sticks["stick_id"].tolist(),
                        sticks["ts_us"].tolist(),
                        strict=True,
                    )
                ),
            )
        finally:
            cursor.close()


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


def malformed_rows(batch_id: int, source: str, malformed: list[tuple[str, str]]) -> list[dict]:
    """Quarantine rows for malformed CSV lines (text and detail from the reader)."""
    return quarantine_rows(
        batch_id,
        source,
        [None] * len(malformed),
        [json.dumps({"line": text}) for text, _ in malformed],
        ["malformed_row"] * len(malformed),
        [detail for _, detail in malformed],
    )
