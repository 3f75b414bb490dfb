"""KMeansLabeler (Stolpe & Morik Alg. 1): accuracy from proportions alone, multi-class, known
labels, reproducibility (also in parallel), the estimator contract and its errors."""

import random
import sys
import threading

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_info, threadpool_limits

from qcllp.learn import BagGridSearchCV, BagKFold
from qcllp.learn.cluster.kmeans_labeler import KMeansLabeler
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture

FAST = {"maxgen": 3, "psize": 12}


@pytest.fixture(scope="module")
def gaussians():
    X, y = make_gaussian_mixture(2000, random_state=7)
    bags, shares = bags_from_labels(y, 16, random_state=7)
    return X, y, bags, shares


@pytest.fixture(scope="module")
def fitted(gaussians):
    X, _, bags, shares = gaussians
    return KMeansLabeler(random_state=0, **FAST).fit(X, bags, shares)


def test_two_gaussians_with_bags_of_16_reach_90_percent_instance_accuracy(gaussians, fitted):
    X, y, _, _ = gaussians
    assert np.mean(fitted.predict(X) == y) >= 0.9


def test_fitted_model_exposes_weights_clusters_and_a_non_increasing_fitness_history(fitted):
    assert fitted.weights_.shape == (10,)
    assert np.all((fitted.weights_ >= 0) & (fitted.weights_ <= 1)) and fitted.weights_.max() == 1
    assert fitted.cluster_centers_.shape == (6, 10)
    assert set(fitted.cluster_labels_) <= {0, 1}
    history = fitted.fitness_history_
    assert len(history) == 3 and np.all(np.diff(history) <= 0)
    assert history[-1] == fitted.fitness_
    assert fitted.n_evaluations_ > FAST["psize"]


def test_probabilities_match_the_bag_shares(gaussians, fitted):
    X, _, bags, shares = gaussians
    proba = fitted.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    mean_per_bag = pd.Series(proba[:, 1]).groupby(bags).mean()
    assert np.mean(np.abs(mean_per_bag - shares.loc[mean_per_bag.index])) < 0.1


def test_three_classes_are_learned_natively_and_predicted_as_column_labels():
    rng = np.random.RandomState(0)
    centers = np.array([[0, 0, 0, 0], [4, 0, 0, 0], [0, 4, 0, 0]], dtype=float)
    y = rng.randint(3, size=1500)
    X = centers[y] + rng.standard_normal((1500, 4))
    names = np.array(["ok", "crack", "bend"])
    bags, table = bags_from_labels(names[y], 12, random_state=0, classes=names)
    model = KMeansLabeler(n_clusters=5, random_state=1, **FAST).fit(X, bags, table)
    assert list(model.classes_) == ["ok", "crack", "bend"]
    assert np.mean(model.predict(X) == names[y]) >= 0.85
    assert model.predict_proba(X).shape == (1500, 3)


@pytest.mark.filterwarnings("ignore::qcllp.learn.core.problem.IdentifiabilityWarning")  # on purpose
def test_known_instance_labels_lower_the_error_when_proportions_cannot_orient_the_classes():
    # Every bag is half positive: the proportions say nothing about which cluster is which
    # class, so without labels a model is right or wrong by chance; eq. (8) adds Err_T.
    without, with_labels = [], []
    for seed in range(4):
        rng = np.random.RandomState(seed)
        y = np.tile([0, 1], 400)
        X = rng.standard_normal((800, 4)) + 3.0 * y[:, None]
        bags = np.arange(800) // 2 % 50  # 8 negatives and 8 positives in every bag
        shares = pd.Series(y).groupby(bags).mean()
        known = np.full(800, np.nan)
        picked = rng.choice(800, 40, replace=False)
        known[picked] = y[picked]
        params = dict(n_clusters=2, random_state=seed, **FAST)
        plain = KMeansLabeler(**params).fit(X, bags, shares)
        labeled = KMeansLabeler(**params).fit(X, bags, shares, y=known)
        without.append(np.mean(plain.predict(X) != y))
        with_labels.append(np.mean(labeled.predict(X) != y))
    assert max(with_labels) < 0.1
    assert np.mean(with_labels) < np.mean(without)


def test_a_fixed_seed_gives_the_same_model_also_with_two_jobs(gaussians):
    X, _, bags, shares = gaussians
    serial = KMeansLabeler(random_state=3, **FAST).fit(X, bags, shares)
    again = KMeansLabeler(random_state=3, **FAST).fit(X, bags, shares)
    parallel = KMeansLabeler(random_state=3, n_jobs=2, **FAST).fit(X, bags, shares)
    for other in (again, parallel):
        np.testing.assert_array_equal(other.weights_, serial.weights_)
        np.testing.assert_array_equal(other.predict(X), serial.predict(X))
        np.testing.assert_array_equal(other.fitness_history_, serial.fitness_history_)


