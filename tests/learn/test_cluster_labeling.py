"""Cluster labeling (Stolpe & Morik Sect. 3.3): the vectorized scores equal eq. (4)-(8) computed
row by row, exhaustive search finds the brute-force optimum, greedy Alg. 2 is optimal where the
error separates over clusters, and cluster compositions are recovered from the bags."""

import itertools

import numpy as np
import pytest

from qcllp.learn.cluster.cluster_labeling import (
    cluster_compositions,
    label_clusters,
    labeling_errors,
    labeling_statistics,
)
from qcllp.learn.metrics import err_pi, err_prior, err_t, err_weight, model_proportions


def random_clustering(seed, n=300, h=12, k=4, n_classes=2):
    rng = np.random.RandomState(seed)
    bag_codes = rng.randint(h, size=n)
    bag_codes[:h] = np.arange(h)  # every bag has a row
    cluster_codes = rng.randint(k, size=n)
    proportions = rng.dirichlet(np.ones(n_classes), size=h)
    return bag_codes, cluster_codes, proportions


def reference_errors(bag_codes, cluster_codes, proportions, labeling, known=None):
    """eq. (5)-(8) by the metrics module, from the per-row labels of the labeling."""
    h, n_classes = proportions.shape
    row_labels = np.asarray(labeling)[cluster_codes]
    gamma = model_proportions(row_labels, bag_codes, h, n_classes)
    sizes = np.bincount(bag_codes, minlength=h)
    labeled = None
    if known is not None:
        rows = known >= 0
        labeled = err_t(known[rows], row_labels[rows])
    pi = err_pi(proportions, gamma, sizes, labeled)
    weight = err_weight(proportions, gamma, sizes)
    weight_only = np.sqrt(weight * (1.0 if labeled is None else labeled))
    return pi, weight_only, err_prior(proportions, gamma, sizes)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("with_known", [False, True])
def test_vectorized_scores_equal_the_metrics_row_by_row(n_classes, with_known):
    bag_codes, cluster_codes, proportions = random_clustering(3, n_classes=n_classes)
    known = None
    if with_known:
        known = np.full(len(bag_codes), -1)
        known[::7] = np.random.RandomState(1).randint(n_classes, size=len(known[::7]))
    stats = labeling_statistics(bag_codes, cluster_codes, proportions, 4, known)
    labelings = np.array(list(itertools.product(range(n_classes), repeat=4)))
    pi, _ = labeling_errors(stats, labelings, "err_pi")
    weight, _ = labeling_errors(stats, labelings, "err_weight")
    for row, labeling in enumerate(labelings):
        ref_pi, ref_weight, _ = reference_errors(
            bag_codes, cluster_codes, proportions, labeling, known
        )
        assert pi[row] == pytest.approx(ref_pi, rel=1e-9, abs=1e-15)
        assert weight[row] == pytest.approx(ref_weight, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fitness", ["err_pi", "err_weight"])
def test_exhaustive_labeling_finds_the_brute_force_optimum(seed, fitness):
    bag_codes, cluster_codes, proportions = random_clustering(seed, k=5, n_classes=2)
    stats = labeling_statistics(bag_codes, cluster_codes, proportions, 5)
    labels, value, _ = label_clusters(stats, "exhaustive", fitness)
    column = 0 if fitness == "err_pi" else 1
    brute = min(
        reference_errors(bag_codes, cluster_codes, proportions, labeling)[column]
        for labeling in itertools.product(range(2), repeat=5)
    )
    assert value == pytest.approx(brute, rel=1e-9, abs=1e-15)
    assert reference_errors(bag_codes, cluster_codes, proportions, labels)[column] == (
        pytest.approx(brute, rel=1e-9, abs=1e-15)
    )


@pytest.mark.parametrize("seed", range(5))
def test_greedy_equals_exhaustive_when_every_bag_lies_in_one_cluster(seed):
    # Then Gamma of a bag depends on its own cluster's label only, Err_weight (eq. 6) is a sum
    # of per-cluster terms, and Alg. 2's cluster-by-cluster choice is the global optimum.
    rng = np.random.RandomState(seed)
    h, k, n_classes = 15, 5, 3
    bag_cluster = rng.randint(k, size=h)
    bag_cluster[:k] = np.arange(k)
    bag_codes = np.repeat(np.arange(h), rng.randint(3, 20, size=h))
    cluster_codes = bag_cluster[bag_codes]
    proportions = rng.dirichlet(np.ones(n_classes), size=h)
    stats = labeling_statistics(bag_codes, cluster_codes, proportions, k)
    greedy, greedy_err, _ = label_clusters(stats, "greedy", "err_weight")
    exhaustive, exhaustive_err, _ = label_clusters(stats, "exhaustive", "err_weight")
    np.testing.assert_array_equal(greedy, exhaustive)
    assert greedy_err == pytest.approx(exhaustive_err)


def test_exhaustive_labeling_refuses_an_intractable_search():
    bag_codes, cluster_codes, proportions = random_clustering(0, k=30)
    stats = labeling_statistics(bag_codes, cluster_codes, proportions, 30)
    with pytest.raises(ValueError, match="labeling='greedy'"):
        label_clusters(stats, "exhaustive")


def test_cluster_compositions_are_recovered_from_bag_counts():
    rng = np.random.RandomState(0)
    h, k = 200, 4
    theta = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5], [0.05, 0.95]])
    per_bag = np.vstack([rng.multinomial(40, rng.dirichlet(np.ones(k) * 0.5)) for _ in range(h)])
    bag_codes = np.repeat(np.repeat(np.arange(h), k), per_bag.ravel())
    cluster_codes = np.repeat(np.tile(np.arange(k), h), per_bag.ravel())
    proportions = (per_bag @ theta) / per_bag.sum(axis=1, keepdims=True)
    estimate = cluster_compositions(bag_codes, cluster_codes, proportions, k)
    np.testing.assert_allclose(estimate, theta, atol=0.02)
    np.testing.assert_allclose(estimate.sum(axis=1), 1.0)
