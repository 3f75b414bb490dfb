"""conv-pSVM (pSVM Alg. 2): accuracy on the paper's toy set and on heart, the eq. 19-21 label
search against brute force, bag-calibrated probabilities, reproducibility, one-vs-rest and
the bag-aware grid search."""

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from qcllp.datasets import load_heart, load_toy
from qcllp.learn import BagGridSearchCV
from qcllp.learn.psvm.alter_psvm import AlterPSVM
from qcllp.learn.psvm.conv_psvm import ConvPSVM
from qcllp.learn.psvm.wellsvm_labels import linf_violated_label, proportion_label_space
from qcllp.learn.psvm.wellsvm_solver import feature_space, fit_wellsvm, oriented_weights
from qcllp.learn.synthetic import bags_from_labels


@pytest.fixture(scope="module")
def toy():
    frame = load_toy()
    X = frame[["x1", "x2"]].to_numpy()
    y = (frame["label"].to_numpy() > 0).astype(int)
    bags = frame["bag"].to_numpy()
    shares = pd.Series(y).groupby(bags).mean()
    return X, y, bags, shares


@pytest.fixture(scope="module")
def heart():
    frame = load_heart()
    X = frame.drop(columns="label").to_numpy()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    y = (frame["label"].to_numpy() > 0).astype(int)
    return X, y


@pytest.fixture(scope="module")
def heart_fits(heart):
    """ConvPSVM (linear, C = 0.1) on heart with random bags of 8, three bag draws.

    C = 0.1, not the default 1: at C = 1 the linear relaxation is on average 2.5 points below
    AlterPSVM (0.819 vs 0.844 train accuracy over 8 bag draws), inside the 3-point margin on
    average but not on every draw; at C = 0.1 it is 0.836. The paper tunes C per data set.
    """
    X, y = heart
    fits = []
    for seed in range(3):
        bags, shares = bags_from_labels(y, 8, random_state=seed)
        fits.append((bags, shares, ConvPSVM(C=0.1, random_state=0).fit(X, bags, shares)))
    return fits


def test_toy_set_is_classified_at_least_95_percent_right(toy):
    """pSVM Sect. 6.1: bag means on the wrong sides defeat MeanMap/InvCal, not conv-pSVM."""
    X, y, bags, shares = toy
    model = ConvPSVM(C=1.0).fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.95


def test_toy_set_with_rbf_kernel_is_classified_at_least_95_percent_right(toy):
    X, y, bags, shares = toy
    model = ConvPSVM(C=1.0, kernel="rbf", gamma=1.0, random_state=0).fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.95


def test_heart_bags_of_8_no_worse_than_alter_psvm_minus_3_points(heart, heart_fits):
    """Mean train accuracy over three bag draws against the paper's AlterPSVM (10 random
    restarts)."""
    X, y = heart
    conv = np.mean([(model.predict(X) == y).mean() for _, _, model in heart_fits])
    paper = AlterPSVM(init=None, n_restarts=10, random_state=0)
    alter = [(paper.fit(X, bags, shares).predict(X) == y).mean() for bags, shares, _ in heart_fits]
    assert conv >= np.mean(alter) - 0.03


def test_probabilities_are_calibrated_on_the_training_bags(heart, heart_fits):
    """Mean probability per bag near the bag's share, closer than a plain sigmoid of f."""
    X, _ = heart
    for bags, shares, model in heart_fits:
        p = model.predict_proba(X)[:, 1]
        raw = expit(model.decision_function(X))
        calibrated = np.abs(pd.Series(p).groupby(bags).mean() - shares).mean()
        uncalibrated = np.abs(pd.Series(raw).groupby(bags).mean() - shares).mean()
        assert calibrated < 0.11
        assert calibrated < uncalibrated


def test_toy_predicted_bag_shares_are_not_flipped(toy):
    """The rank-1 labels' sign is fixed on the training bags: bag 1 stays mostly positive."""
    X, _, bags, shares = toy
    predicted = pd.Series(ConvPSVM().fit(X, bags, shares).predict(X)).groupby(bags).mean()
    assert np.abs(predicted - shares).max() < 0.05


