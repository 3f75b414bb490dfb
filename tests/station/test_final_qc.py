"""Training bags after the line acted on flags: a charge's bag holds the sticks final QC
counted, not those locked out (they never reached it), unless QC counted them all."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from qcllp.ingest import ingest_defect_counts
from qcllp.retraining.promotion import labeled_counts, window_data
from qcllp.scoring.step import flags_frame, score_station
from qcllp.store import Store
from qcllp.training.train import labeled_data, train_station
from tests.support.eager_model import promote_locking_all


def test_a_bag_holds_the_sticks_final_qc_counted(history_plant, tmp_path):
    config = replace(
        history_plant.config,
        scorer=replace(history_plant.config.scorer, guard_min_sticks=30),
    )
    store = Store.open(history_plant.copy_to(tmp_path))
    trained = train_station(store, config, "cooling").model_id
    promote_locking_all(store, config, "cooling", trained, rate_bound=0.05)
    score_station(store, config, "cooling")  # 29 sticks locked out, then the guard stops it
    flags = flags_frame(store, "cooling")
    total = flags.groupby("charge_id").size()
    passed = flags[flags["decision"] == "pass"].groupby("charge_id").size()
    locked = flags[flags["decision"] == "lock_out"].groupby("charge_id").size()
    acted = [c for c in total.index if locked.get(c, 0) > 0 and passed.get(c, 0) > 0]
    assert acted, "a charge with both lock-outs and passes"
    shadow = [c for c in total.index if c not in acted][:1] or acted[-1:]
    if shadow == acted[-1:]:
        acted = acted[:-1]
    n_sticks = pd.concat([passed.reindex(acted), total.reindex(shadow)])
    qc = pd.DataFrame({"charge_id": n_sticks.index, "n_sticks": n_sticks.to_numpy()})
    qc["crack"], qc["bend"], qc["scale"] = 1, 0, 0
    qc.to_csv(tmp_path / "qc.csv", index=False)
    ingest_defect_counts(store, config, tmp_path / "qc.csv")

    data = labeled_data(store, config, "cooling")
    rows = data.features.bags.value_counts()
    for charge in acted:  # the line acted: the locked-out sticks left the bag
        assert rows[charge] == passed[charge] < total[charge]
        kept = data.features.X.loc[charge].index
        assert set(kept) == set(
            flags[(flags["charge_id"] == charge) & (flags["decision"] == "pass")]["stick_id"]
        )
    for charge in shadow:  # QC counted every stick: the bag stays whole
        assert rows[charge] == total[charge]
    history = history_plant.history.defect_counts.set_index("charge_id")["n_sticks"]
    assert (rows.reindex(history.index.astype(str)) == history.to_numpy()).all()
    # the promotion gate and the drift watch see the same bags
    features, shares = window_data(
        store, config, "cooling", labeled_counts(store, config, n_sticks.index)
    )
    assert features.bags.value_counts().reindex(n_sticks.index).tolist() == n_sticks.tolist()
    store.close()
