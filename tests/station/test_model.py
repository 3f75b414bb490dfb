"""The fitted station model: features in training order, imputation as at training time,
recalibration, the lock-out decision, and the identity checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qcllp.learn.baselines import MeanMap
from qcllp.learn.calibration import BagCalibrator
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.station.model import ModelMismatchError, StationModel, logit

COLUMNS = ["a.x.mean", "a.y.mean", "a.z.mean"]


@pytest.fixture(scope="module")
def fitted():
    X, y = make_gaussian_mixture(200, 3, random_state=1)
    bags, shares = bags_from_labels(y, 20, random_state=1)
    frame = pd.DataFrame(X, columns=COLUMNS)
    frame.index = pd.MultiIndex.from_arrays(
        [np.asarray(bags).astype(str), np.arange(200).astype(str)], names=["charge_id", "stick_id"]
    )
    return MeanMap().fit(frame.to_numpy(), bags, shares), frame


def _model(estimator, **changes) -> StationModel:
    fields = dict(
        station="cooling",
        method="meanmap",
        target="defective",
        estimator=estimator,
        features=tuple(COLUMNS),
        imputation=dict.fromkeys(COLUMNS, 0.5),
        threshold=0.5,
    )
    return StationModel(**{**fields, **changes})


def test_decisions_follow_the_training_column_order_and_fill_missing_values(fitted):
    estimator, X = fitted
    model = _model(estimator)
    shuffled = X[list(reversed(COLUMNS))].copy()
    shuffled.iloc[0, 0] = np.nan
    decided = model.decide(shuffled)
    filled = X.copy()
    filled.iloc[0, 2] = 0.5
    np.testing.assert_allclose(decided["probability"], estimator.predict_proba(filled)[:, 1])
    assert list(decided.columns) == ["charge_id", "stick_id", "probability", "flagged"]
    np.testing.assert_array_equal(decided["flagged"], decided["probability"] >= 0.5)


def test_the_recalibration_is_applied_on_the_logit_scale(fitted):
    estimator, X = fitted
    raw = estimator.predict_proba(X.to_numpy())[:, 1]
    calibrator = BagCalibrator().fit(logit(raw), np.arange(len(raw)) // 20, np.full(10, 0.1))
    model = _model(estimator, recalibration=calibrator)
    np.testing.assert_allclose(model.failure_probability(X), calibrator.predict(logit(raw)))


def test_a_threshold_above_one_locks_out_nothing(fitted):
    estimator, X = fitted
    assert not _model(estimator, threshold=1.0 + 1e-9).decide(X)["flagged"].any()


def test_an_empty_frame_gives_no_decisions(fitted):
    estimator, X = fitted
    assert _model(estimator).decide(X.iloc[:0]).empty


def test_the_model_refuses_another_station_target_or_feature_list(fitted):
    model = _model(fitted[0])
    model.check_matches(station="cooling", target="defective", features=COLUMNS)
    with pytest.raises(ModelMismatchError) as info:
        model.check_matches(station="rolling", target="crack", features=COLUMNS[:2])
    message = str(info.value)
    assert "station 'cooling', not 'rolling'" in message and "target is 'defective'" in message
    assert "3 features differ from the 2 expected" in message
