"""Bag-aware model selection: folds never split a bag; the grid search picks by bag error."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator

from qcllp.learn import BagGridSearchCV, BagKFold, LLPClassifierMixin, bag_cross_val_error
from qcllp.learn.synthetic import bags_from_labels


class ThresholdOnFirstFeature(LLPClassifierMixin, BaseEstimator):
    """A one-parameter LLP learner: class 1 above ``threshold`` on feature 0.

    Its quality depends on nothing but the parameter, so the grid search's choice can be
    checked against the threshold that generated the labels.
    """

    def __init__(self, threshold=0.0):
        self.threshold = threshold

    def fit(self, X, bags, proportions, y=None):
        problem = self._validate_fit_input(X, bags, proportions, y)
        self.n_known_ = int((problem.known >= 0).sum())
        return self

    def predict_proba(self, X):
        above = (self._validate_predict_input(X)[:, 0] > self.threshold).astype(float)
        return np.column_stack([1 - above, above])


@pytest.fixture(scope="module")
def thresholded_data():
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, size=(800, 2))
    y = (X[:, 0] > 0.3).astype(int)
    bags, shares = bags_from_labels(y, 16, random_state=1)
    return X, y, bags, shares


def test_bag_kfold_puts_every_bag_whole_into_exactly_one_test_fold():
    bags = np.repeat(np.arange(23), np.arange(23) % 5 + 1)
    seen = np.zeros(len(bags), dtype=int)
    for train, test in BagKFold(4, random_state=0).split(None, groups=bags):
        assert not set(bags[train]) & set(bags[test])
        seen[test] += 1
    assert (seen == 1).all()


def test_bag_kfold_balances_rows_and_is_reproducible():
    bags = np.repeat(np.arange(40), 10)
    folds_a = [test for _, test in BagKFold(5, random_state=3).split(None, groups=bags)]
    folds_b = [test for _, test in BagKFold(5, random_state=3).split(None, groups=bags)]
    assert all(np.array_equal(a, b) for a, b in zip(folds_a, folds_b, strict=True))
    assert {len(t) for t in folds_a} == {80}


def test_bag_kfold_refuses_fewer_bags_than_folds():
    with pytest.raises(ValueError, match="cannot split 3 bags into 5 folds"):
        list(BagKFold(5).split(None, groups=[1, 1, 2, 3]))


def test_grid_search_chooses_the_threshold_that_matches_the_bags(thresholded_data):
    X, _, bags, shares = thresholded_data
    # mislabeled shares of the data: 40 %, 15 %, 0 %, 25 %
    grid = {"threshold": [-0.5, 0.0, 0.3, 0.8]}
    search = BagGridSearchCV(ThresholdOnFirstFeature(), grid, cv=4, random_state=0)
    search.fit(X, bags, shares)
    assert search.best_params_ == {"threshold": 0.3}
    assert search.best_bag_error_ == pytest.approx(0.0)
    assert search.cv_results_["rank_test_bag_error"].tolist() == [4, 2, 1, 3]
    assert search.best_estimator_.threshold == 0.3
    assert search.predict(np.array([[0.5, 0.0], [0.1, 0.0]])).tolist() == [1, 0]


def test_grid_search_gives_the_same_result_in_parallel(thresholded_data):
    X, _, bags, shares = thresholded_data
    grid = {"threshold": [-0.5, 0.0, 0.3, 0.6]}
    serial = BagGridSearchCV(ThresholdOnFirstFeature(), grid, cv=4, random_state=0)
    parallel = BagGridSearchCV(ThresholdOnFirstFeature(), grid, cv=4, random_state=0, n_jobs=2)
    serial.fit(X, bags, shares)
    parallel.fit(X, bags, shares)
    np.testing.assert_array_equal(
        serial.cv_results_["mean_test_bag_error"], parallel.cv_results_["mean_test_bag_error"]
    )


def test_grid_search_passes_known_labels_of_the_training_rows_only(thresholded_data):
    X, y, bags, shares = thresholded_data
    known = np.where(np.arange(len(y)) % 10 == 0, y, -1)
    search = BagGridSearchCV(ThresholdOnFirstFeature(), {"threshold": [0.3]}, cv=4)
    search.fit(X, bags, shares, y=known)
    assert search.best_estimator_.n_known_ == 80


def test_grid_search_accepts_a_dataframe_and_multiclass_proportions():
    rng = np.random.RandomState(1)
    X = pd.DataFrame(rng.uniform(-1, 1, size=(400, 2)), columns=["temp", "force"])
    y = np.where(X["temp"] > 0.3, 1, 0)
    bags, shares = bags_from_labels(y, 8, random_state=2)
    search = BagGridSearchCV(ThresholdOnFirstFeature(), {"threshold": [0.0, 0.3]}, cv=3)
    search.fit(X, bags, shares)
    assert search.best_params_ == {"threshold": 0.3}


def test_grid_search_names_a_bag_without_proportions(thresholded_data):
    X, _, bags, shares = thresholded_data
    with pytest.raises(ValueError, match="bag 7 has no entry in proportions"):
        BagGridSearchCV(ThresholdOnFirstFeature(), {"threshold": [0.3]}).fit(
            X, bags, shares.drop(7)
        )


def test_cross_val_error_is_zero_for_the_true_rule_and_positive_otherwise(thresholded_data):
    X, _, bags, shares = thresholded_data
    right = bag_cross_val_error(ThresholdOnFirstFeature(0.3), X, bags, shares, cv=4)
    wrong = bag_cross_val_error(ThresholdOnFirstFeature(-0.5), X, bags, shares, cv=4)
    assert right.shape == (4,)
    assert np.allclose(right, 0)
    assert (wrong > 0.2).all()


@pytest.mark.parametrize("n_jobs", [None, 2])
def test_grid_search_reports_every_finished_fit_to_its_progress_callback(thresholded_data, n_jobs):
    X, _, bags, shares = thresholded_data
    heard: list[tuple[int, int, float]] = []
    grid = {"threshold": [-0.5, 0.0, 0.3]}
    search = BagGridSearchCV(
        ThresholdOnFirstFeature(),
        grid,
        cv=4,
        random_state=0,
        n_jobs=n_jobs,
        progress=lambda done, total, seconds: heard.append((done, total, seconds)),
    )
    search.fit(X, bags, shares)
    assert [d for d, _, _ in heard] == list(range(1, 3 * 4 + 2))  # 12 fits and the refit
    assert {t for _, t, _ in heard} == {13}
    seconds = [s for _, _, s in heard]
    assert seconds == sorted(seconds) and seconds[0] >= 0
    assert search.best_params_ == {"threshold": 0.3}  # the callback changes nothing


def test_search_progress_speaks_at_most_every_few_seconds():
    from qcllp.training.train import search_progress

    said: list[str] = []
    tick = search_progress(said.append, "cooling: crack", every_s=5.0)
    for done, seconds in [(1, 1.0), (2, 4.9), (3, 5.2), (4, 7.0), (5, 10.4), (6, 10.5)]:
        tick(done, 6, seconds)
    assert said == [
        "cooling: crack: 3/6 fits done in 5 s",
        "cooling: crack: 5/6 fits done in 10 s",
        "cooling: crack: 6/6 fits done in 10 s",  # the last one always, once it took a while
    ]
    assert search_progress(None, "x") is None
    quiet: list[str] = []
    fast = search_progress(quiet.append, "fast")
    for done in range(1, 4):
        fast(done, 3, 0.1 * done)
    assert quiet == []  # a search of fast fits says nothing


def test_grid_search_keeps_the_best_points_fold_models_when_asked(thresholded_data):
    """``keep_fold_estimators``: the chosen point's model of each fold, fitted on that fold's
    training bags (its known labels counted there), with the rows the fold held out."""
    X, y, bags, shares = thresholded_data
    known = np.where(np.arange(len(y)) % 10 == 0, y, -1)
    grid = {"threshold": [-0.5, 0.3, 0.6]}
    search = BagGridSearchCV(
        ThresholdOnFirstFeature(), grid, cv=4, random_state=0, keep_fold_estimators=True
    ).fit(X, bags, shares, y=known)
    folds = list(BagKFold(4, random_state=0).split(X, groups=bags))
    assert len(search.best_fold_estimators_) == len(search.fold_test_rows_) == 4
    for model, held_out, (train, test) in zip(
        search.best_fold_estimators_, search.fold_test_rows_, folds, strict=True
    ):
        assert model.threshold == search.best_params_["threshold"] == 0.3
        np.testing.assert_array_equal(held_out, test)
        assert model.n_known_ == int((known[train] >= 0).sum())
    plain = BagGridSearchCV(ThresholdOnFirstFeature(), grid, cv=4, random_state=0)
    assert not hasattr(plain.fit(X, bags, shares), "best_fold_estimators_")
