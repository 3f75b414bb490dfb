"""The shared data sets of the learner tests: the pSVM toy set, heart in random bags, and an
XOR-like interaction in bags of varied shares (the nonlinear learners' test)."""

from __future__ import annotations

import pandas as pd

from qcllp.datasets import load_heart, load_toy
from qcllp.learn.synthetic import bags_from_labels, bags_with_varied_shares, make_xor


def toy():
    """The pSVM paper's Fig. 1 set: X, bags (1, 2), shares (0.6, 0.4), true 0/1 labels."""
    df = load_toy()
    y = (df["label"] == 1).astype(int).to_numpy()
    bags = df["bag"].to_numpy()
    return df[["x1", "x2"]].to_numpy(), bags, pd.Series(y).groupby(bags).mean(), y


def heart(bag_size: int, seed: int = 0):
    """Statlog heart in random bags of ``bag_size``: X, bags, shares, true 0/1 labels."""
    df = load_heart()
    y = (df["label"] == 1).astype(int).to_numpy()
    bags, shares = bags_from_labels(y, bag_size, random_state=seed)
    return df.drop(columns="label").to_numpy(), bags, shares, y


def xor(n_samples: int = 2000, bag_size: int = 50, seed: int = 0):
    """:func:`~qcllp.learn.synthetic.make_xor` in bags of ``bag_size`` whose shares spread over
    [0, 1] (as a plant's charges): X, bags, shares, true 0/1 labels."""
    X, y = make_xor(n_samples, random_state=seed)
    bags, shares = bags_with_varied_shares(y, bag_size, random_state=seed)
    return X, bags, shares, y
