"""Bag calibration: probabilities whose bag means match the bags' shares."""

import numpy as np
import pandas as pd

from qcllp.learn.calibration import BagCalibrator
from qcllp.learn.synthetic import bags_from_labels


def _scored_bags(seed: int):
    rng = np.random.RandomState(seed)
    y = (rng.random_sample(3000) < 0.3).astype(int)
    decision = 3.0 * (2 * y - 1) + rng.standard_normal(len(y)) * 2.0 - 4.0
    bags, shares = bags_from_labels(y, 30, random_state=seed)
    return y, decision, bags, shares


def test_mean_probability_per_bag_matches_the_share():
    y, decision, bags, shares = _scored_bags(0)
    cal = BagCalibrator().fit(decision, bags, shares.to_numpy())
    p = cal.predict(decision)
    mean_p = pd.Series(p).groupby(bags).mean()
    assert np.abs(mean_p - shares).mean() < 0.05
    # shifted decision values (offset -4) would read as ~0 % everywhere without calibration
    assert abs(p.mean() - y.mean()) < 0.02


def test_calibrated_map_is_monotone_and_informative():
    _, decision, bags, shares = _scored_bags(1)
    cal = BagCalibrator().fit(decision, bags, shares.to_numpy())
    assert cal.slope_ > 0
    grid = np.linspace(-10, 10, 50)
    assert np.all(np.diff(cal.predict(grid)) > 0)


def test_uninformative_scores_get_the_overall_share():
    rng = np.random.RandomState(2)
    bags = np.repeat(np.arange(50), 20)
    shares = np.full(50, 0.2)
    cal = BagCalibrator().fit(rng.standard_normal(1000), bags, shares)
    assert abs(cal.predict(np.zeros(1)) - 0.2).max() < 0.02


# ----------------------------------------------------------------------------- counts
def test_poisson_binomial_of_equal_probabilities_is_the_binomial():
    from scipy.stats import binom

    from qcllp.learn.calibration import poisson_binomial_logpmf

    codes = np.repeat(np.arange(3), [5, 7, 9])
    got = poisson_binomial_logpmf(np.full(21, 0.3), codes, np.array([2, 0, 9]))
    np.testing.assert_allclose(np.exp(got), binom.pmf([2, 0, 9], [5, 7, 9], 0.3), rtol=1e-12)
    # unequal probabilities: against brute force over all 2^4 outcomes of one bag
    p = np.array([0.1, 0.5, 0.8, 0.3])
    outcomes = np.array(np.meshgrid(*[[0, 1]] * 4)).reshape(4, -1).T
    weight = np.prod(np.where(outcomes == 1, p, 1 - p), axis=1)
    brute = np.bincount(outcomes.sum(axis=1), weight)
    got = [np.exp(poisson_binomial_logpmf(p, np.zeros(4, int), np.array([k])))[0] for k in range(5)]
    np.testing.assert_allclose(got, brute, rtol=1e-12)
    assert poisson_binomial_logpmf(p, np.zeros(4, int), np.array([5]))[0] < -600  # impossible


def _overconfident_scores(seed: int):
    """Scores whose true map is sigmoid(1.5 f - 2): a model twice too sure would use 3 f."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 80, 150)
    codes = np.repeat(np.arange(150), sizes)
    f = rng.normal(size=len(codes)) + 0.5 * rng.normal(size=150)[codes]
    y = rng.random(len(f)) < 1 / (1 + np.exp(-(1.5 * f - 2)))
    return f, codes, np.bincount(codes, y, minlength=150)


def test_count_calibrator_recovers_the_true_slope_from_counts_alone():
    from qcllp.learn.calibration import CountCalibrator

    f, codes, counts = _overconfident_scores(0)
    cal = CountCalibrator().fit(f, codes, counts)
    assert abs(cal.slope_ - 1.5) < 0.25 and abs(cal.intercept_ + 2.0) < 0.25
    assert np.all(np.diff(cal.predict(np.linspace(-5, 5, 20))) > 0)


def test_counts_penalize_hard_probabilities_that_bag_means_accept():
    """0/1 probabilities with the right number of ones per bag match every share (the mean
    criterion is content) but are impossible under the counts unless the ranking is perfect."""
    from qcllp.learn.calibration import CountCalibrator, poisson_binomial_logpmf

    f, codes, counts = _overconfident_scores(1)
    honest = CountCalibrator().fit(f, codes, counts).predict(f)
    hard = 1 / (1 + np.exp(-(20 * f - 26)))  # nearly 0/1 with about the right rate
    ll_honest = poisson_binomial_logpmf(honest, codes, counts).sum()
    ll_hard = poisson_binomial_logpmf(hard, codes, counts).sum()
    assert ll_honest > ll_hard + 1000
