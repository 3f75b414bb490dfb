"""Algorithms for learning from label proportions: arrays in, estimators out.

Nothing here reads files, touches a database or loads configuration, so every learner can be
read, tested and benchmarked on a numpy array alone.
"""

from .alter_psvm import AlterPSVM
from .base import LLPClassifierMixin
from .baselines import InvCal, MeanMap
from .conv_psvm import ConvPSVM
from .kmeans_labeler import KMeansLabeler
from .metrics import (
    bag_error,
    bag_error_from_labels,
    err_mse,
    err_pi,
    err_prior,
    err_t,
    err_weight,
    eta,
    model_proportions,
)
from .model_selection import BagGridSearchCV, BagKFold, bag_cross_val_error
from .problem import LLPProblem, check_features, check_llp_input, counts_to_shares
from .twin_psvm import TwinPSVM
from .wellsvm import WellSVM

__all__ = [
    "AlterPSVM",
    "ConvPSVM",
    "InvCal",
    "MeanMap",
    "TwinPSVM",
    "WellSVM",
    "BagGridSearchCV",
    "BagKFold",
    "KMeansLabeler",
    "LLPClassifierMixin",
    "LLPProblem",
    "bag_cross_val_error",
    "bag_error",
    "bag_error_from_labels",
    "check_features",
    "check_llp_input",
    "counts_to_shares",
    "err_mse",
    "err_pi",
    "err_prior",
    "err_t",
    "err_weight",
    "eta",
    "model_proportions",
]
