"""The writer's last line of defence: inserting a key that is already stored stores nothing
and leaves the batch's transaction usable (on PostgreSQL the COPY falls back to ON CONFLICT)."""

import numpy as np

from qcllp.ingest import ingest_measurements
from qcllp.ingest.writer import ReadingWriter
from tests.ingest.helpers import GOOD, stored_readings, write_csv


def test_inserting_an_already_stored_key_stores_nothing_and_keeps_the_batch(
    store, tiny_config, tmp_path
):
    ingest_measurements(store, tiny_config, write_csv(tmp_path, "m.csv", GOOD))
    [(series_id, ts_us, batch_id)] = store.execute_sql(
        "SELECT series_id, ts_us, batch_id FROM readings"
    )
    with store.write() as conn:
        writer = ReadingWriter(conn, batch_id)
        stored = writer.insert_readings(
            np.array([series_id, series_id]), np.array([ts_us, ts_us + 1]), np.array([1.0, 2.0])
        )
        assert stored == 1  # only the new key; the transaction is still alive
        conn.exec_driver_sql("SELECT 1")
    assert stored_readings(store) == 2
    assert store.read_readings()["value"].tolist() == [1100.0, 2.0]
