"""Synthetic LLP problems: bags whose shares are the true label shares."""

from __future__ import annotations

import numpy as np

from qcllp.learn.synthetic import bags_from_labels, bags_with_varied_shares


def _labels(n: int = 4000, share: float = 0.3) -> np.ndarray:
    return (np.random.RandomState(0).rand(n) < share).astype(int)


def test_varied_bags_have_their_true_shares_and_the_asked_size():
    y = _labels()
    bags, shares = bags_with_varied_shares(y, 64)
    assert np.bincount(bags)[:-1].tolist() == [64] * (len(y) // 64)
    assert np.allclose(shares.to_numpy(), [y[bags == b].mean() for b in shares.index])


def test_varied_bags_spread_their_shares_far_more_than_random_bags():
    y = _labels()
    _, varied = bags_with_varied_shares(y, 256)
    _, random = bags_from_labels(y, 256, random_state=0)
    assert varied.std() > 3 * random.std()
    assert varied.min() < 0.05 and varied.max() > 0.5  # the prior is 0.3


def test_varied_bags_are_fixed_by_the_seed():
    y = _labels()
    first, second, other = (bags_with_varied_shares(y, 64, random_state=s)[0] for s in (1, 1, 2))
    assert np.array_equal(first, second) and not np.array_equal(first, other)
