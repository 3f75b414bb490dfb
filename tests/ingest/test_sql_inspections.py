"""Inspections from a SQL source (``kind: inspections``) in a real second database (a
PostgreSQL database of the test server, the MES), stored on both engines: read incrementally by
the watermark, columns mapped, a conflicting later verdict quarantined, the audit mark set."""

from __future__ import annotations

import uuid

import pandas as pd
from sqlalchemy import create_engine, text

from qcllp.ingest import ingest_from_config, ingest_sql
from qcllp.plant.config import parse_plant_config
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import accounted, quarantine_reasons
from tests.ingest.inspection_helpers import inspections, measured_plant


def _mes(pg_server) -> str:
    """A fresh MES database with a table of verdicts; its SQLAlchemy URL."""
    url = pg_server.create_database(f"mes_{uuid.uuid4().hex[:12]}")
    _run(
        url,
        "CREATE TABLE verdicts (id serial PRIMARY KEY, charge text, stick text, station text, "
        "verdict text, seen timestamptz)",
    )
    return url


def _run(url: str, sql: str, rows: list[dict] | None = None) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(sql), rows or {})
    engine.dispose()


def _add(url: str, rows: list[tuple]) -> None:
    _run(
        url,
        "INSERT INTO verdicts (charge, stick, station, verdict, seen) VALUES (:c, :s, :st, :v, :t)",
        [dict(zip(["c", "s", "st", "v", "t"], row, strict=True)) for row in rows],
    )


def test_inspections_are_pulled_from_a_sql_source_by_watermark(
    store, tiny_config, tmp_path, pg_server
):
    flags = measured_plant(store, tiny_config, tmp_path)
    url = _mes(pg_server)
    _add(url, [("c1", "s1", "furnace", "crack", "2025-01-06T07:00:00Z")])
    plant = dict(TINY_PLANT)
    plant["connectors"] = {
        "sql": {
            "mes": {
                "url": url,
                "table": "verdicts",
                "watermark": "id",
                "kind": "inspections",
                "columns": {
                    "charge_id": "charge",
                    "stick_id": "stick",
                    "result": "verdict",
                    "inspected_at": "seen",
                },
            }
        }
    }
    config = parse_plant_config(plant, source="<test>", base_dir=tmp_path)
    first = ingest_from_config(store, config)["sql:mes"]
    assert (first.kind, first.stored, first.audit_samples) == ("inspections", 1, 0)
    _add(url, [("c1", "s2", "furnace", "ok", None), ("c1", "s1", "furnace", "ok", None)])
    second = ingest_sql(store, config, "mes")
    # the boundary row is read again (a duplicate); s1's later verdict conflicts with the stored
    assert (second.stored, second.duplicates, dict(second.quarantined)) == (
        1,
        1,
        {"conflicting_inspection": 1},
    )
    assert accounted(second) and second.audit_samples == 1
    assert [(r[0], r[2], r[3], r[4]) for r in inspections(store)] == [
        ("s1", "crack", flags["s1"], False),
        ("s2", "ok", flags["s2"], True),
    ]
    seen = pd.Timestamp(inspections(store)[0][5])
    assert (seen.tz_localize(None) if seen.tz else seen) == pd.Timestamp("2025-01-06T07:00:00")
    assert (
        "is stored (batch 2) with result 'crack'; this row: 'ok'" in quarantine_reasons(store)[0][1]
    )
    assert store.execute_sql("SELECT value FROM watermarks")[0][0].endswith("3}")
