"""Atomic batches: a failure or a SIGKILL in the middle of a file leaves nothing of it stored,
and a rerun completes it with exactly the right rows."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from qcllp.ingest import ingest_measurements
from tests.conftest import TINY_PLANT
from tests.ingest.helpers import stored_readings

N_ROWS = 12_000
CHUNK = 1_500


def _big_file(path) -> None:  # noqa: ANN001
    i = np.arange(N_ROWS)
    ts = pd.Timestamp("2025-01-06T06:00:00Z") + pd.to_timedelta(i, unit="s")
    pd.DataFrame(
        {
            "charge_id": "c" + pd.Series(i // 400).astype(str),
            "stick_id": "s" + pd.Series((i // 10) % 40).astype(str),
            "station": "furnace",
            "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "sensor": "temperature",
            "value": 1000 + (i % 200),
        }
    ).to_csv(path, index=False)


def _batches(store):  # noqa: ANN001, ANN202
    return store.execute_sql("SELECT status FROM ingestion_batches ORDER BY id")


def test_failure_mid_file_stores_nothing_and_rerun_completes(store, tiny_config, tmp_path):
    path = tmp_path / "big.csv"
    _big_file(path)

    def fail_after_two_chunks(done: int) -> None:
        if done >= 2 * CHUNK:
            raise RuntimeError("line controller went away")

    with pytest.raises(RuntimeError, match="went away"):
        ingest_measurements(
            store, tiny_config, path, chunk_rows=CHUNK, progress=fail_after_two_chunks
        )
    assert stored_readings(store) == 0 and store.read_sticks().empty
    [(status, message)] = store.execute_sql("SELECT status, message FROM ingestion_batches")
    assert status == "failed" and "went away" in message
    report = ingest_measurements(store, tiny_config, path, chunk_rows=CHUNK)
    assert report.stored == N_ROWS and stored_readings(store) == N_ROWS


CHILD = textwrap.dedent(
    """
    import json, sys, time
    from qcllp.ingest import ingest_measurements
    from qcllp.plant.config import parse_plant_config
    from qcllp.store import Store
    url, path, chunk, plant = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    config = parse_plant_config(json.loads(plant))
    def tick(done):
        print(done, flush=True)
        time.sleep(0.3)  # give the parent time to kill us in the middle of the batch
    ingest_measurements(Store.open(url), config, path, chunk_rows=chunk, progress=tick)
    print("finished", flush=True)
    """
)


def test_sigkill_mid_file_leaves_no_partial_batch_and_rerun_completes(
    store_url, tiny_config, tmp_path
):
    from qcllp.store import Store

    path = tmp_path / "big.csv"
    _big_file(path)
    Store.open(store_url).close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, store_url, str(path), str(CHUNK), json.dumps(TINY_PLANT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    progressed = [int(child.stdout.readline()) for _ in range(3)]  # three chunks processed
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL and 0 < progressed[-1] < N_ROWS
    store = Store.open(store_url)
    assert stored_readings(store) == 0 and store.read_sticks().empty
    assert _batches(store) == [("running",)]  # the dead run is visible, its data is not
    report = ingest_measurements(store, tiny_config, path, chunk_rows=CHUNK)
    assert report.stored == N_ROWS and report.duplicates == 0
    assert stored_readings(store) == N_ROWS
    assert len(store.read_sticks()) == N_ROWS // 10
    assert _batches(store) == [("abandoned",), ("done",)]
    store.close()