@pytest.mark.slow  # 10 s: four evolutions in threads
def test_fits_side_by_side_in_threads_give_the_model_of_one_fit_alone(gaussians):
    """A threaded joblib or in-process Dask backend runs fits in threads of one process: each
    fit draws from its own random source, so they cannot disturb each other."""
    X, _, bags, shares = gaussians
    enough = {"maxgen": 6, "psize": 12}  # offspring beat the first population (FAST: not)
    alone = KMeansLabeler(random_state=3, **enough).fit(X, bags, shares)
    fits = {}

    def fit(i: int) -> None:
        fits[i] = KMeansLabeler(random_state=3, **enough).fit(X, bags, shares)

    threads = [threading.Thread(target=fit, args=(i,)) for i in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, as a loaded machine may
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    for other in fits.values():
        np.testing.assert_array_equal(other.weights_, alone.weights_)
        np.testing.assert_array_equal(other.fitness_history_, alone.fitness_history_)


def test_fit_leaves_the_callers_python_random_state_alone(gaussians):
    X, _, bags, shares = gaussians
    random.seed(123)
    expected = random.random()
    random.seed(123)
    KMeansLabeler(random_state=0, maxgen=2, psize=4).fit(X, bags, shares)
    assert random.random() == expected


def test_greedy_labeling_and_a_final_estimator_also_learn(gaussians):
    X, y, bags, shares = gaussians
    greedy = KMeansLabeler(labeling="greedy", maxgen=3, random_state=0).fit(X, bags, shares)
    assert np.mean(greedy.predict(X) == y) >= 0.8
    final = KMeansLabeler(final_estimator=LogisticRegression(), random_state=0, **FAST)
    final.fit(X, bags, shares)
    assert np.mean(final.predict(X) == y) >= 0.9
    assert final.predict_proba(X).shape == (len(X), 2)


def test_dataframe_features_are_checked_by_name_at_prediction(gaussians):
    X, _, bags, shares = gaussians
    frame = pd.DataFrame(X, columns=[f"sensor_{i}" for i in range(10)])
    model = KMeansLabeler(random_state=0, maxgen=2, psize=4).fit(frame, bags, shares)
    assert list(model.feature_names_in_) == list(frame.columns)
    with pytest.raises(ValueError, match="order"):
        model.predict(frame[frame.columns[::-1]])


def test_clone_and_bag_grid_search_work(gaussians):
    X, _, bags, shares = gaussians
    base = KMeansLabeler(random_state=0, maxgen=2, psize=6)
    assert clone(base).get_params() == base.get_params()
    search = BagGridSearchCV(
        base, {"n_clusters": [2, 6]}, cv=BagKFold(3, shuffle=True, random_state=0)
    ).fit(X, bags, shares)
    assert search.best_params_["n_clusters"] in (2, 6)
    assert search.best_bag_error_ < 0.15


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"labeling": "random"}, "labeling"),
        ({"fitness": "mse"}, "fitness"),
        ({"maxgen": 0}, "maxgen"),
        ({"crossprob": 1.5}, "crossprob"),
        ({"n_clusters": 5000}, "n_clusters"),
    ],
)
def test_invalid_parameters_are_named(gaussians, params, message):
    X, _, bags, shares = gaussians
    with pytest.raises(ValueError, match=message):
        KMeansLabeler(**params).fit(X, bags, shares)


def test_bad_training_input_names_the_bag(gaussians):
    X, _, bags, shares = gaussians
    wrong = shares.copy()
    wrong.iloc[3] = 1.2
    with pytest.raises(ValueError, match=str(shares.index[3])):
        KMeansLabeler().fit(X, bags, wrong)


class _ThreadsSeen(LogisticRegression):
    """A logistic final estimator that records the BLAS and OpenMP pools' sizes in its fit."""

    def fit(self, X, y, sample_weight=None):
        pools = threadpool_info()
        self.pool_threads_ = sorted({(p["user_api"], p["num_threads"]) for p in pools})
        return super().fit(X, y, sample_weight=sample_weight)


def test_the_final_estimator_of_a_small_sample_fits_on_one_thread_whatever_the_caller_allows(
    gaussians,
):
    X, y, bags, shares = gaussians
    model = KMeansLabeler(final_estimator=_ThreadsSeen(), random_state=0, **FAST)
    with threadpool_limits(2):  # what the caller allows; contending pools cost (module comment)
        outside = {p["num_threads"] for p in threadpool_info()}
        model.fit(X, bags, shares)
    assert outside == {2}  # the limit above took, so one thread below is the fit's doing
    seen = model.final_estimator_.pool_threads_
    assert {api for api, _ in seen} >= {"blas", "openmp"}
    assert {threads for _, threads in seen} == {1}
    assert np.mean(model.predict(X) == y) >= 0.9


