"""``qcllp evaluate``: the training procedure of ``train``, decided on held-out charges, scored
against the target's truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from qcllp.store import Store
from qcllp.training.station_evaluation import evaluate_station, read_stick_truth, target_truth
from qcllp.training.train import TrainingError, labeled_data


@pytest.fixture(scope="module")
def truth_file(history_plant):
    return history_plant.folder / "history" / "truth" / "truth.csv"


def test_the_truth_follows_the_target(truth_file):
    defect = read_stick_truth(truth_file)
    crack = target_truth(defect, "crack")
    anyd = target_truth(defect, "defective")
    assert crack.sum() == (defect == "crack").sum() < anyd.sum() == (defect != "ok").sum()
    assert target_truth(defect, "multiclass").equals(anyd)
    assert np.isnan(target_truth(pd.Series([None, "ok"], dtype=object), "crack").iloc[0])


def test_a_defect_type_target_is_trained_and_scored_as_that_type(history_plant, truth_file):
    config = history_plant.config
    with Store.open(history_plant.url, create=False) as store:
        result = evaluate_station(
            store, config, "cooling", target="crack", folds=3, truth_path=truth_file
        )
        data = labeled_data(store, config, "cooling", target="crack")
    assert (result.target, len(result.thresholds)) == ("crack", 3)
    metrics = result.evaluation.metrics
    truth = target_truth(read_stick_truth(truth_file), "crack").reindex(data.features.X.index)
    expected = roc_auc_score(truth.to_numpy(), result.evaluation.probability)
    assert metrics["roc_auc"] == pytest.approx(expected)  # against crack truth, not any defect
    assert np.isfinite(metrics["realized_saving_per_1000"])
    # the per-charge evidence compares with the crack shares, not the any-defect shares
    np.testing.assert_allclose(
        result.evaluation.per_charge["actual_share"], data.proportions.sort_index().to_numpy()
    )
    # held-out thresholds are the ones training chose, not 0.5
    assert all(t != 0.5 for t in result.thresholds)


def test_a_missing_truth_file_is_a_one_line_user_error(history_plant, tmp_path):
    with (
        Store.open(history_plant.url, create=False) as store,
        pytest.raises(TrainingError, match="cannot read the truth file"),
    ):
        evaluate_station(
            store, history_plant.config, "cooling", folds=2, truth_path=tmp_path / "none.csv"
        )
