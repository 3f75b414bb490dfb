"""The lock-out rule of a fitted model and the scorer's guard bounds, decided on its
charge-grouped out-of-fold probabilities.

**Recalibration.** The learners calibrate their probabilities on their own training charges,
where the latent labels were fitted: out of fold they are over-confident, and a threshold
chosen on them locks out good sticks. So a second calibration (a monotone sigmoid on the
logit) is fitted on the out-of-fold probabilities by the likelihood of the charges' failing
*counts* (Poisson-binomial, :class:`qcllp.learn.calibration.CountCalibrator`), which, unlike
matching the charges' mean shares, penalizes over-confidence; it is stored with the model, the
threshold is chosen on recalibrated probabilities and the scorer applies it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone

from qcllp.learn.calibration import CountCalibrator, poisson_binomial_logpmf
from qcllp.plant.config import PlantConfig
from qcllp.station.guard_bounds import lockout_excess_bound, lockout_rate_bound
from qcllp.station.lockout_rule import (
    LockoutCosts,
    SavingEstimate,
    ThresholdChoice,
    count_calibration,
    expected_saving,
    lockout_rule,
)
from qcllp.station.model import FailureView, logit
from qcllp.training.evaluate import Evaluation, cross_validate_charges, score_probabilities
from qcllp.training.labeled import LabeledData
from qcllp.training.plan import TrainingPlan

__all__ = [
    "LockoutDecision",
    "OutOfFold",
    "decide_lockout",
    "fit_proportions",
    "out_of_fold",
    "station_costs",
]


def station_costs(config: PlantConfig, station: str) -> LockoutCosts:
    """The lock-out costs of a station from the plant config."""
    st = config.station(station)
    return LockoutCosts(st.fail_cost, st.good_cost)


def fit_proportions(plan: TrainingPlan, data: LabeledData) -> pd.Series | pd.DataFrame:
    """What the plan's estimator is fitted on: the per-type shares or the target's."""
    return data.type_shares if plan.per_type else data.proportions


@dataclass(frozen=True)
class OutOfFold:
    """A model's out-of-fold failure probabilities on the training charges and their count
    recalibration: what the lock-out rule and :func:`choose_any_defect` are decided on."""

    raw: np.ndarray  # out of fold, before the recalibration
    decision: np.ndarray  # logit(raw): what the recalibration maps
    probability: np.ndarray  # recalibrated
    codes: np.ndarray  # charge of each stick, 0..h-1
    positives: np.ndarray  # failing sticks per charge among its rows
    recalibration: CountCalibrator
    calibrate: Callable  # refits the recalibration (bootstrap replicates)
    count_loglik: float  # per charge: log P(its failing count | recalibrated probabilities)


def out_of_fold(
    plan: TrainingPlan, data: LabeledData, estimator: BaseEstimator, folds: int
) -> OutOfFold:
    """Charge-grouped out-of-fold probabilities of ``estimator`` and their recalibration,
    fitted by the likelihood of the charges' failing counts among their rows
    (:class:`qcllp.learn.calibration.CountCalibrator`, module docstring)."""
    X, bags, shares = data.features.X, data.bags, data.failing_shares
    raw = cross_validate_charges(
        lambda: FailureView(clone(estimator)),
        X,
        bags,
        shares,
        n_splits=folds,
        random_state=plan.seed,
        fit_proportions=fit_proportions(plan, data),
    ).probability
    codes, uniques = pd.factorize(bags)
    positives = shares.reindex(uniques).to_numpy() * np.bincount(codes)  # among the rows
    decision = logit(raw)
    recalibration, calibrate = count_calibration(decision, codes, positives)
    p = recalibration.predict(decision)
    loglik = float(np.mean(poisson_binomial_logpmf(p, codes, positives)))
    return OutOfFold(raw, decision, p, codes, positives, recalibration, calibrate, loglik)


@dataclass(frozen=True)
class LockoutDecision:
    """Out-of-fold evidence of a model and the lock-out rule chosen on it."""

    recalibration: CountCalibrator
    choice: ThresholdChoice
    costs: LockoutCosts
    evaluation: Evaluation
    raw_probability: np.ndarray  # out of fold, before the recalibration
    saving: SavingEstimate  # of the rule, on charges it did not see
    lockout_rate_bound: float  # the most a healthy model locks out (scorer's guard)
    lockout_excess_bound: float  # the most it locks out beyond that in a run (the same)
    count_loglik: float  # per charge: log P(its failing count | recalibrated probabilities)


def decide_lockout(
    plan: TrainingPlan, data: LabeledData, oof: OutOfFold, costs: LockoutCosts, folds: int
) -> LockoutDecision:
    """The lock-out threshold on the recalibrated out-of-fold probabilities.

    The threshold is the one with the best bootstrap lower bound of the saving, or none
    (:func:`qcllp.station.lockout_rule.lockout_rule`), the saving it brings is estimated on
    held-out charges
    with an interval (:func:`qcllp.station.lockout_rule.expected_saving`; exactly 0 when the rule
    declined:
    the model locks out nothing), and the evaluation is of the recalibrated probabilities at
    that threshold.
    """
    decision, p, codes, positives = oof.decision, oof.probability, oof.codes, oof.positives
    rule = {"n_boot": plan.bootstrap, "random_state": plan.seed}
    choice = lockout_rule(decision, codes, positives, costs, oof.calibrate, **rule)
    saving = expected_saving(
        choice, decision, codes, positives, costs, oof.calibrate, groups=folds, **rule
    )
    evaluation = score_probabilities(p, data.bags, data.failing_shares, threshold=choice.threshold)
    bound = lockout_rate_bound(p, codes, choice.threshold, random_state=plan.seed)
    excess = lockout_excess_bound(p, codes, choice.threshold, bound, random_state=plan.seed)
    return LockoutDecision(
        oof.recalibration,
        choice,
        costs,
        evaluation,
        oof.raw,
        saving,
        bound,
        excess,
        oof.count_loglik,
    )
