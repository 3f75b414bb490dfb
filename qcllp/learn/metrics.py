"""Error measures for learning from label proportions.

Stolpe & Morik (2011), Sect. 2.1-2.2: the label proportion matrix Pi (h bags x l classes),
the sample proportions eta (eq. 2), the model-based proportions Gamma_g (eq. 3) and the errors
Err_MSE (eq. 4), Err_weight (eq. 6), Err_prior (eq. 7), Err_Pi (eq. 5) and its extension by the
loss on individually labeled instances, Err_T (eq. 8). Yu et al. (2013), eq. 23: the bag-level
validation error sum_k |p~_k - p_k|, which needs no instance labels and so can select models
on held-out bags.

The matrix functions take ``proportions`` (h, l) and ``bag_sizes`` (h,) as arrays; the
``*_from_labels`` helpers accept the raw ``bags``/``proportions`` inputs of an estimator.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qcllp.learn.core.problem import plain_value

__all__ = [
    "bag_error",
    "bag_error_from_labels",
    "err_mse",
    "err_pi",
    "err_prior",
    "err_t",
    "err_weight",
    "eta",
    "model_proportions",
]


def eta(proportions: np.ndarray, bag_sizes: np.ndarray) -> np.ndarray:
    """Share of each class over the whole sample, eq. (2): (1/n) sum_i |G_i| pi_ij."""
    sizes = np.asarray(bag_sizes, dtype=float)
    return sizes @ np.asarray(proportions, dtype=float) / sizes.sum()


def model_proportions(
    label_codes: np.ndarray, bag_codes: np.ndarray, n_bags: int, n_classes: int
) -> np.ndarray:
    """Gamma_g of eq. (3): per bag, the share of rows the model assigns to each class.

    ``label_codes`` and ``bag_codes`` are integer codes (class index, bag index) per row.
    """
    flat = np.asarray(bag_codes) * n_classes + np.asarray(label_codes)
    counts = np.bincount(flat, minlength=n_bags * n_classes).reshape(n_bags, n_classes)
    sizes = counts.sum(axis=1, keepdims=True)
    return counts / np.maximum(sizes, 1)


def err_mse(proportions: np.ndarray, gamma: np.ndarray) -> float:
    """Err_MSE of eq. (4): the mean squared difference over all h x l matrix entries."""
    return float(np.mean((np.asarray(proportions) - np.asarray(gamma)) ** 2))


def err_weight(proportions: np.ndarray, gamma: np.ndarray, bag_sizes: np.ndarray) -> float:
    """Err_weight of eq. (6): squared entry errors weighted by class share and bag size."""
    P = np.asarray(proportions, dtype=float)
    sizes = np.asarray(bag_sizes, dtype=float)
    h, l = P.shape
    weights = (sizes / sizes.sum())[:, None] * eta(P, sizes)[None, :]
    return float(np.sum(weights * (P - np.asarray(gamma)) ** 2) / (h * l))


def err_prior(proportions: np.ndarray, gamma: np.ndarray, bag_sizes: np.ndarray) -> float:
    """Err_prior of eq. (7): the mean squared difference of the class shares over the sample."""
    return float(np.mean((eta(proportions, bag_sizes) - eta(gamma, bag_sizes)) ** 2))


def err_t(known_codes: np.ndarray, predicted_codes: np.ndarray) -> float:
    """Err_T of eq. (8) with the 0/1 loss: the error rate on the labeled instances T."""
    known_codes = np.asarray(known_codes)
    if known_codes.size == 0:
        raise ValueError("Err_T needs at least one labeled instance")
    return float(np.mean(known_codes != np.asarray(predicted_codes)))


def err_pi(
    proportions: np.ndarray,
    gamma: np.ndarray,
    bag_sizes: np.ndarray,
    err_labeled: float | None = None,
) -> float:
    """Err_Pi, the LLP algorithm's fitness: eq. (5), or eq. (8) when ``err_labeled`` is given.

    eq. (5): sqrt(Err_weight * Err_prior); eq. (8): sqrt(Err_weight * Err_prior * Err_T). Note
    that eq. (8) is zero as soon as any one factor is zero; the paper states it so and the
    labeler uses it as written.
    """
    value = err_weight(proportions, gamma, bag_sizes) * err_prior(proportions, gamma, bag_sizes)
    if err_labeled is not None:
        value *= err_labeled
    return float(np.sqrt(value))


def bag_error(proportions: np.ndarray, gamma: np.ndarray) -> float:
    """Bag-level error of Yu et al. (2013) eq. (23): sum over bags of |p~_k - p_k|.

    For l > 2 classes the per-bag term is the total variation distance
    ``0.5 * sum_j |pi_kj - gamma_kj|``, which equals |p~_k - p_k| in the binary case, so one
    definition serves both. ``proportions`` and ``gamma`` are (h, l) matrices.
    """
    diff = np.abs(np.asarray(proportions, dtype=float) - np.asarray(gamma, dtype=float))
    return float(0.5 * diff.sum())


def bag_error_from_labels(
    bags, proportions: pd.Series | pd.DataFrame, y_pred, *, average: bool = True
) -> float:
    """eq. (23) for predicted labels ``y_pred`` of the rows in ``bags``.

    ``proportions`` follows the estimator contract (Series of class-1 shares or DataFrame with
    one column per class). With ``average=True`` (default) the sum is divided by the number of
    bags, so that folds with different numbers of bags are comparable.
    """
    bags_index = pd.Index(np.asarray(bags))
    if isinstance(proportions, pd.Series):
        classes = pd.Index([0, 1])
        table = np.column_stack([1.0 - proportions.to_numpy(float), proportions.to_numpy(float)])
    else:
        classes = pd.Index(proportions.columns)
        table = proportions.to_numpy(float)
    bag_codes = proportions.index.get_indexer(bags_index)
    if (bag_codes < 0).any():
        row = int(np.argmax(bag_codes < 0))
        raise ValueError(
            f"row {row}: bag {plain_value(bags_index[row])!r} has no entry in proportions"
        )
    label_codes = classes.get_indexer(pd.Index(np.asarray(y_pred)))
    if (label_codes < 0).any():
        row = int(np.argmax(label_codes < 0))
        raise ValueError(
            f"y_pred row {row}: {plain_value(np.asarray(y_pred)[row])!r} is not a class"
        )
    present = np.unique(bag_codes)
    gamma = model_proportions(label_codes, bag_codes, len(table), len(classes))[present]
    total = bag_error(table[present], gamma)
    return total / len(present) if average else total
