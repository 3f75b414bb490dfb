"""Synthetic LLP problems for tests and benchmarks: labeled data cut into bags.

``bags_from_labels`` turns any labeled set into an LLP problem the way the papers' protocols
do (random bags of a fixed size, the last one smaller); ``bags_with_varied_shares`` cuts bags
whose shares spread out, as a plant's charges do; ``make_gaussian_mixture`` is the
two-Gaussian mixture of Stolpe & Morik's run-time experiment (Sect. 4.4, Fig. 3);
``make_xor`` is an interaction no linear model can rank (defective when too cold *and* too
much force, or too hot and too little), the test set of the nonlinear learners.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.utils import check_random_state

__all__ = ["bags_from_labels", "bags_with_varied_shares", "make_gaussian_mixture", "make_xor"]


def bags_from_labels(
    y, bag_size: int, *, random_state=None, classes=None
) -> tuple[np.ndarray, pd.Series | pd.DataFrame]:
    """Random bags of ``bag_size`` rows (the last may be smaller) and their true proportions.

    Returns ``(bags, proportions)``: integer bag ids per row, and a Series of class-1 shares
    when ``y`` is binary 0/1 (or -1/+1) and ``classes`` is None, else a DataFrame with one
    column per class.
    """
    y = np.asarray(y)
    rng = check_random_state(random_state)
    bags = np.empty(len(y), dtype=np.int64)
    bags[rng.permutation(len(y))] = np.arange(len(y)) // int(bag_size)
    labels = np.unique(y) if classes is None else np.asarray(classes)
    binary = classes is None and set(labels.tolist()) <= {0, 1, -1}
    if binary:
        positive = (y == 1).astype(float)
        shares = pd.Series(positive).groupby(bags).mean()
        shares.index.name = "bag"
        return bags, shares.rename("share")
    table = pd.crosstab(bags, y, normalize="index").reindex(columns=labels, fill_value=0.0)
    table.index.name = "bag"
    table.columns.name = None
    return bags, table


def bags_with_varied_shares(
    y, bag_size: int, *, noise: float = 1.5, random_state=0
) -> tuple[np.ndarray, pd.Series]:
    """Bags of ``bag_size`` rows whose positive shares spread over [0, 1], and those shares.

    Rows are ordered by their 0/1 label plus uniform noise on [0, ``noise``) and cut in that
    order, so neighbouring rows share a bag. Random bags of many rows all have shares near the
    prior, which tells a learner little (pSVM paper Sect. 7.1); a plant's charges differ.
    """
    y = np.asarray(y)
    noisy = y + check_random_state(random_state).uniform(0.0, noise, len(y))
    bags = np.empty(len(y), dtype=np.int64)
    bags[np.argsort(noisy, kind="stable")] = np.arange(len(y)) // int(bag_size)
    shares = pd.Series((y == 1).astype(float)).groupby(bags).mean()
    shares.index.name = "bag"
    return bags, shares.rename("share")


def make_gaussian_mixture(
    n_samples: int,
    n_features: int = 10,
    *,
    separation: float = 1.5,
    positive_share: float = 0.5,
    random_state=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian classes, features min-max normalised to [0, 1] (Stolpe & Morik Sect. 4.4).

    The class means differ by ``separation`` standard deviations along every feature. Returns
    ``(X, y)`` with y in {0, 1}.
    """
    rng = check_random_state(random_state)
    y = (rng.random_sample(n_samples) < positive_share).astype(np.int64)
    X = rng.standard_normal((n_samples, n_features))
    X += separation * y[:, None]
    X -= X.min(axis=0)
    X /= X.max(axis=0)
    return X, y


def make_xor(
    n_samples: int, n_noise: int = 2, *, random_state=None
) -> tuple[np.ndarray, np.ndarray]:
    """An XOR-like interaction: ``y = 1`` where ``x0 * x1 > 0``, features uniform on [-1, 1].

    ``n_noise`` further uniform features carry no signal. Every linear score ranks the classes
    at chance (ROC AUC about 0.5): each class has the same mean along every direction. Returns
    ``(X, y)`` with y in {0, 1}, about half positive.
    """
    rng = check_random_state(random_state)
    X = rng.uniform(-1.0, 1.0, size=(n_samples, 2 + n_noise))
    y = (X[:, 0] * X[:, 1] > 0).astype(np.int64)
    return X, y
