"""Inspections in chunks, on both engines: a stick repeated in a later chunk of the same input
is compared with the first (stored by this batch already), and a SIGKILL in the middle of a
file leaves nothing of it stored; the rerun stores every inspection once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pandas as pd

from qcllp.ingest import ingest_inspections, ingest_measurements
from qcllp.store import Store
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import accounted, quarantine_reasons
from tests.ingest.inspection_helpers import inspections, measured_plant

N_STICKS = 3_000
CHUNK = 500


def _parquet(path, rows: list[tuple]) -> None:  # noqa: ANN001
    columns = ["charge_id", "stick_id", "station", "result"]
    pd.DataFrame(rows, columns=columns).to_parquet(path, index=False)


def test_a_stick_repeated_in_a_later_chunk_is_compared_with_the_first(store, tiny_config, tmp_path):
    measured_plant(store, tiny_config, tmp_path)
    rows = [("c1", s, "furnace", r) for s, r in [("s1", "crack"), ("s2", "ok"), ("s3", "ok")]]
    rows += [("c1", "s1", "furnace", "bend"), ("c1", "s1", "furnace", "crack")]
    _parquet(tmp_path / "i.parquet", rows)
    report = ingest_inspections(store, tiny_config, tmp_path / "i.parquet", chunk_rows=2)
    assert (report.stored, report.duplicates, dict(report.quarantined)) == (
        3,
        1,
        {"conflicting_inspection": 1},
    )
    assert accounted(report)
    [(_, detail)] = quarantine_reasons(store)
    assert "was given earlier in this input with result 'crack'; this row: 'bend'" in detail


CHILD = textwrap.dedent(
    """
    import json, sys, time
    from qcllp.ingest import ingest_inspections
    from qcllp.plant.config import parse_plant_config
    from qcllp.store import Store
    url, path, chunk, plant = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    config = parse_plant_config(json.loads(plant))
    def tick(done):
        print(done, flush=True)
        time.sleep(0.3)  # give the parent time to kill us in the middle of the batch
    ingest_inspections(Store.open(url), config, path, chunk_rows=chunk, progress=tick)
    print("finished", flush=True)
    """
)


def test_sigkill_mid_file_stores_no_inspection_and_the_rerun_stores_each_once(
    store_url, tiny_config, tmp_path
):
    sticks = [f"s{i}" for i in range(N_STICKS)]
    readings = pd.DataFrame(
        {
            "charge_id": "c1",
            "stick_id": sticks,
            "station": "furnace",
            "timestamp": "2025-01-06T06:00:00Z",
            "sensor": "temperature",
            "value": 1100.0,
        }
    )
    readings.to_csv(tmp_path / "r.csv", index=False)
    _parquet(tmp_path / "i.parquet", [("c1", s, "furnace", "ok") for s in sticks])
    with Store.open(store_url) as store:
        ingest_measurements(store, tiny_config, tmp_path / "r.csv")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            store_url,
            str(tmp_path / "i.parquet"),
            str(CHUNK),
            json.dumps(TINY_PLANT),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    progressed = [int(child.stdout.readline()) for _ in range(2)]  # two chunks stored
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL and 0 < progressed[-1] < N_STICKS
    with Store.open(store_url) as store:
        batches = "SELECT status FROM ingestion_batches WHERE kind = 'inspections' ORDER BY id"
        assert inspections(store) == [] and store.execute_sql(batches) == [("running",)]
        report = ingest_inspections(store, tiny_config, tmp_path / "i.parquet", chunk_rows=CHUNK)
        assert (report.stored, report.duplicates) == (N_STICKS, 0)
        assert len(inspections(store)) == N_STICKS
        assert store.execute_sql(batches) == [("abandoned",), ("done",)]
