"""ProportionBoosting: DLLP's bag loss on boosted trees -- gradient, XOR, bags, the contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from joblib import parallel_config
from scipy.special import logit
from sklearn.metrics import roc_auc_score

from qcllp.learn.model_selection import BagGridSearchCV
from qcllp.learn.synthetic import bags_from_labels
from qcllp.learn.tabular.proportion_boosting import (
    ProportionBoosting,
    QuantileBinner,
    proportion_gradient,
    proportion_loss,
)

from .psvm_data import toy, xor


@pytest.fixture(scope="module")
def xor_fit():
    X, bags, shares, y = xor()
    return ProportionBoosting(random_state=0).fit(X, bags, shares), (X, bags, shares, y)


def _codes(bags, shares):
    codes = shares.index.get_indexer(bags)
    return codes, np.bincount(codes).astype(float)


def test_gradient_is_the_derivative_of_the_bag_weighted_loss():
    rng = np.random.RandomState(0)
    codes = rng.randint(0, 4, 40)
    shares = np.array([0.0, 0.3, 0.7, 1.0])
    sizes = np.bincount(codes, minlength=4).astype(float)
    f = rng.standard_normal(40)
    grad = proportion_gradient(f, codes, shares, sizes)[0]
    eps = 1e-6
    bumps = np.eye(40) * eps
    numeric = [
        (
            proportion_loss(f + e, codes, shares, sizes)
            - proportion_loss(f - e, codes, shares, sizes)
        )
        * sizes.sum()
        / (2 * eps)
        for e in bumps
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_learns_the_xor_interaction_on_training_and_fresh_rows(xor_fit):
    # measured: AUC 0.999 on the training rows, 0.999 on xor(seed=1)
    model, (X, _, _, y) = xor_fit
    assert roc_auc_score(y, model.predict_proba(X)[:, 1]) >= 0.9
    X_fresh, _, _, y_fresh = xor(seed=1)
    assert roc_auc_score(y_fresh, model.predict_proba(X_fresh)[:, 1]) >= 0.9


def test_mean_probability_per_training_bag_matches_its_share(xor_fit):
    # measured: mean |q_b - p_b| 0.010, largest 0.06; bag_error of the hard labels 0.011
    model, (X, bags, shares, _) = xor_fit
    q = pd.Series(model.predict_proba(X)[:, 1]).groupby(bags).mean()
    gap = (q - shares).abs()
    assert gap.mean() <= 0.03
    assert gap.max() <= 0.15
    assert model.bag_error(X, bags, shares) <= 0.05


def test_training_loss_falls_to_near_its_floor(xor_fit):
    model, (X, bags, shares, _) = xor_fit
    codes, sizes = _codes(bags, shares)
    p = shares.to_numpy()
    floor = proportion_loss(logit(np.clip(p, 1e-12, 1 - 1e-12))[codes], codes, p, sizes)
    history = model.train_loss_[0]
    assert history[-1] < history[0]
    assert history[-1] - floor < 0.1 * (history[0] - floor)


def test_toy_set_is_not_recovered_because_bag_identity_also_minimises_the_loss():
    # Each of the toy set's four clusters lies in one bag, so predicting every bag's share on
    # its own clusters matches both shares exactly: the loss reaches its floor (the entropy of
    # the shares), as the true labels do, and the accuracy stays near chance (measured 0.55).
    X, bags, shares, y = toy()
    model = ProportionBoosting(random_state=0).fit(X, bags, shares)
    codes, sizes = _codes(bags, shares)
    p = shares.to_numpy()
    truth = proportion_loss(np.where(y == 1, 30.0, -30.0), codes, p, sizes)
    assert model.train_loss_[0][-1] == pytest.approx(truth, abs=2e-3)
    assert (model.predict(X) == y).mean() <= 0.65


def test_a_few_known_labels_break_the_tie_on_the_toy_set():
    X, bags, shares, y = toy()
    known = np.where(np.arange(len(y)) % 10 == 0, y, -1)
    model = ProportionBoosting(random_state=0).fit(X, bags, shares, y=known)
    assert (model.predict(X) == y).mean() >= 0.95


def test_early_stopping_keeps_the_round_with_the_lowest_held_out_loss():
    X, bags, shares, _ = xor()
    model = ProportionBoosting(
        n_estimators=400, learning_rate=0.5, validation_fraction=0.25, random_state=0
    ).fit(X, bags, shares)
    held_out = model.estimators_[0].validation_loss
    assert model.n_estimators_[0] < len(held_out) < 400
    assert model.n_estimators_[0] == np.argmin(held_out) + 1


def test_multiclass_probabilities_sum_to_one_and_follow_the_shares():
    rng = np.random.RandomState(0)
    y = rng.randint(0, 3, 600)
    X = rng.standard_normal((600, 3)) + 2.0 * np.eye(3)[y]
    order = np.argsort(y + rng.uniform(0, 1.5, 600))  # neighbouring labels share a bag
    bags = np.empty(600, dtype=int)
    bags[order] = np.arange(600) // 30
    table = pd.crosstab(bags, y, normalize="index").reindex(columns=[0, 1, 2], fill_value=0.0)
    model = ProportionBoosting(n_estimators=50, random_state=0).fit(X, bags, table)
    proba = model.predict_proba(X)
    assert proba.shape == (600, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert (model.predict(X) == y).mean() >= 0.8


def test_fixed_seed_gives_the_same_model_also_in_parallel():
    rng = np.random.RandomState(1)
    y = rng.randint(0, 3, 300)
    X = rng.standard_normal((300, 4)) + np.eye(3, 4)[y]
    bags, table = bags_from_labels(y, 20, classes=[0, 1, 2], random_state=0)
    params = {"n_estimators": 20, "subsample": 0.5, "random_state": 3}
    serial = ProportionBoosting(**params).fit(X, bags, table).predict_proba(X)
    again = ProportionBoosting(**params).fit(X, bags, table).predict_proba(X)
    with parallel_config(backend="threading"):  # the seeds are the point, not process start-up
        parallel = ProportionBoosting(n_jobs=2, **params).fit(X, bags, table).predict_proba(X)
    other = ProportionBoosting(**{**params, "random_state": 4}).fit(X, bags, table)
    np.testing.assert_array_equal(serial, again)
    np.testing.assert_array_equal(serial, parallel)
    assert not np.array_equal(serial, other.predict_proba(X))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("n_estimators", 0),
        ("learning_rate", -0.1),
        ("max_depth", 0),
        ("max_leaf_nodes", 1),
        ("min_samples_leaf", 0),
        ("l2_regularization", -1.0),
        ("max_bins", 300),
        ("subsample", 0.0),
        ("subsample", 1.5),
        ("validation_fraction", 1.0),
        ("random_state", "seed"),
    ],
)
def test_bad_parameters_raise_value_error_naming_them(name, value):
    X, bags, shares, _ = toy()
    with pytest.raises(ValueError, match=name):
        ProportionBoosting(**{name: value}).fit(X, bags, shares)


def test_works_inside_bag_grid_search():
    X, bags, shares, y = xor(n_samples=600, bag_size=30)
    search = BagGridSearchCV(
        ProportionBoosting(n_estimators=30, random_state=0),
        {"max_depth": [1, 3]},
        cv=3,
        random_state=0,
    )
    search.fit(X, bags, shares)
    # stumps are additive in the features and cannot express an interaction
    assert search.best_params_ == {"max_depth": 3}
    assert roc_auc_score(y, search.predict_proba(X)[:, 1]) >= 0.9


def test_quantile_bins_keep_order_and_few_distinct_values():
    rng = np.random.RandomState(0)
    X = np.column_stack([rng.standard_normal(1000), rng.randint(0, 2, 1000)])
    binner = QuantileBinner(16).fit(X)
    codes = binner.transform(X)
    assert len(np.unique(codes[:, 0])) == 16
    assert np.unique(codes[:, 1]).tolist() == [0.0, 1.0]
    order = np.argsort(X[:, 0])
    assert np.all(np.diff(codes[order, 0]) >= 0)
