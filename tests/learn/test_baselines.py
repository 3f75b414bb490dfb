"""InvCal and MeanMap: faithful baselines that fail where their bag-mean assumption fails."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qcllp.learn.baselines import InvCal, MeanMap, bag_means

from .psvm_data import heart, toy


@pytest.mark.parametrize("model", [InvCal(), InvCal(C_p=10.0, epsilon=0.1), MeanMap()])
def test_bag_mean_methods_fail_on_the_toy_set(model):
    # the 60 %-positive bag's mean lies on the negative side (pSVM paper Fig. 1c)
    X, bags, shares, y = toy()
    assert (model.fit(X, bags, shares).predict(X) == y).mean() <= 0.5


@pytest.mark.parametrize("model", [InvCal(), MeanMap(), MeanMap(kernel="rbf", gamma=0.1)])
def test_bag_mean_methods_learn_heart_with_small_bags(model):
    X, bags, shares, y = heart(4)
    assert (model.fit(X, bags, shares).predict(X) == y).mean() >= 0.75


def test_bag_means_are_the_per_bag_averages():
    rng = np.random.RandomState(0)
    X = rng.standard_normal((50, 3))
    codes = rng.randint(0, 7, 50)
    expected = pd.DataFrame(X).groupby(codes).mean().to_numpy()
    assert np.allclose(bag_means(X, codes, 7), expected)


def test_meanmap_recovers_class_means_from_bag_means():
    # two well separated classes, bags with varied shares: the decision must follow the classes
    rng = np.random.RandomState(1)
    y = (rng.random_sample(2000) < 0.5).astype(int)
    X = rng.standard_normal((2000, 2)) + 3.0 * y[:, None]
    order = np.argsort(y + rng.random_sample(2000) * 1.5)  # bags of mixed, varied shares
    bags = np.empty(2000, dtype=int)
    bags[order] = np.arange(2000) // 100
    shares = pd.Series(y).groupby(bags).mean()
    model = MeanMap(reg=0.1).fit(X, bags, shares)
    assert (model.predict(X) == y).mean() >= 0.95


@pytest.mark.parametrize(
    "model", [InvCal(C_p=0.0), InvCal(epsilon=-1.0), MeanMap(reg=-1.0), MeanMap(kernel="poly")]
)
def test_bad_parameters_raise_value_error(model):
    X, bags, shares, _ = toy()
    with pytest.raises(ValueError):
        model.fit(X, bags, shares)
