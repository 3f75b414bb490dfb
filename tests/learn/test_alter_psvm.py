"""alter-pSVM: the toy set of Fig. 1, the exact label step (Prop. 1), annealing, the contract."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.svm import LinearSVC

from qcllp.learn.model_selection import BagGridSearchCV
from qcllp.learn.psvm.alter_psvm import AlterPSVM
from qcllp.learn.psvm.label_step import optimal_bag_labels
from qcllp.learn.psvm.svm_step import HingeSVM, SquaredHingeSVM
from qcllp.learn.synthetic import bags_from_labels

from .psvm_data import heart as _heart
from .psvm_data import toy as _toy


def test_toy_set_is_learned_perfectly_although_bag_means_lie_on_the_wrong_side():
    X, bags, shares, y = _toy()
    model = AlterPSVM(C=1.0, C_p=10.0, random_state=0).fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.95


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_single_restarts_do_not_end_label_flipped(seed):
    # without the sign check about half the random restarts on the toy set end in the flipped
    # separator, which misses both bags' shares by 0.2
    X, bags, shares, y = _toy()
    model = AlterPSVM(C=1.0, C_p=10.0, n_restarts=1, init=None, random_state=seed)
    model.fit(X, bags, shares)
    assert model.bag_error(X, bags, shares) < 0.05
    assert (model.predict(X) == y).mean() >= 0.95


def test_winner_is_the_restart_with_the_smallest_objective():
    X, bags, shares, _ = _heart(32)
    model = AlterPSVM(n_restarts=4, random_state=0).fit(X, bags, shares)
    restarts = model.estimators_[0].restart_objectives
    assert model.objective_[0] == pytest.approx(restarts.min())


def _label_objective(delta, codes, shares, weight, positive):
    sizes = np.bincount(codes, minlength=len(shares))
    p = np.bincount(codes, weights=positive, minlength=len(shares)) / sizes
    return -delta[positive].sum() + weight * np.abs(p - shares).sum()


@st.composite
def _label_problems(draw):
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    n = sum(sizes)
    codes = np.repeat(np.arange(len(sizes)), sizes)
    delta = np.array(draw(st.lists(st.floats(-4, 4), min_size=n, max_size=n)))
    shares = np.array([draw(st.integers(0, s)) / s for s in sizes], dtype=float)
    shares = np.where(draw(st.booleans()), shares, draw(st.floats(0, 1)))
    known = np.array(draw(st.lists(st.sampled_from([-1, -1, 0, 1]), min_size=n, max_size=n)))
    if draw(st.booleans()):
        known[:] = -1
    weight = draw(st.sampled_from([0.0, 0.3, 1.0, 5.0, 100.0]))
    return delta, codes, shares, weight, known


@settings(max_examples=150, deadline=None)
@given(_label_problems(), st.sampled_from(["padded", "segments"]))
def test_vectorized_label_step_equals_brute_force_over_all_labelings(problem, method):
    delta, codes, shares, weight, known = problem
    positive = optimal_bag_labels(delta, codes, shares, weight, known, method=method)
    assert np.array_equal(positive[known >= 0], known[known >= 0] == 1)
    free = np.flatnonzero(known < 0)
    best = np.inf
    for bits in itertools.product([False, True], repeat=len(free)):
        candidate = known == 1
        candidate[free] = bits
        best = min(best, _label_objective(delta, codes, shares, weight, candidate))
    found = _label_objective(delta, codes, shares, weight, positive)
    assert found == pytest.approx(best, abs=1e-9)


def test_label_step_meets_the_shares_when_the_proportion_weight_dominates():
    rng = np.random.RandomState(0)
    codes = rng.randint(0, 40, 2000)
    sizes = np.bincount(codes)
    counts = rng.binomial(sizes, 0.3)
    positive = optimal_bag_labels(rng.standard_normal(2000), codes, counts / sizes, 1e6)
    assert np.array_equal(np.bincount(codes, weights=positive), counts)


def test_squared_hinge_solver_reaches_the_optimum():
    rng = np.random.RandomState(1)
    X = rng.standard_normal((300, 4))
    y = np.sign(X @ [1.0, -2.0, 0.5, 0.0] + 0.3 + rng.standard_normal(300))
    Z = np.column_stack([X, np.ones(300)])
    z = SquaredHingeSVM(Z).fit(y, 0.7).z
    margin = np.maximum(0, 1 - y * (Z @ z))
    grad = np.append(z[:-1], 0.0) - 2 * 0.7 * Z.T @ (margin * y)
    assert np.abs(grad).max() < 1e-6


def _separable_with_offset(n: int = 300):
    rng = np.random.RandomState(2)
    X = rng.standard_normal((n, 4))
    y = np.sign(X @ [1.0, -2.0, 0.5, 0.0] + 1.5 + rng.standard_normal(n))
    return np.column_stack([X, np.ones(n)]), y


def test_penalised_bias_is_liblinears_l2_svm():
    Z, y = _separable_with_offset()
    z = SquaredHingeSVM(Z, bias_penalty=1.0).fit(y, 0.7).z
    ref = LinearSVC(C=0.7, loss="squared_hinge", dual=False, intercept_scaling=1.0, tol=1e-12)
    ref.fit(Z[:, :-1], y)
    assert np.allclose(z, np.append(ref.coef_[0], ref.intercept_[0]), atol=1e-6)
    weak = {penalty: SquaredHingeSVM(Z, penalty).fit(y, 0.005).z[-1] for penalty in (0.0, 1.0)}
    assert weak[0.0] > weak[1.0] + 0.1 > 0.1  # the penalty pulls the bias in


def test_hinge_step_with_penalised_bias_minimises_its_objective():
    Z, y = _separable_with_offset()

    def value(z):
        return 0.5 * (z @ z) + 0.7 * np.maximum(0, 1 - y * (Z @ z)).sum()

    z = HingeSVM(Z, bias_penalty=1.0).fit(y, 0.7).z
    rng = np.random.RandomState(0)
    assert all(value(z) <= value(z + 1e-3 * rng.standard_normal(5)) + 1e-6 for _ in range(200))
    with pytest.raises(ValueError, match="bias_penalty 0 or 1"):
        HingeSVM(Z, bias_penalty=0.5)


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_penalised_bias_option_learns_the_toy_set(loss):
    X, bags, shares, y = _toy()
    model = AlterPSVM(
        C=1.0, C_p=10.0, loss=loss, regularize_bias=True, n_restarts=3, random_state=0
    )
    model.fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.95


def test_objective_never_increases_inside_an_annealing_step():
    X, bags, shares, _ = _heart(8)
    model = AlterPSVM(C=1.0, C_p=10.0, n_restarts=2, random_state=0).fit(X, bags, shares)
    history = model.objective_history_[0]
    assert len(history) == 30  # 1e-5 C * 1.5^k reaches C after 29 steps, plus the start
    assert sum(len(step) for step in history) > 2 * len(history)  # some steps alternate more
    for step in history:
        assert np.all(np.diff(step) <= 1e-9 * np.abs(step[:-1]))


def test_heart_bags_of_8_give_a_sensible_accuracy_and_bag_calibrated_probabilities():
    X, bags, shares, y = _heart(8)
    model = AlterPSVM(C=1.0, C_p=10.0, n_restarts=3, random_state=0).fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.8
    proba = model.predict_proba(X)[:, 1]
    mean_p = pd.Series(proba).groupby(bags).mean()
    assert np.abs(mean_p - shares).mean() < 0.15


def test_fixed_seed_gives_the_same_model_for_any_n_jobs():
    X, bags, shares, _ = _toy()
    params = dict(C=1.0, C_p=10.0, n_restarts=3, random_state=7)
    serial = AlterPSVM(**params).fit(X, bags, shares).decision_function(X)
    again = AlterPSVM(**params).fit(X, bags, shares).decision_function(X)
    parallel = AlterPSVM(n_jobs=2, **params).fit(X, bags, shares).decision_function(X)
    assert np.array_equal(serial, again)
    assert np.allclose(serial, parallel, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("exact_kernel_max_n", [1000, 100])
def test_rbf_kernel_exact_and_nystroem_paths_learn_heart(exact_kernel_max_n):
    X, bags, shares, y = _heart(8)
    model = AlterPSVM(
        kernel="rbf",
        gamma=0.1,
        n_restarts=3,
        n_components=100,
        exact_kernel_max_n=exact_kernel_max_n,
        random_state=0,
    ).fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.8


def test_three_classes_one_vs_rest():
    rng = np.random.RandomState(0)
    centers = np.array([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    y = rng.randint(0, 3, 600)
    X = centers[y] + rng.standard_normal((600, 2))
    bags, proportions = bags_from_labels(y, 20, random_state=0, classes=[0, 1, 2])
    model = AlterPSVM(n_restarts=2, random_state=0).fit(X, bags, proportions)
    assert model.decision_function(X).shape == (600, 3)
    assert np.allclose(model.predict_proba(X).sum(axis=1), 1.0)
    assert (model.predict(X) == y).mean() >= 0.9


def test_known_labels_are_used_and_kept():
    X, bags, shares, y = _heart(32)
    known = np.full(len(y), np.nan)
    known[::3] = y[::3]
    model = AlterPSVM(n_restarts=1, random_state=0).fit(X, bags, shares, y=known)
    assert (model.predict(X) == y).mean() >= 0.75


def test_works_inside_bag_grid_search():
    X, bags, shares, _ = _heart(8)
    search = BagGridSearchCV(AlterPSVM(n_restarts=1, random_state=0), {"C": [0.1, 1.0]}, cv=2).fit(
        X, bags, shares
    )
    assert search.cv_results_["mean_test_bag_error"].shape == (2,)
    assert search.best_params_["C"] in (0.1, 1.0)
    assert search.predict(X).shape == (len(X),)


@pytest.mark.parametrize(
    "params",
    [{"C": -1.0}, {"C_p": np.nan}, {"kernel": "poly"}, {"init": "bogus"}, {"n_restarts": 0}],
)
def test_bad_parameters_raise_value_error(params):
    X, bags, shares, _ = _toy()
    with pytest.raises(ValueError):
        AlterPSVM(**params).fit(X, bags, shares)


def test_invcal_initialisation_makes_a_single_restart_independent_of_the_seed():
    X, bags, shares, _ = _heart(8)
    first, second = (
        AlterPSVM(init="invcal", n_restarts=1, random_state=seed).fit(X, bags, shares)
        for seed in (0, 1)
    )
    assert np.array_equal(first.decision_function(X), second.decision_function(X))


def test_few_large_bags_the_default_run_from_conv_labels_beats_lower_random_restart_optima():
    # heart in 9 bags of about 32: a bag draw on which the pSVM objective itself misleads;
    # the default (one run from conv-pSVM's labels) is not led there, 10 random restarts are
    X, bags, shares, y = _heart(32, seed=232)
    params = {"C": 0.1, "C_p": 100.0, "random_state": 0}
    from_conv = AlterPSVM(**params).fit(X, bags, shares)
    assert len(from_conv.estimators_[0].restart_objectives) == 1
    restarts = AlterPSVM(n_restarts=10, init=None, **params).fit(X, bags, shares)
    accuracy = {m: (m.predict(X) == y).mean() for m in (from_conv, restarts)}
    assert accuracy[from_conv] >= 0.8
    assert restarts.objective_[0] < from_conv.objective_[0]
    assert accuracy[restarts] < accuracy[from_conv] - 0.1


@pytest.mark.parametrize("seed", range(5))
def test_padded_and_segment_label_steps_agree_on_large_bags_with_ties(seed):
    # integer loss reductions tie often; both layouts must reach the same optimum
    rng = np.random.RandomState(seed)
    codes = np.sort(rng.randint(0, 30, 3000))
    shares = rng.uniform(0, 1, 30)
    delta = rng.randint(-3, 4, 3000).astype(float)
    known = np.where(rng.uniform(size=3000) < 0.1, rng.randint(0, 2, 3000), -1)
    for weight in (0.0, 1.0, 50.0, 1e4):
        padded = optimal_bag_labels(delta, codes, shares, weight, known, method="padded")
        segments = optimal_bag_labels(delta, codes, shares, weight, known, method="segments")
        assert _label_objective(delta, codes, shares, weight, padded) == pytest.approx(
            _label_objective(delta, codes, shares, weight, segments), abs=1e-9
        )
        assert np.array_equal(padded[known >= 0], known[known >= 0] == 1)


def test_paper_hinge_loss_learns_the_toy_set_with_a_non_increasing_objective():
    X, bags, shares, y = _toy()
    model = AlterPSVM(C=1.0, C_p=10.0, loss="hinge", n_restarts=3, random_state=0)
    model.fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.95
    for step in model.objective_history_[0]:
        assert np.all(np.diff(step) <= 1e-9 * np.abs(step[:-1]))


def test_unknown_loss_is_rejected():
    X, bags, shares, _ = _toy()
    with pytest.raises(
        ValueError, match="AlterPSVM: loss must be one of 'hinge', 'squared_hinge', got 'logistic'"
    ):
        AlterPSVM(loss="logistic").fit(X, bags, shares)


def test_unknown_label_step_layout_is_rejected():
    with pytest.raises(ValueError, match="method must be 'auto', 'padded' or 'segments'"):
        optimal_bag_labels(
            np.zeros(4), np.array([0, 0, 1, 1]), np.array([0.5, 0.5]), 1.0, None, "x"
        )
