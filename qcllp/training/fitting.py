"""Fitting a station model and choosing among the ways to fit it: the search, the out-of-fold
validation and the lock-out decision of one plan (:func:`fit_station_model`), the way the
any-defect target is learned (:func:`choose_any_defect`) and the method ``auto`` keeps
(:func:`choose_method`); no I/O.

**The any-defect target** (``defective``, the lock-out decision) is learned by default as one
model per defect type, each searched and fitted on its own type's shares, their probabilities
summed (:class:`qcllp.learn.PerDefectClassifier`; ``training.any_defect`` in the plant
config). Defect types arise at different stations by different mechanisms; one model on the
summed shares must find a single direction for all of them and, on a simulated plant whose
types arise at different stations, ranks the fresh sticks clearly worse
(``benchmarks/bench_plant_quality.py``, docs/benchmarks.md).

``training.any_defect: auto`` trains both, the per-type models summed and one model on the
failing shares, and keeps the one whose recalibrated out-of-fold probabilities give the
charges' failing counts the higher likelihood (:func:`choose_any_defect`). Where one shared
cause drives every type (the simulator's default plant) the single model ranks better, since
each per-type model learns that cause from a third of the failures; ``auto`` finds it there
but is not the default: on the 60 simulated cases it ranked no better where the types arise
at their own stations and saved no more (docs/benchmarks.md, "Quality on the simulated plant").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from qcllp.learn.core.threads import single_threaded
from qcllp.station.lockout_rule import LockoutCosts, SavingEstimate, ThresholdChoice
from qcllp.station.model import StationModel
from qcllp.station.saving_estimate import charges_per_week
from qcllp.training.inspected import inspection_counts
from qcllp.training.labeled import LabeledData
from qcllp.training.lockout import (
    INSPECTED,
    LockoutDecision,
    audit_evidence,
    decide_lockout,
)
from qcllp.training.out_of_fold import known_failing, out_of_fold
from qcllp.training.plan import AUTO_ANY_DEFECT_MODES, TrainingPlan
from qcllp.training.search import Progress, SearchResult, search_parameters, search_per_type

__all__ = [
    "MethodTrial",
    "StationFit",
    "choose_any_defect",
    "choose_method",
    "fit_methods",
    "fit_station_model",
]


@dataclass(frozen=True)
class StationFit:
    """A fitted station model and the out-of-fold evidence its lock-out rule was chosen on."""

    model: StationModel
    decision: LockoutDecision


def fit_station_model(
    plan: TrainingPlan,
    data: LabeledData,
    costs: LockoutCosts,
    *,
    times: pd.Series | None = None,
    progress: Progress = None,
) -> StationFit:
    """Search, validate and decide: the station model of ``plan`` on ``data``, no I/O.

    ``times`` (per charge, optional) gives the training window recorded with the model.
    ``any_defect: auto``: both ways are searched and validated out of fold,
    :func:`choose_any_defect` keeps one, and only its lock-out rule is chosen (the bootstrap,
    most of a training's time, runs once); the model's params say which way
    (``any_defect``) and what each scored (``any_defect_auto``).

    Every fit runs on one BLAS / OpenMP thread: a training's parallelism is its processes
    (``training.n_jobs``, ``qcllp train --jobs``, a cluster's workers), and on a station's
    matrices the libraries' own thread pools, contending for the same cores, cost more than
    they give (docs/benchmarks.md, "One thread a training process").
    """
    with single_threaded():
        return _fit_station_model(plan, data, costs, times=times, progress=progress)


def _fit_station_model(
    plan: TrainingPlan,
    data: LabeledData,
    costs: LockoutCosts,
    *,
    times: pd.Series | None,
    progress: Progress,
) -> StationFit:
    """:func:`fit_station_model`'s work, on whatever threads the caller allows."""
    say = progress or (lambda _msg: None)
    folds = plan.folds_for(data.n_charges)
    modes = AUTO_ANY_DEFECT_MODES if plan.any_defect_auto else (plan.any_defect,)
    tried = {}
    for mode in modes:
        mine = replace(plan, any_defect=mode)
        what = "one model per defect type" if mine.per_type else plan.target
        say(
            f"{plan.station}: {plan.method.name} grid search ({what}) over {data.n_charges} "
            f"charges, {len(data.features.X)} sticks"
        )
        search = (search_per_type if mine.per_type else search_parameters)(mine, data, folds, say)
        say(f"{plan.station}: charge-grouped validation ({folds} folds)")
        tried[mode] = (mine, search, out_of_fold(mine, data, search.estimator, folds, search.folds))
    scores = {mode: t[2].count_loglik for mode, t in tried.items()}
    chosen = choose_any_defect(scores)
    plan, search, oof = tried[chosen]
    if len(tried) > 1:
        say(f"{plan.station}: any defect learned {chosen} ({_scored(scores)})")
        params = {**search.params, "any_defect": chosen, "any_defect_auto": scores}
        search = replace(search, params=params)
    decision = decide_lockout(plan, data, oof, costs, folds, charges_per_week(times))
    times = pd.Series(dtype="datetime64[ns, UTC]") if times is None else times
    return StationFit(_station_model(plan, data, search, decision, times), decision)


def choose_any_defect(scores: dict[str, float]) -> str:
    """The way of learning the any-defect target to keep, from each way's mean per-charge log
    likelihood of the failing counts under its recalibrated out-of-fold probabilities
    (:func:`out_of_fold`); ties keep the first (``per-type-sum``).

    Why this criterion: both ways end in the same kind of probability, recalibrated by the
    same three-parameter map on probabilities of charges the model did not see, so neither
    is favoured by its own fit, and the count likelihood is what the recalibration and the
    lock-out rule already stand on. It rewards a ranking that puts the failures where the
    counts are, which the bag-level error of mean shares (Yu et al. eq. 23) sees only through
    the charge means. On the 60 simulated plant cases it kept the way that ranks the fresh
    plant's sticks better in 44 (docs/benchmarks.md, "Quality on the simulated plant")."""
    return max(scores, key=scores.get)  # max keeps the first of equal ones


def _scored(scores: dict[str, float]) -> str:
    """Each way's count likelihood for the progress line, ``mode value`` comma-separated."""
    return ", ".join(f"{mode} {value:.3f}" for mode, value in scores.items())


@dataclass(frozen=True)
class MethodTrial:
    """One method tried by ``auto`` on a station: its bag-level CV error (Yu et al. eq. 23,
    held-out charges) and the saving its lock-out rule brings on held-out charges."""

    method: str
    cv_bag_error: float
    saving: SavingEstimate
    declined: bool
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "cv_bag_error": self.cv_bag_error,
            "expected_saving_per_1000": self.saving.per_1000,
            "saving_low_per_1000": self.saving.low,
            "saving_high_per_1000": self.saving.high,
            "lockout_declined": self.declined,
            "seconds": round(self.seconds, 1),
        }


def choose_method(trials: list[MethodTrial]) -> int:
    """The trial to keep: the largest expected saving on held-out charges (what a lock-out
    decision is for), ties -- typically every method declining, all at 0 -- broken by the
    lower bag-level CV error, then by the order tried."""
    keys = [
        (-t.saving.per_1000, t.cv_bag_error if np.isfinite(t.cv_bag_error) else np.inf, i)
        for i, t in enumerate(trials)
    ]
    return min(keys)[2]


def fit_methods(
    plans: list[TrainingPlan],
    data: LabeledData,
    costs: LockoutCosts,
    *,
    times: pd.Series,
    progress: Progress = None,
) -> tuple[list[StationFit], list[MethodTrial]]:
    """Every plan's station model (:func:`fit_station_model`, in the order given) and what each
    scored and took (:class:`MethodTrial`), for :func:`choose_method`."""
    fits, trials = [], []
    for plan in plans:
        started = time.perf_counter()
        fit = fit_station_model(plan, data, costs, times=times, progress=progress)
        fits.append(fit)
        trials.append(_trial(plan, fit, time.perf_counter() - started))
    return fits, trials


def _trial(plan: TrainingPlan, fit: StationFit, seconds: float) -> MethodTrial:
    """What a plan's fit scored and how long it took, as :func:`choose_method` compares it."""
    metrics = fit.model.metrics
    return MethodTrial(
        plan.method.name,
        float(metrics.get("cv_bag_error", float("nan"))),
        fit.decision.saving,
        bool(fit.decision.choice.declined),
        seconds,
    )


AUDIT_TOP = 0.02  # the top of the ranking the scorer may audit (metric ``audit_from``)


def _audit_from(p: np.ndarray | None) -> dict[str, float]:
    """Metric ``audit_from``: the recalibrated out-of-fold probability above which the top
    :data:`AUDIT_TOP` of the training sticks lay, the floor of the scorer's audit band when
    the model's probabilities stay below break-even (:func:`qcllp.scoring.audits.
    audit_floor`). Two per cent: about the share a first lock-out rule takes at these
    stations, so the audits look where a first lock-out would be, at a cost of that share
    inspected at the default ``audit_share`` (1). None when more than twice that share
    ties at the top (a model that gives many sticks one probability has no top to audit)."""
    if p is None or not len(p):
        return {}
    top = float(np.quantile(p, 1.0 - AUDIT_TOP))
    if np.mean(p >= top) > 2 * AUDIT_TOP:  # the top is one tied value: no ranking there
        return {}
    return {"audit_from": top}


def _audits(decision: LockoutDecision, data: LabeledData) -> dict[str, float]:
    """Metrics of the scorer's audit band: ``audit_from`` and the inspected evidence of
    whether its samples pay (:func:`qcllp.training.lockout.audit_evidence`)."""
    p = decision.evaluation.probability
    top = _audit_from(p)
    if p is None:
        return top
    evidence = audit_evidence(p, known_failing(data), decision.costs, top.get("audit_from"))
    return {**top, **evidence}


def _period(saving: SavingEstimate) -> dict[str, float]:
    """Metric ``saving_period_charges``: the charges of the week the saving's interval is
    for (:mod:`qcllp.station.saving_estimate`), when the charges' times gave one."""
    if saving.period_charges is None:
        return {}
    return {"saving_period_charges": float(saving.period_charges)}


def _threshold_evidence(choice: ThresholdChoice) -> dict[str, float]:
    """Metrics ``threshold_inspected`` and ``threshold_inspected_failing`` when the threshold
    rests on inspected precision (:func:`qcllp.training.lockout.inspected_threshold`): the
    promotion gate and the reports say so."""
    if choice.basis != INSPECTED:
        return {}
    return {
        "threshold_inspected": float(choice.inspected),
        "threshold_inspected_failing": float(choice.inspected_failing),
    }


def _station_model(
    plan: TrainingPlan,
    data: LabeledData,
    search: SearchResult,
    decision: LockoutDecision,
    times: pd.Series,
) -> StationModel:
    """The station model of a fit: the searched estimator, the lock-out rule and guard bounds
    decided out of fold, and the metrics, window and importances the registry records."""
    choice = decision.choice
    metrics = {
        **decision.evaluation.metrics,
        "cv_bag_error": search.cv_bag_error,
        "count_loglik": decision.count_loglik,
        "threshold": choice.threshold,
        "bayes_threshold": choice.bayes_threshold,
        "lockout_declined": float(choice.declined),
        "saving_bound_per_1000": choice.saving_bound_per_1000,
        "expected_saving_per_1000": decision.saving.per_1000,
        "saving_low_per_1000": decision.saving.low,
        "saving_high_per_1000": decision.saving.high,
        **_period(decision.saving),
        "lockout_rate_bound": decision.lockout_rate_bound,
        "lockout_excess_bound": decision.lockout_excess_bound,
        **_audits(decision, data),
        **_threshold_evidence(choice),
        **(data.subsample.metrics() if data.subsample is not None else {}),
        **inspection_counts(data.labels),
        **({"held_back_charges": float(data.held_back)} if data.held_back else {}),
        **({"saving_in_sample": 1.0} if decision.saving.basis == "in-sample" else {}),
    }
    X = data.features.X
    return StationModel(
        station=plan.station,
        method=plan.method.name,
        target=plan.target,
        estimator=search.estimator,
        features=tuple(X.columns),
        imputation=dict(data.features.imputation),
        threshold=choice.threshold,
        lockout_rate_bound=decision.lockout_rate_bound,
        lockout_excess_bound=decision.lockout_excess_bound,
        recalibration=decision.recalibration,
        costs=decision.costs,
        params=search.params,
        metrics=metrics,
        trained_from=_py_time(times.min()),
        trained_until=_py_time(times.max()),
        per_charge=decision.evaluation.per_charge,
        importances=_importances(X, decision.evaluation.probability),
    )


def _importances(X: pd.DataFrame, probability: np.ndarray) -> pd.Series:
    """Correlation of each feature with the predicted failure probability (model-agnostic),
    signed: positive where higher values go with more risk; largest magnitude first."""
    Z = X.to_numpy(float)
    Z = Z - Z.mean(axis=0)
    p = probability - probability.mean()
    denom = np.sqrt((Z * Z).sum(axis=0) * (p * p).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.where(denom > 0, (Z.T @ p) / denom, 0.0)
    order = np.argsort(-np.abs(corr), kind="stable")
    return pd.Series(corr[order], index=X.columns[order])


def _py_time(value) -> datetime | None:  # noqa: ANN001 - a timestamp or NaT
    """A charge time as a Python datetime for the registry; ``None`` when there is none."""
    return None if pd.isna(value) else pd.Timestamp(value).to_pydatetime()
