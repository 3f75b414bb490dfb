"""The WellSVM engine and estimator: sorting-based label maximisation against brute force for
all three label spaces, semi-supervised learning from 10 labels, clustering, the cutting-plane
objective, and the label conventions."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qcllp.learn.psvm.wellsvm import WellSVM
from qcllp.learn.psvm.wellsvm_labels import (
    balance_label_space,
    cluster_label_space,
    proportion_label_space,
)
from qcllp.learn.psvm.wellsvm_solver import feature_space, fit_wellsvm, line_step, svm_primal


def _two_blobs(n: int, distance: float, seed: int):
    rng = np.random.RandomState(seed)
    y = np.where(np.arange(n) < n // 2, 1, -1)
    X = rng.standard_normal((n, 2))
    X[:, 0] += distance / 2 * y
    return X, y


def _ten_labels(y: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.RandomState(seed)
    picked = np.r_[
        rng.choice(np.flatnonzero(y == 1), 5, replace=False),
        rng.choice(np.flatnonzero(y == -1), 5, replace=False),
    ]
    partial = np.full(len(y), np.nan)
    partial[picked] = y[picked]
    return partial


@st.composite
def spaces_and_scores(draw):
    n = draw(st.integers(1, 8))
    kind = draw(st.sampled_from(["proportion", "balance", "cluster"]))
    if kind == "proportion":
        n_bags = draw(st.integers(1, min(3, n)))
        codes = np.array(draw(st.lists(st.integers(0, n_bags - 1), min_size=n, max_size=n)))
        codes[:n_bags] = np.arange(n_bags)
        shares = np.array(draw(st.lists(st.floats(0, 1), min_size=n_bags, max_size=n_bags)))
        known = np.array(draw(st.lists(st.sampled_from([-1, -1, 0, 1]), min_size=n, max_size=n)))
        eps = draw(st.sampled_from([0.0, 0.2]))
        space = proportion_label_space(codes, shares, eps, known)
    elif kind == "balance":
        fixed = np.array(draw(st.lists(st.sampled_from([0, 0, 1, -1]), min_size=n, max_size=n)))
        fixed[0] = draw(st.sampled_from([1, -1]))
        space = balance_label_space(fixed, draw(st.sampled_from([0.0, 0.1, 0.3])))
    else:
        space = cluster_label_space(n, draw(st.sampled_from([0.0, 0.03, 0.5])))
    scores = np.array(draw(st.lists(st.floats(-5, 5, width=32), min_size=n, max_size=n)))
    return space, scores


@settings(max_examples=80, deadline=None)
@given(spaces_and_scores())
def test_sorting_maximises_a_linear_objective_over_every_label_space(case):
    """pSVM eq. 21 / WellSVM Prop. 5 (eq. 17, 32): argmax r'y by sorting = brute force."""
    space, r = case
    y = space.argmax(r)
    feasible = [np.array(c) for c in itertools.product([-1, 1], repeat=len(r)) if space.contains(c)]
    assert space.contains(y)
    assert r @ y == pytest.approx(max(r @ c for c in feasible), abs=1e-9)


def test_argmax_handles_many_score_columns_at_once():
    rng = np.random.RandomState(0)
    codes = rng.randint(0, 5, size=40)
    space = proportion_label_space(codes, rng.uniform(size=5), 0.1)
    R = rng.standard_normal((40, 7))
    Y = space.argmax(R)
    for j in range(7):
        np.testing.assert_array_equal(Y[:, j], space.argmax(R[:, j]))


def test_semi_supervised_two_blobs_from_ten_labels():
    X, y = _two_blobs(200, 4.0, seed=0)
    partial = _ten_labels(y, seed=0)
    model = WellSVM(task="semi-supervised").fit(X, partial)
    unlabeled = np.isnan(partial)
    assert (model.labels_[unlabeled] == y[unlabeled]).mean() >= 0.93
    assert (model.predict(X) == y).mean() >= 0.93


def test_semi_supervised_labeled_rows_keep_their_labels():
    X, y = _two_blobs(100, 1.0, seed=1)
    partial = _ten_labels(y, seed=1)
    labels = WellSVM(max_iter=3).fit(X, partial).labels_
    labeled = ~np.isnan(partial)
    np.testing.assert_array_equal(labels[labeled], partial[labeled])