def test_clustering_a_sample_of_rows_still_labels_every_row(gaussians):
    X, y, bags, shares = gaussians
    model = KMeansLabeler(kmeans_max_rows=300, random_state=0, **FAST).fit(X, bags, shares)
    assert np.mean(model.predict(X) == y) >= 0.9


def _plant_like(seed: int = 0):
    """Bags whose defect share follows one informative feature, next to features that are
    noise: discrete reading counts (3..8) that min-max scaling spreads over [0, 1] and so
    lets dominate k-means, and Gaussian noise. The defect rate is low (about 13 %), so most
    clusters are mostly ok and labeled "ok"."""
    rng = np.random.default_rng(seed)
    n_bags, size = 60, 40
    bag_of = np.repeat(np.arange(n_bags), size)
    level = rng.normal(0.0, 0.7, n_bags)[bag_of] + rng.normal(0.0, 0.7, len(bag_of))
    counts = rng.integers(3, 9, (len(bag_of), 1)).astype(float)
    noise = rng.normal(size=(len(bag_of), 3))
    X = np.column_stack([level, counts, noise])
    risk = 1.0 / (1.0 + np.exp(-(3.0 * level - 4.0)))
    y = (rng.random(len(bag_of)) < risk).astype(int)
    bags = np.array([f"charge-{b}" for b in bag_of])
    shares = pd.Series(y).groupby(bags).mean()
    return X, y, bags, shares


def _auc(y, score) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score))


def test_standard_scaling_keeps_a_discrete_noise_feature_from_taking_over_the_clusters():
    X, y, bags, shares = _plant_like()
    params = {"n_clusters": 4, "maxgen": 2, "psize": 6, "random_state": 0}
    minmax = KMeansLabeler(**params).fit(X, bags, shares)
    standard = KMeansLabeler(scale="standard", **params).fit(X, bags, shares)
    assert np.allclose(standard._scaled(X).mean(axis=0), 0.0)
    assert np.allclose(standard._scaled(X).std(axis=0), 1.0)
    assert np.all(standard.cluster_centers_[:, 1] >= 3) and np.all(
        standard.cluster_centers_[:, 1] <= 8
    )
    auc_minmax = _auc(y, minmax.predict_proba(X)[:, 1])
    auc_standard = _auc(y, standard.predict_proba(X)[:, 1])
    assert auc_standard >= auc_minmax + 0.1, (auc_minmax, auc_standard)


def test_a_final_estimator_on_cluster_compositions_ranks_within_clusters():
    X, y, bags, shares = _plant_like()
    params = {"n_clusters": 8, "maxgen": 2, "psize": 6, "scale": "standard", "random_state": 0}
    clusters = KMeansLabeler(**params).fit(X, bags, shares)
    assert np.mean(clusters.cluster_labels_ == 1) <= 0.25  # a rare class: few defect clusters
    soft = KMeansLabeler(
        final_estimator=LogisticRegression(), final_target="composition", **params
    ).fit(X, bags, shares)
    proba = soft.predict_proba(X)[:, 1]
    assert len(np.unique(proba)) > 100  # a ranking within clusters, not k values
    auc_clusters = _auc(y, clusters.predict_proba(X)[:, 1])
    assert _auc(y, proba) >= max(0.85, auc_clusters + 0.05), (auc_clusters, _auc(y, proba))
    assert abs(proba.mean() - y.mean()) < 0.03  # compositions keep the sample's defect share
    again = KMeansLabeler(
        final_estimator=LogisticRegression(), final_target="composition", **params
    ).fit(X, bags, shares)
    assert np.array_equal(again.predict_proba(X)[:, 1], proba)


def test_composition_target_needs_sample_weight_and_honours_known_labels(gaussians):
    from sklearn.neighbors import KNeighborsClassifier

    from qcllp.learn.cluster.kmeans_labeler import _composition_targets

    X, _, bags, shares = gaussians
    with pytest.raises(ValueError, match="sample_weight"):
        KMeansLabeler(
            final_estimator=KNeighborsClassifier(), final_target="composition", **FAST
        ).fit(X, bags, shares)
    theta = np.array([[0.75, 0.25], [1.0, 0.0], [0.5, 0.5]])
    rows, codes, weights = _composition_targets(theta, np.array([-1, -1, 1]))
    assert rows.tolist() == [0, 1, 0, 2]
    assert codes.tolist() == [0, 0, 1, 1]
    assert weights.tolist() == [0.75, 1.0, 0.25, 1.0]
