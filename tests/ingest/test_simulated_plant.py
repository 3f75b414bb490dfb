"""End to end: what the plant simulator writes (long CSV, wide Parquet) ingests completely,
with nothing quarantined, and reads back as exactly the simulated readings and counts."""

import pandas as pd
import pytest

from qcllp.ingest import ingest_defect_counts, ingest_measurements
from qcllp.plant.config import load_plant_config
from qcllp.plant.simulate import simulate_plant, write_simulation
from qcllp.store import Store

EXAMPLE = "plant_config/example.yaml"


@pytest.fixture(scope="module")
def simulated():
    config = load_plant_config(EXAMPLE)
    return config, simulate_plant(config, 4, random_state=7, missing_rate=0.05)


def _as_stored(readings: pd.DataFrame) -> pd.DataFrame:
    out = readings.astype({c: "str" for c in ("charge_id", "stick_id", "station", "sensor")})
    out["timestamp"] = out["timestamp"].dt.tz_convert("UTC").astype("datetime64[ns, UTC]")
    out = out.sort_values(["station", "charge_id", "stick_id", "sensor", "timestamp"])
    return out[["charge_id", "stick_id", "station", "timestamp", "sensor", "value"]].reset_index(
        drop=True
    )


@pytest.mark.parametrize(("fmt", "layout"), [("csv", "long"), ("parquet", "wide")])
def test_simulated_plant_ingests_completely_and_reads_back_exactly(
    fmt, layout, simulated, tmp_path
):
    config, sim = simulated
    paths = write_simulation(sim, tmp_path, format=fmt, layout=layout)
    store = Store.open(f"sqlite:///{tmp_path / 'plant.sqlite'}")
    readings = ingest_measurements(store, config, tmp_path / "measurements")
    counts = ingest_defect_counts(store, config, paths["defects"])
    assert readings.quarantined_total == 0 and readings.stored == len(sim.readings)
    assert counts.quarantined_total == 0 and counts.stored == len(sim.defect_counts)
    pd.testing.assert_frame_equal(
        store.read_readings(), _as_stored(sim.readings), check_exact=False, rtol=1e-12
    )
    expected = sim.defect_counts.astype({"charge_id": "str"}).set_index("charge_id")
    pd.testing.assert_frame_equal(
        store.read_defect_counts(config.defect_types),
        expected.astype("int64").sort_index(),
        check_names=False,
    )
    store.close()
