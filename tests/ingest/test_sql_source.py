"""SQL sources: a historian table read incrementally by its watermark column, mapped onto the
long format; defect counts from a query."""

import sqlite3

import pytest

from qcllp.ingest import IngestError, ingest_sql
from tests.ingest.helpers import accounted, stored_readings


def _historian(path, rows):  # noqa: ANN001, ANN202
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS stick_readings (id INTEGER PRIMARY KEY, charge TEXT, "
        "stick TEXT, station TEXT, timestamp TEXT, sensor TEXT, reading REAL)"
    )
    conn.executemany(
        "INSERT INTO stick_readings (charge, stick, station, timestamp, sensor, reading) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.commit()
    conn.close()


def _rows(start, stop):  # noqa: ANN001, ANN202
    return [
        ("c1", f"s{i}", "furnace", f"2025-01-06T06:{i:02d}:00Z", "temperature", 1000.0 + i)
        for i in range(start, stop)
    ]


def test_sql_source_is_read_incrementally_by_watermark(store, tiny_config, tmp_path):
    source_db = tmp_path / "historian.sqlite"
    _historian(source_db, _rows(0, 6))
    source = {
        "name": "historian",
        "url": f"sqlite:///{source_db}",
        "table": "stick_readings",
        "watermark": "id",
        "columns": {"charge_id": "charge", "stick_id": "stick", "value": "reading"},
        "chunk_rows": 4,
    }
    first = ingest_sql(store, tiny_config, source)
    assert first.stored == 6 and accounted(first)
    _historian(source_db, _rows(6, 9))
    second = ingest_sql(store, tiny_config, source)
    # the boundary row (watermark == last mark) is read again and recognized as a duplicate
    assert (second.stored, second.duplicates) == (3, 1)
    assert stored_readings(store) == 9
    [(value,)] = store.execute_sql("SELECT value FROM watermarks WHERE source_name = 'historian'")
    assert '"value": 9' in value


def test_sql_defect_counts_from_a_query(store, tiny_config, tmp_path):
    source_db = tmp_path / "mes.sqlite"
    conn = sqlite3.connect(source_db)
    conn.execute("CREATE TABLE qc (charge TEXT, sticks INT, crack INT, bend INT, at TEXT)")
    conn.executemany(
        "INSERT INTO qc VALUES (?, ?, ?, ?, ?)",
        [("c1", 20, 1, 0, "2025-01-06T08:00"), ("c2", 30, 2, 40, "2025-01-06T09:00")],
    )
    conn.commit()
    conn.close()
    source = {
        "url": f"sqlite:///{source_db}",
        "query": "SELECT charge AS charge_id, sticks AS n_sticks, crack, bend, at FROM qc",
        "watermark": "at",
        "kind": "defects",
    }
    report = ingest_sql(store, tiny_config, source)
    assert report.stored == 1 and dict(report.quarantined) == {"counts_exceed_n_sticks": 1}
    assert store.read_defect_counts(tiny_config.defect_types).loc["c1"].tolist() == [20, 1, 0]


def test_unknown_sql_source_name_is_an_error(store, tiny_config):
    with pytest.raises(IngestError, match="unknown SQL source 'mes'"):
        ingest_sql(store, tiny_config, "mes")
