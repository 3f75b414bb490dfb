"""The shared data sets of the proportion-SVM tests: the pSVM toy set and heart in random bags."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from qcllp.learn.synthetic import bags_from_labels

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def toy():
    """The pSVM paper's Fig. 1 set: X, bags (1, 2), shares (0.6, 0.4), true 0/1 labels."""
    df = pd.read_csv(DATA / "toy.csv")
    y = (df["label"] == 1).astype(int).to_numpy()
    bags = df["bag"].to_numpy()
    return df[["x1", "x2"]].to_numpy(), bags, pd.Series(y).groupby(bags).mean(), y


def heart(bag_size: int, seed: int = 0):
    """Statlog heart in random bags of ``bag_size``: X, bags, shares, true 0/1 labels."""
    df = pd.read_csv(DATA / "heart.csv")
    y = (df["label"] == 1).astype(int).to_numpy()
    bags, shares = bags_from_labels(y, bag_size, random_state=seed)
    return df.drop(columns="label").to_numpy(), bags, shares, y