def test_zero_and_nan_both_mean_unlabeled():
    X, y = _two_blobs(80, 4.0, seed=2)
    partial = _ten_labels(y, seed=2)
    with_nan = WellSVM(max_iter=3).fit(X, partial).decision_function(X)
    with_zero = WellSVM(max_iter=3).fit(X, np.nan_to_num(partial)).decision_function(X)
    np.testing.assert_allclose(with_nan, with_zero)


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_clustering_separates_two_blobs_up_to_label_swap(kernel):
    X, y = _two_blobs(160, 8.0, seed=3)
    labels = WellSVM(task="clustering", kernel=kernel, max_iter=5).fit_predict(X)
    agreement = (labels == y).mean()
    assert max(agreement, 1 - agreement) >= 0.98


def test_clustering_respects_the_balance_constraint():
    X, _ = _two_blobs(100, 1.0, seed=4)
    labels = WellSVM(task="clustering", balance=0.1, max_iter=3).fit(X).labels_
    assert abs(labels.sum()) <= 10


def test_cutting_plane_objective_does_not_increase():
    X, y = _two_blobs(120, 1.5, seed=5)
    codes = np.arange(120) % 12
    shares = np.bincount(codes, weights=(y > 0).astype(float)) / np.bincount(codes)
    space = proportion_label_space(codes, shares)
    _, Phi = feature_space(X, "rbf", 0.5, 500, None)
    result = fit_wellsvm(Phi, space, 1.0, max_iter=6)
    assert result.n_iter >= 2
    history = np.asarray(result.objective)
    assert np.all(np.diff(history) <= 1e-3 * np.abs(history[1:]))


@pytest.mark.parametrize(
    "y, message",
    [
        (None, "needs y"),
        (np.r_[2.0, np.zeros(9)], "not \\+1, -1"),
        (np.r_[1.0, np.zeros(9)], "both classes"),
        (np.zeros(5), "5 entries"),
    ],
)
def test_bad_labels_are_rejected(y, message):
    X, _ = _two_blobs(10, 4.0, seed=6)
    with pytest.raises(ValueError, match=message):
        WellSVM().fit(X, y)


def test_unknown_task_is_rejected():
    X, y = _two_blobs(10, 4.0, seed=6)
    with pytest.raises(ValueError, match="task"):
        WellSVM(task="regression").fit(X, y)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.floats(0.01, 10),
            st.floats(-10, 10),
            st.lists(st.floats(-3, 3), min_size=n, max_size=n),
            st.lists(st.floats(-3, 3), min_size=n, max_size=n),
            st.lists(st.floats(0, 5), min_size=n, max_size=n),
        )
    )
)
def test_exact_line_search_zeroes_the_derivative(case):
    """The 1-D minimiser of a t^2/2 + b t + sum c max(0, m - t q)^2 (convex, continuously
    differentiable) is where its derivative vanishes."""
    a, b, m, q, c = (np.asarray(v, dtype=float) for v in case)
    t = line_step(float(a), float(b), m, q, c)

    def derivative(t):
        return a * t + b - 2.0 * np.sum(c * q * np.maximum(0.0, m - t * q))

    scale = a + 2.0 * np.sum(c * q * q) + abs(b) + 2.0 * np.sum(np.abs(c * q * m))
    assert abs(derivative(t)) <= 1e-9 * scale


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_primal_newton_solver_closes_the_duality_gap(seed):
    """At the optimum of the mixed-kernel L2-SVM (WellSVM eq. 13) the primal value with
    ``w_t = mu_t Phi'(alpha o y_t)`` equals the dual G(alpha) (eq. 11 with the squared hinge);
    per-row C as in the semi-supervised task, three label vectors, a cold start."""
    rng = np.random.RandomState(seed)
    n, d, T = 300, 6, 3
    Phi = rng.standard_normal((n, d)) * np.linspace(3.0, 0.3, d)
    Y = np.where(rng.uniform(size=(T, n)) < 0.7, 1, -1) * np.sign(Phi[:, 0] + 0.3)
    mu = rng.dirichlet(np.ones(T))
    C = np.where(rng.uniform(size=n) < 0.2, 10.0, 0.5)
    alpha = svm_primal(Phi, Y.astype(np.int8), mu, C, np.zeros(n))
    G = Phi.T @ (alpha[:, None] * Y.T)  # column t: Phi'(alpha o y_t)
    margin = np.einsum("nd,dt,tn->n", Phi, G * mu, Y)  # sum_t mu_t y_ti phi_i' G_t
    xi = np.maximum(0.0, 1.0 - margin)
    primal = 0.5 * np.sum(mu * np.sum(G**2, axis=0)) + C @ xi**2
    dual = alpha.sum() - 0.5 * np.sum(mu * np.sum(G**2, axis=0)) - alpha @ (alpha / (4 * C))
    assert np.all(alpha >= 0)
    assert primal - dual == pytest.approx(0.0, abs=1e-6 * primal)
    np.testing.assert_allclose(alpha, 2 * C * xi, atol=1e-2 * alpha.max())