def test_orientation_undoes_a_global_sign_flip(toy):
    X, _, bags, shares = toy
    codes = pd.Index(shares.index).get_indexer(bags)
    space = proportion_label_space(codes, shares.to_numpy())
    _, Phi = feature_space(X, "linear", "scale", 500, None)
    result = fit_wellsvm(Phi, space, 1.0, max_iter=3)
    w = oriented_weights(Phi, result, space, result.rank1_labels())
    w_flipped = oriented_weights(Phi, result, space, -result.rank1_labels())
    np.testing.assert_allclose(w, w_flipped)
    assert space.violation(Phi @ w) < space.violation(-(Phi @ w))


def _feasible(y, codes, shares, epsilon, known):
    """Independent check of pSVM eq. 10 plus fixed known labels."""
    pos = np.bincount(codes, weights=(y > 0).astype(float), minlength=len(shares))
    sizes = np.bincount(codes, minlength=len(shares))
    ok_share = np.all(np.abs(pos / sizes - shares) <= epsilon + 1e-9)
    ok_known = np.all(y[known == 1] == 1) and np.all(y[known == 0] == -1)
    return ok_share and ok_known


@st.composite
def tiny_bag_problems(draw):
    n = draw(st.integers(2, 9))
    n_bags = draw(st.integers(1, min(3, n)))
    codes = np.array(draw(st.lists(st.integers(0, n_bags - 1), min_size=n, max_size=n)))
    codes[:n_bags] = np.arange(n_bags)  # every bag has a row
    truth = np.array(draw(st.lists(st.sampled_from([-1, 1]), min_size=n, max_size=n)))
    sizes = np.bincount(codes, minlength=n_bags)
    shares = np.bincount(codes, weights=(truth > 0).astype(float), minlength=n_bags) / sizes
    known_mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    known = np.where(known_mask, (truth > 0).astype(int), -1)
    epsilon = draw(st.sampled_from([0.0, 0.1, 0.25, 0.5]))
    d = draw(st.integers(1, 3))
    values = st.floats(-3, 3, allow_nan=False, width=32)
    features = np.array(draw(st.lists(values, min_size=n * d, max_size=n * d))).reshape(n, d)
    alpha = np.array(draw(st.lists(st.floats(0, 2, width=32), min_size=n, max_size=n)))
    return codes, shares, epsilon, known, features, alpha


@settings(max_examples=100, deadline=None)
@given(tiny_bag_problems())
def test_linf_violated_label_search_equals_brute_force(problem):
    """eq. 19-21: the returned y is feasible and maximises max_j |sum_i alpha_i y_i x_ij|."""
    codes, shares, epsilon, known, features, alpha = problem
    space = proportion_label_space(codes, shares, epsilon, known)
    y = linf_violated_label(alpha, features, space)

    def linf(labels):
        return np.abs((alpha * labels) @ features).max()

    feasible = [
        np.array(c)
        for c in itertools.product([-1, 1], repeat=len(codes))
        if _feasible(np.array(c), codes, shares, epsilon, known)
    ]
    assert _feasible(y, codes, shares, epsilon, known)
    assert linf(y) == pytest.approx(max(linf(c) for c in feasible), rel=1e-9, abs=1e-9)


