"""Algorithms for learning from label proportions: arrays in, estimators out.

Nothing here reads files, touches a database or loads configuration, so every learner can be
read, tested and benchmarked on a numpy array alone.

Where things live:

* the contract: :mod:`.problem` (input validation), :mod:`.base` and :mod:`.margin` (estimator
  bases, one-vs-rest, :mod:`.calibration`), :mod:`.params` (parameter constraints),
  :mod:`.metrics`, :mod:`.model_selection` (bag-aware folds and grid search);
* Stolpe & Morik 2011: :mod:`.kmeans_labeler` with :mod:`.cluster_labeling`;
* the proportion-SVMs of Yu et al. 2013: :mod:`.alter_psvm` (Alg. 1) on the shared
  :mod:`.alternating` engine, :mod:`.svm_step` and :mod:`.label_step`; :mod:`.twin_psvm`
  (Wang et al., Alg. 1) on the same engine; :mod:`.conv_psvm` (Alg. 2) on the WellSVM solver;
* WellSVM (Li et al. 2013): :mod:`.wellsvm` (estimator), :mod:`.wellsvm_labels` (label
  spaces), :mod:`.wellsvm_solver` (cutting plane and label-kernel learning);
* the nonlinear learners of tabular LLP (issue "Beyond the seeds"): :mod:`.llpfc` (Zhang, Wang
  & Scott 2022: bag pairs as a label-noise problem, forward-corrected), :mod:`.mean_maps`
  (Patrini et al. 2014: Laplacian and alternating mean map), :mod:`.proportion_boosting`
  (DLLP's bag loss on gradient-boosted trees), :mod:`.em_llp` (EM with a boosted or logistic
  base), with :mod:`.binning` (quantile bins of the tree learners);
* :mod:`.per_defect` (any-defect probability from one model per defect type);
* :mod:`.baselines` (InvCal, MeanMap), :mod:`.kernels` (feature maps), :mod:`.synthetic`
  (bags cut from labeled data), :mod:`.threads`.
"""

from .alter_psvm import AlterPSVM
from .base import LLPClassifierMixin
from .baselines import InvCal, MeanMap
from .conv_psvm import ConvPSVM
from .em_llp import EMLLP
from .kmeans_labeler import KMeansLabeler
from .llpfc import LLPFC
from .mean_maps import AlternatingMeanMap, LaplacianMeanMap
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
from .per_defect import PerDefectClassifier
from .problem import LLPProblem, check_features, check_llp_input, counts_to_shares
from .proportion_boosting import ProportionBoosting
from .twin_psvm import TwinPSVM
from .wellsvm import WellSVM

__all__ = [
    "AlterPSVM",
    "AlternatingMeanMap",
    "ConvPSVM",
    "EMLLP",
    "InvCal",
    "LLPFC",
    "LaplacianMeanMap",
    "MeanMap",
    "PerDefectClassifier",
    "ProportionBoosting",
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
