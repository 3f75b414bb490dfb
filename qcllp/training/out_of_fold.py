"""A model's out-of-fold failure probabilities on its training charges and their count
recalibration: what the lock-out rule (:mod:`qcllp.training.lockout`, whose module docstring
says why counts and which units) and the choice of the any-defect way are decided on. The
folds' models are the grid search's when it kept them (:class:`qcllp.training.search.
SearchResult`), else fitted here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone

from qcllp.learn.calibration import CountCalibrator, poisson_binomial_logpmf
from qcllp.station.lockout_rule import count_calibration
from qcllp.station.model import FailureView, logit
from qcllp.training.evaluate import FoldModels, cross_validate_charges
from qcllp.training.labeled import LabeledData
from qcllp.training.plan import TrainingPlan

__all__ = ["OutOfFold", "calibration_units", "fit_proportions", "known_failing", "out_of_fold"]


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
    codes: np.ndarray  # unit of each stick: its charge, or its own when inspected
    positives: np.ndarray  # failing sticks per unit (the lock-out module's docstring)
    recalibration: CountCalibrator
    calibrate: Callable  # refits the recalibration (bootstrap replicates)
    count_loglik: float  # per unit: log P(its failing count | recalibrated probabilities)
    charge_codes: np.ndarray | None = None  # charge of each stick, 0..h-1 (guard bounds)

    @property
    def charges(self) -> np.ndarray:
        """The charge of each stick, 0..h-1 (the units' codes when none was inspected)."""
        return self.codes if self.charge_codes is None else self.charge_codes


def out_of_fold(
    plan: TrainingPlan,
    data: LabeledData,
    estimator: BaseEstimator,
    folds: int,
    fitted: FoldModels | None = None,
) -> OutOfFold:
    """Charge-grouped out-of-fold probabilities of ``estimator`` and their recalibration,
    fitted by the likelihood of the charges' failing counts among their rows
    (:class:`qcllp.learn.calibration.CountCalibrator`, the lock-out module's docstring);
    inspected sticks are known labels of the fits and units of their own in the
    recalibration.

    ``fitted``: the grid search's fits of ``estimator``'s parameters on these folds
    (:class:`qcllp.training.search.SearchResult`): the same fits this would make, so they
    are used rather than made again (a fifth to a third of a training's fits)."""
    X, bags, shares = data.features.X, data.bags, data.failing_shares
    if fitted is not None:
        fitted = FoldModels([FailureView(m) for m in fitted.estimators], fitted.test_rows)
    raw = cross_validate_charges(
        lambda: FailureView(clone(estimator)),
        X,
        bags,
        shares,
        n_splits=folds,
        random_state=plan.seed,
        fit_proportions=fit_proportions(plan, data),
        known=data.known(per_type=plan.per_type),
        fitted=fitted,
    ).probability
    charges, uniques = pd.factorize(bags)
    positives = shares.reindex(uniques).to_numpy() * np.bincount(charges)  # among the rows
    codes, positives = calibration_units(charges, positives, known_failing(data))
    decision = logit(raw)
    recalibration, calibrate = count_calibration(decision, codes, positives)
    p = recalibration.predict(decision)
    loglik = float(np.mean(poisson_binomial_logpmf(p, codes, positives)))
    inspected = codes is not charges
    return OutOfFold(
        raw,
        decision,
        p,
        codes,
        positives,
        recalibration,
        calibrate,
        loglik,
        charges if inspected else None,
    )


def known_failing(data: LabeledData) -> np.ndarray | None:
    """Per row 1/0 where the stick was inspected and failed / did not (the target's failure:
    any defect for ``multiclass``), NaN elsewhere; ``None`` without inspected rows."""
    if data.target == "multiclass":
        return replace(data, target="defective").known()
    return data.known()


def calibration_units(
    charges: np.ndarray, positives: np.ndarray, failing: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The units the recalibration and the lock-out rule stand on (the lock-out module's
    docstring): per row its unit's code and per unit its failing count. ``charges``: charge
    of each row 0..h-1; ``positives``: failing rows per charge (final QC's count among the
    rows); ``failing``: 1/0 per inspected row, NaN elsewhere (``None``: none inspected, the
    charges are the units, returned as given). Units 0..h-1 are the charges' uninspected
    rows, h.. the inspected rows in row order."""
    if failing is None:
        return charges, positives
    inspected = ~np.isnan(failing)
    h = len(positives)
    known_bad = np.bincount(charges[inspected], failing[inspected], minlength=h)
    left = np.bincount(charges[~inspected], minlength=h)
    reduced = np.clip(positives - known_bad, 0.0, left)
    codes = charges.copy()
    codes[inspected] = h + np.arange(int(inspected.sum()))
    return codes, np.concatenate([reduced, failing[inspected]])
