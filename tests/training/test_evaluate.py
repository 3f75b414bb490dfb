"""Charge-grouped evaluation: no charge split across folds, per-charge and per-stick metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator

from qcllp.learn import bag_error_from_labels
from qcllp.learn.baselines import MeanMap
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.training.evaluate import cross_validate_charges, score_probabilities


class ChargeMemory(BaseEstimator):
    """Predicts, per row, the share of its charge when it trained on that charge, else 0.5.

    Out of fold it can only be right if a charge leaked from the test fold into training.
    """

    def fit(self, X, bags, proportions):
        self.classes_ = np.array([0, 1])
        self.seen_ = proportions.copy()
        self.bag_of_row_ = dict(zip(X.index, bags, strict=True))
        return self

    def predict_proba(self, X):
        shares = np.array(
            [self.seen_.get(self.bag_of_row_.get(i, None), 0.5) for i in X.index], dtype=float
        )
        return np.column_stack([1 - shares, shares])


def _problem(n=600, bag_size=30, seed=0):
    X, y = make_gaussian_mixture(n, 4, separation=2.0, positive_share=0.3, random_state=seed)
    bags, shares = bags_from_labels(y, bag_size, random_state=seed)
    charges = np.array([f"CH{b:04d}" for b in bags], dtype=object)
    shares.index = [f"CH{b:04d}" for b in shares.index]
    return pd.DataFrame(X), charges, shares, y


def test_no_charge_is_seen_by_the_model_that_scores_it():
    X, charges, shares, _ = _problem()
    ev = cross_validate_charges(ChargeMemory(), X, charges, shares, n_splits=4, random_state=0)
    np.testing.assert_array_equal(ev.probability, 0.5)


def test_out_of_fold_meanmap_ranks_sticks_and_matches_charge_shares():
    X, charges, shares, y = _problem()
    ev = cross_validate_charges(MeanMap(), X, charges, shares, truth=y, random_state=0)
    assert ev.metrics["roc_auc"] > 0.9
    assert ev.metrics["bag_error"] < 0.15
    assert ev.metrics["sticks_with_truth"] == len(y)
    assert list(ev.per_charge.index) == sorted(shares.index)


def test_bag_error_is_eq23_of_the_most_probable_labels():
    rng = np.random.default_rng(3)
    charges = np.repeat(["a", "b", "c"], [5, 7, 4])
    p = rng.uniform(size=16)
    shares = pd.Series({"a": 0.2, "b": 0.5, "c": 0.0})
    ev = score_probabilities(p, charges, shares)
    want = bag_error_from_labels(charges, shares, (p >= 0.5).astype(int))
    assert ev.metrics["bag_error"] == pytest.approx(want)
    row = ev.per_charge.loc["b"]
    assert row["n_sticks"] == 7
    assert row["predicted_share"] == pytest.approx(p[5:12].mean())
    assert row["actual_share"] == 0.5


def test_lockout_threshold_moves_precision_and_recall_but_not_accuracy():
    charges = np.repeat(["a", "b"], 4)
    p = np.array([0.95, 0.7, 0.6, 0.1, 0.9, 0.2, 0.1, 0.05])
    truth = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    shares = pd.Series({"a": 0.5, "b": 0.25})
    loose = score_probabilities(p, charges, shares, truth=truth, threshold=0.5).metrics
    strict = score_probabilities(p, charges, shares, truth=truth, threshold=0.8).metrics
    assert loose["stick_accuracy"] == strict["stick_accuracy"] == pytest.approx(7 / 8)
    assert (loose["lockout_precision"], loose["lockout_recall"]) == (pytest.approx(3 / 4), 1.0)
    assert (strict["lockout_precision"], strict["lockout_recall"]) == (1.0, pytest.approx(2 / 3))
    assert strict["lockout_rate"] == pytest.approx(2 / 8)
    assert loose["roc_auc"] == strict["roc_auc"] == 1.0


def test_sticks_without_truth_are_left_out_of_stick_metrics():
    charges = np.repeat(["a"], 4)
    p = np.array([0.9, 0.8, 0.1, 0.2])
    truth = np.array([1.0, np.nan, 0.0, np.nan])
    ev = score_probabilities(p, charges, pd.Series({"a": 0.5}), truth=truth)
    assert ev.metrics["sticks_with_truth"] == 2
    assert ev.metrics["stick_accuracy"] == 1.0


def test_a_charge_without_a_share_is_named():
    with pytest.raises(ValueError, match="CH9"):
        score_probabilities(np.ones(2), np.array(["CH1", "CH9"]), pd.Series({"CH1": 0.5}))
    with pytest.raises(ValueError, match="CH9"):
        cross_validate_charges(
            MeanMap(),
            pd.DataFrame(np.ones((2, 1))),
            np.array(["CH1", "CH9"]),
            pd.Series({"CH1": 0.5}),
        )