def test_fixed_random_state_gives_the_same_model():
    """rbf on more rows than n_components draws Nystroem landmarks: the seed fixes them."""
    rng = np.random.RandomState(3)
    X = rng.standard_normal((160, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 > 0.5).astype(int)
    bags, shares = bags_from_labels(y, 8, random_state=3)
    params = {"kernel": "rbf", "gamma": 0.5, "n_components": 40, "max_iter": 2}
    first = ConvPSVM(random_state=7, **params).fit(X, bags, shares).decision_function(X)
    again = ConvPSVM(random_state=7, **params).fit(X, bags, shares).decision_function(X)
    other = ConvPSVM(random_state=8, **params).fit(X, bags, shares).decision_function(X)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_three_classes_one_vs_rest():
    rng = np.random.RandomState(0)
    centers = np.array([[0.0, 4.0], [-4.0, -2.0], [4.0, -2.0]])
    y = rng.randint(0, 3, size=300)
    X = centers[y] + rng.standard_normal((300, 2))
    labels = np.array(["ok", "crack", "scale"])[y]
    bags, proportions = bags_from_labels(
        labels, 10, random_state=0, classes=["ok", "crack", "scale"]
    )
    model = ConvPSVM(max_iter=3).fit(X, bags, proportions)
    assert model.decision_function(X).shape == (300, 3)
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert (model.predict(X) == labels).mean() >= 0.9


def test_known_labels_can_be_passed_to_fit(toy):
    """Hand-inspected sticks (``y`` with NaN for unknown rows) are fixed in every label vector."""
    X, y, bags, shares = toy
    partial = np.full(len(y), np.nan)
    partial[::10] = y[::10]
    model = ConvPSVM(max_iter=3).fit(X, bags, shares, y=partial)
    assert (model.predict(X) == y).mean() >= 0.95


def test_known_labels_stay_fixed_in_the_label_space():
    codes = np.array([0, 0, 0, 0, 1, 1])
    shares = np.array([0.5, 0.5])
    known = np.array([1, -1, -1, -1, 0, -1])
    space = proportion_label_space(codes, shares, 0.0, known)
    y = space.argmax(np.array([-5.0, 3.0, 2.0, 1.0, 9.0, -9.0]))
    np.testing.assert_array_equal(y, [1, 1, -1, -1, -1, 1])


def test_works_inside_bag_grid_search(toy):
    X, y, _, _ = toy
    bags, shares = bags_from_labels(y, 10, random_state=0)
    search = BagGridSearchCV(ConvPSVM(max_iter=2), {"C": [0.1, 1.0]}, cv=3, random_state=0)
    search.fit(X, bags, shares)
    assert search.best_params_["C"] in (0.1, 1.0)
    assert len(search.cv_results_["mean_test_bag_error"]) == 2
    assert (search.predict(X) == y).mean() >= 0.9


@pytest.mark.parametrize(
    "params", [{"C": 0.0}, {"epsilon": -0.1}, {"kernel": "poly"}, {"init": "conv"}]
)
def test_bad_parameters_are_rejected(toy, params):
    X, _, bags, shares = toy
    with pytest.raises(ValueError):
        ConvPSVM(**params).fit(X, bags, shares)


def test_primal_newton_solver_matches_libsvm_on_the_exact_rbf_map(heart):
    """Both SVM paths of the engine reach the same MKL objective on the same problem."""
    X, y = heart
    X, y = X[:120], y[:120]
    bags, shares = bags_from_labels(y, 8, random_state=0)
    space = proportion_label_space(pd.Index(shares.index).get_indexer(bags), shares.to_numpy())
    _, Phi = feature_space(X, "rbf", 0.05, 500, None)
    assert Phi.shape[1] >= len(X) // 2  # near full rank: libsvm by default
    libsvm = fit_wellsvm(Phi, space, 1.0, max_iter=2)
    primal = fit_wellsvm(Phi, space, 1.0, max_iter=2, exact_max_rows=0)
    np.testing.assert_allclose(primal.objective, libsvm.objective, rtol=1e-3)


def test_invcal_start_ranks_the_plants_defective_sticks():
    """On the simulated plant's cooling station the default run's label vectors follow the
    high-variance directions (ROC AUC about 0.6 on the training sticks); started from InvCal's
    labeling (WellSVM Alg. 1) the model ranks the defective sticks well (about 0.87)."""
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    from qcllp.features import build_station_features
    from qcllp.plant import load_plant_config
    from qcllp.plant.simulate import simulate_plant

    config = load_plant_config(Path(__file__).resolve().parents[2] / "plant_config/example.yaml")
    plant = simulate_plant(config, 100, random_state=1000)
    features = build_station_features(plant.readings, config, "cooling")
    defective = plant.failing().reindex(features.X.index).to_numpy()
    X = StandardScaler().fit_transform(features.X.to_numpy())
    bags = features.bags.to_numpy()

    model = ConvPSVM(C=1.0, init="invcal", random_state=0).fit(X, bags, plant.defective_shares())

    assert roc_auc_score(defective, model.decision_function(X)) >= 0.8
