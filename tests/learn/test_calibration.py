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
