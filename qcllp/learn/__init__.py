"""Algorithms for learning from label proportions: arrays in, estimators out.

Nothing here reads files, touches a database or loads configuration, so every learner can be
read, tested and benchmarked on a numpy array alone.

Where things live, grouped by family as scikit-learn groups its estimators:

* :mod:`.core` -- the contract: input validation (``problem``), estimator bases and
  one-vs-rest (``base``, ``margin``), parameter constraints (``params``), feature maps
  (``kernels``), BLAS threads;
* :mod:`.metrics`, :mod:`.model_selection` (bag-aware folds and grid search) and
  :mod:`.calibration` (probabilities from scores on the bags' counts);
* :mod:`.psvm` -- the proportion-SVMs of Yu et al. 2013 (AlterPSVM, ConvPSVM) and Wang et al.
  (TwinPSVM) on their alternating engine, and WellSVM (Li et al. 2013) with its solver;
* :mod:`.cluster` -- Stolpe & Morik 2011: the k-means labeler with its evolutionary search;
* :mod:`.tabular` -- the nonlinear learners of tabular LLP: LLPFC (Zhang, Wang & Scott 2022),
  the mean maps (Patrini et al. 2014), proportion boosting (DLLP's bag loss on boosted trees),
  EM-LLP, with their quantile bins;
* :mod:`.baselines` (InvCal, MeanMap), :mod:`.per_defect` (any-defect probability from one
  model per defect type), :mod:`.synthetic` (bags cut from labeled data).

Every estimator is importable from here: ``from qcllp.learn import AlterPSVM``.
"""

from qcllp.learn.baselines import InvCal, MeanMap
from qcllp.learn.cluster.kmeans_labeler import KMeansLabeler
from qcllp.learn.core.base import LLPClassifierMixin
from qcllp.learn.core.problem import LLPProblem, check_features, check_llp_input, counts_to_shares
from qcllp.learn.metrics import (
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
from qcllp.learn.model_selection import BagGridSearchCV, BagKFold, bag_cross_val_error
from qcllp.learn.per_defect import PerDefectClassifier
from qcllp.learn.psvm.alter_psvm import AlterPSVM
from qcllp.learn.psvm.conv_psvm import ConvPSVM
from qcllp.learn.psvm.twin_psvm import TwinPSVM
from qcllp.learn.psvm.wellsvm import WellSVM
from qcllp.learn.tabular.em_llp import EMLLP
from qcllp.learn.tabular.llpfc import LLPFC
from qcllp.learn.tabular.mean_maps import AlternatingMeanMap, LaplacianMeanMap
from qcllp.learn.tabular.proportion_boosting import ProportionBoosting

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
