"""Inspections marked against flags a real scorer wrote: the cooling station of the history
plant scored by a trained model (it passes the fresh sticks), then by a copy that locks out
every stick (it locks out two later charges); inspections of both kinds, and of a history
stick no model decided, get the flag's id and the audit mark they call for (SQLite)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from qcllp.ingest import ingest_inspections, ingest_measurements
from qcllp.plant.simulate import simulate_plant, write_simulation
from qcllp.scoring.step import flags_frame, score_station
from qcllp.station.registry import promote
from qcllp.store import Store
from tests.support.eager_model import promote_locking_all


def test_lock_outs_and_passes_of_a_real_scorer_mark_the_inspections(history_plant, tmp_path):
    config = replace(history_plant.config, path=tmp_path / "plant.yaml")
    with Store.open(history_plant.copy_to(tmp_path)) as store:
        trained = history_plant.record_trained(store, config, "cooling")
        promote(store, trained)
        score_station(store, config, "cooling")
        promote_locking_all(store, config, "cooling", trained)
        later = simulate_plant(
            config,
            2,
            random_state=5,
            start=history_plant.fresh.readings["timestamp"].max(),
            first_charge=30,
        )
        write_simulation(later, tmp_path / "later")
        ingest_measurements(store, config, tmp_path / "later" / "measurements")
        score_station(store, config, "cooling")
        flags = flags_frame(store, "cooling").set_index(["charge_id", "stick_id"])
        locked = flags[flags["decision"] == "lock_out"].index[:3].tolist()
        passed = flags[flags["decision"] == "pass"].index[:2].tolist()
        history = history_plant.history.truth[["charge_id", "stick_id"]].iloc[0]
        unflagged = [(history["charge_id"], history["stick_id"])]
        assert len(locked) == 3 and len(passed) == 2 and unflagged[0] not in flags.index
        rows = [(c, s, "cooling", "crack") for c, s in locked + passed + unflagged]
        path = tmp_path / "inspections.csv"
        pd.DataFrame(rows, columns=["charge_id", "stick_id", "station", "result"]).to_csv(
            path, index=False
        )
        report = ingest_inspections(store, config, path)
        assert (report.stored, report.audit_samples) == (6, 3)
        stored = store.execute_sql("SELECT charge_id, stick_id, flag_id, audit FROM inspections")
        marks = {(c, s): (f, bool(a)) for c, s, f, a in stored}
        ids = {
            (c, s): i
            for i, c, s in store.execute_sql(
                "SELECT id, charge_id, stick_id FROM flags WHERE station = 'cooling'"
            )
        }
        assert {k: marks[k] for k in locked} == {k: (ids[k], False) for k in locked}
        assert {k: marks[k] for k in passed} == {k: (ids[k], True) for k in passed}
        assert marks[unflagged[0]] == (None, True)
