"""A small plant for the lock-out bay tests: the tiny two-station plant (defect types crack
and bend) on SQLite, with readings of the sticks below and their flags inserted through the
store under a registered model row (as the inspection tests do).

At the furnace, in the order the scorer decided them (minutes before now):

=========  =====  ==========  =====  =====================================================
charge     stick  decision    p      reason
=========  =====  ==========  =====  =====================================================
C-1041     07     lock_out    0.91   (none: above the threshold)
C-1041     12     pass        0.10
C-1041     15     inspect     0.47   audit: p 0.47 in the audit band ...
C-1042     03     lock_out    0.78
C-1042     09     unscorable         no reading from sensor(s) oxygen at furnace
C-1042     11     lock_out    0.97
=========  =====  ==========  =====  =====================================================

and one lock-out at rolling (C-1042/05). Awaiting at the furnace, newest first:
C-1042/11, C-1042/03, C-1041/15, C-1041/07.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from sqlalchemy import insert

from qcllp.ingest import ingest_measurements
from qcllp.plant.config import PlantConfig, load_plant_config
from qcllp.store import Flag, Store
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import write_csv
from tests.ingest.inspection_helpers import insert_model_row

AUDIT_REASON = "audit: p 0.47 in the audit band [0.40, 0.62) below the threshold (break-even 0.38)"
FLAGS = [  # station, charge, stick, decision, probability, reason
    ("furnace", "C-1041", "07", "lock_out", 0.91, None),
    ("furnace", "C-1041", "12", "pass", 0.10, None),
    ("furnace", "C-1041", "15", "inspect", 0.47, AUDIT_REASON),
    ("furnace", "C-1042", "03", "lock_out", 0.78, None),
    ("furnace", "C-1042", "09", "unscorable", None, "no reading from sensor(s) oxygen at furnace"),
    ("furnace", "C-1042", "11", "lock_out", 0.97, None),
    ("rolling", "C-1042", "05", "lock_out", 0.88, None),
]
AWAITING_AT_FURNACE = [("C-1042", "11"), ("C-1042", "03"), ("C-1041", "15"), ("C-1041", "07")]
THRESHOLD = 0.62
TOKEN = "bay-token-for-the-tests-0123456789"


def make_bay_plant(folder: Path, database_url: str | None = None) -> PlantConfig:
    """The plant's YAML (``plant.yaml``) and its database (an SQLite file in ``folder``
    unless ``database_url`` names another), readings and flags stored; its config."""
    mapping = copy.deepcopy(TINY_PLANT)
    if database_url is not None:
        mapping["database_url"] = database_url
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    config = load_plant_config(path)
    readings = "".join(
        f"{charge},{stick},{station},2025-01-06T06:{i:02d}:00Z,"
        + ("temperature,1100\n" if station == "furnace" else "force,9000\n")
        for i, (station, charge, stick, *_) in enumerate(FLAGS)
    )
    now = datetime.now(UTC).replace(microsecond=0)
    with Store.open(config.database_url) as store:
        ingest_measurements(store, config, write_csv(folder, "readings.csv", readings))
        with store.engine.begin() as conn:
            model_id = insert_model_row(conn, now)
            for i, (station, charge, stick, decision, p, reason) in enumerate(FLAGS):
                conn.execute(
                    insert(Flag.__table__).values(
                        station=station, charge_id=charge, stick_id=stick, model_id=model_id,
                        probability=p, flagged=decision == "lock_out", decision=decision,
                        reason=reason, threshold=THRESHOLD,
                        arrived_at=now - timedelta(minutes=30 - 3 * i), scored_at=now,
                    )
                )  # fmt: skip
    return config
