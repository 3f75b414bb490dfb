"""A tiny plant's sticks with readings and flags, for the inspection tests.

Sticks of charge ``c1``: ``s1``..``s4`` measured at the furnace, ``s5`` at rolling only. Flags
at the furnace (inserted through the store, under a registered model row): ``s1`` locked out,
``s2`` passed, ``s3`` unscorable, ``s4`` not scored yet.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import insert

from qcllp.ingest import ingest_measurements
from qcllp.plant.config import PlantConfig
from qcllp.store import Flag, Model, Store
from tests.ingest.helpers import write_csv

INSPECTION_HEADER = "charge_id,stick_id,station,result,inspected_at\n"
DECISIONS = {"s1": "lock_out", "s2": "pass", "s3": "unscorable"}


def insert_model_row(conn, now: datetime) -> int:
    """A registry row of an active furnace model (no artifact): what flags refer to."""
    return conn.execute(
        insert(Model.__table__).values(
            station="furnace", method="invcal", target="any_defect", params={},
            metrics={}, features=[], artifact_path="-", sha256="0" * 64,
            status="active", n_charges=1, n_sticks=1, qcllp_version="test",
            created_at=now,
        )
    ).inserted_primary_key[0]  # fmt: skip


def measured_plant(store: Store, config: PlantConfig, folder: Path) -> dict[str, int]:
    """Readings of the sticks above and the furnace flags; the flag id of each flagged stick."""
    rows = "".join(
        f"c1,s{i},furnace,2025-01-06T06:0{i}:00Z,temperature,1100\n" for i in range(1, 5)
    )
    rows += "c1,s5,rolling,2025-01-06T06:09:00Z,force,9000\n"
    ingest_measurements(store, config, write_csv(folder, "readings.csv", rows))
    now = datetime.now(UTC)
    with store.engine.begin() as conn:
        model_id = insert_model_row(conn, now)
        ids = {}
        for stick, decision in DECISIONS.items():
            ids[stick] = conn.execute(
                insert(Flag.__table__).values(
                    station="furnace", charge_id="c1", stick_id=stick, model_id=model_id,
                    probability=None if decision == "unscorable" else 0.5,
                    flagged=decision == "lock_out", decision=decision, threshold=0.4,
                    scored_at=now,
                )
            ).inserted_primary_key[0]  # fmt: skip
    return ids


def inspections(store: Store) -> list[tuple]:
    """(stick, station, result, flag_id, audit, inspected_at) of every stored inspection."""
    rows = store.execute_sql(
        "SELECT stick_id, station, result, flag_id, audit, inspected_at FROM inspections "
        "ORDER BY stick_id, station"
    )
    return [(s, st, r, f, bool(a), t) for s, st, r, f, a, t in rows]


def write_inspections(folder: Path, name: str, body: str, header: str = INSPECTION_HEADER):
    """An inspection CSV file in ``folder``."""
    return write_csv(folder, name, body, header=header)
