"""Training a station model from the plant database and recording it in the registry.

The charges with final-QC counts are the labeled bags; the station-s features of their sticks
are the rows (stations up to s only). The bag-aware grid search picks the hyper-parameters by
the bag-level error on held-out charges, the chosen model is refitted on all charges, its
out-of-fold probabilities (charge-grouped CV, never a charge split) give the honest
validation metrics and the cost-based lock-out threshold, and the artifact plus its metadata
enter the registry as a candidate.

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

**Recalibration.** The learners calibrate their probabilities on their own training charges,
where the latent labels were fitted: out of fold they are over-confident, and a threshold
chosen on them locks out good sticks. So a second calibration (a monotone sigmoid on the
logit) is fitted on the out-of-fold probabilities by the likelihood of the charges' failing
*counts* (Poisson-binomial, :class:`qcllp.learn.calibration.CountCalibrator`), which, unlike
matching the charges' mean shares, penalizes over-confidence; it is stored with the model, the
threshold is chosen on recalibrated probabilities and the scorer applies it.

**Large training sets** (``training.max_sticks``, :func:`subsample_charges`). When the labeled
charges hold more sticks than ``max_sticks`` (default 500,000), a seeded random subset of
*whole* charges is trained on (a charge is a bag: its count only means something for all its
sticks), chosen from the final-QC counts before any feature is read, so the features of the
other charges are never read. Every fit, the grid's, the folds' and the bootstrap rule's, runs
on that subset; the model's metrics record how many labeled charges and sticks there were
(``labeled_charges``, ``labeled_sticks``) and the limit (``max_sticks``).

The out-of-fold pass reuses the hyper-parameters chosen on all charges, so its figures are
slightly optimistic for the grid's choice; nesting the search would multiply the training
time by the number of folds, which a nightly retraining on two cores cannot afford
(``qcllp evaluate`` does nest it, for the engineer who wants the unbiased figure).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone

from qcllp.features import StationFeatures, station_features
from qcllp.learn import BagGridSearchCV, BagKFold, PerDefectClassifier, counts_to_shares
from qcllp.learn.calibration import CountCalibrator, poisson_binomial_logpmf
from qcllp.plant.config import DEFAULT_ANY_DEFECT, DEFAULT_BOOTSTRAP, PlantConfig
from qcllp.station.final_qc import sticks_qc_counted
from qcllp.station.guard_bounds import lockout_excess_bound, lockout_rate_bound
from qcllp.station.lockout_rule import (
    LockoutCosts,
    SavingEstimate,
    ThresholdChoice,
    count_calibration,
    expected_saving,
    lockout_rule,
)
from qcllp.station.model import FailureView, StationModel, logit
from qcllp.station.registry import register_model, save_station_model
from qcllp.store import Store
from qcllp.store.leases import HeldLease, station_lease_name
from qcllp.store.retention import retained_since
from qcllp.training.evaluate import Evaluation, cross_validate_charges, score_probabilities
from qcllp.training.methods import Method, canonical_name, method

__all__ = [
    "AUTO",
    "AUTO_METHODS",
    "LabeledData",
    "MethodTrial",
    "StationFit",
    "Subsample",
    "TrainingError",
    "TrainingPlan",
    "TrainingResult",
    "auto_methods",
    "choose_any_defect",
    "choose_method",
    "decide_lockout",
    "out_of_fold",
    "is_auto",
    "methods_to_try",
    "fit_proportions",
    "fit_station_model",
    "labeled_data",
    "labeled_from_frames",
    "record_model",
    "search_parameters",
    "search_per_type",
    "station_costs",
    "subsample_charges",
    "train_station",
    "train_stations",
    "training_plan",
]

Progress = Callable[[str], None] | None
AUTO_ANY_DEFECT = "auto"
AUTO_ANY_DEFECT_MODES = ("per-type-sum", "direct")  # what ``any_defect: auto`` compares
PROGRESS_EVERY_S = 5.0  # a grid search says how far it is at most this often


class TrainingError(ValueError):
    """Training cannot start: no labeled charges, an unknown target, too few charges."""


@dataclass(frozen=True)
class Subsample:
    """How many labeled charges and sticks there were, how many were kept (whole charges, by
    :func:`subsample_charges`) and under which limit."""

    labeled_charges: int
    labeled_sticks: int
    kept_charges: int
    kept_sticks: int
    max_sticks: int
    random_state: int

    @property
    def applied(self) -> bool:
        return self.kept_charges < self.labeled_charges

    def describe(self) -> str:
        return (
            f"subsampled {self.kept_charges:,} of {self.labeled_charges:,} charges "
            f"({self.kept_sticks:,} of {self.labeled_sticks:,} sticks; "
            f"max_sticks {self.max_sticks:,}, seed {self.random_state})"
        )

    def metrics(self) -> dict[str, float]:
        return {
            "labeled_charges": float(self.labeled_charges),
            "labeled_sticks": float(self.labeled_sticks),
            "max_sticks": float(self.max_sticks),
        }


def subsample_charges(n_sticks: pd.Series, max_sticks: int, random_state: int) -> pd.Index:
    """The charges to train on: all of them when their sticks sum to at most ``max_sticks``,
    else a seeded random subset of whole charges whose sticks sum to at most ``max_sticks``.

    ``n_sticks``: sticks per charge, indexed by charge id (final QC's ``n_sticks``). The rule:
    every charge gets a pseudo-random key, a hash of its id and ``random_state``; in the order
    of the keys, charges are kept while the running sum of their sticks stays within
    ``max_sticks`` (a prefix of that order, so a few sticks of room may stay unused). The keys
    depend on the charge ids, not on their order or on the other charges: the same seed keeps
    the same charges however the counts are sorted, and when new charges arrive a charge kept
    before is dropped only to make room for a new one with a smaller key. Vectorized (a hash,
    an argsort and a cumsum). Returns the kept charge ids in the order of ``n_sticks``.
    """
    if isinstance(max_sticks, bool) or int(max_sticks) != max_sticks or max_sticks < 1:
        raise ValueError(f"max_sticks must be a positive integer, got {max_sticks!r}")
    sizes = n_sticks.to_numpy(dtype=np.int64)
    if (sizes < 0).any():
        raise ValueError("n_sticks must be >= 0 for every charge")
    if sizes.sum() <= max_sticks:
        return n_sticks.index
    ids = n_sticks.index.astype(str).to_numpy(dtype=object) + f"\x1f{int(random_state)}"
    keys = pd.util.hash_array(ids)
    order = np.argsort(keys, kind="stable")
    inside = np.cumsum(sizes[order]) <= max_sticks
    return n_sticks.index[np.sort(order[inside])]


@dataclass(frozen=True)
class LabeledData:
    """The station-s training set: features, the charge of each stick and the targets.

    ``subsample``: set by :func:`labeled_data`, how the charges were chosen from the labeled
    ones (``training.max_sticks``)."""

    features: StationFeatures
    proportions: pd.Series | pd.DataFrame
    defective_counts: pd.Series
    target: str
    n_sticks: pd.Series
    type_shares: pd.DataFrame  # per charge, the share of each defect type (final QC)
    subsample: Subsample | None = None

    @property
    def bags(self) -> np.ndarray:
        return self.features.bags.to_numpy()

    @property
    def n_charges(self) -> int:
        return len(self.proportions)

    @property
    def failing_shares(self) -> pd.Series:
        """Share of failing sticks per charge, whatever the target (multiclass: 1 - ok)."""
        if isinstance(self.proportions, pd.Series):
            return self.proportions
        return (1.0 - self.proportions["ok"]).rename("defective")

    def subset(self, charges) -> LabeledData:  # noqa: ANN001 - charge ids
        """The same training set restricted to some charges (their sticks and shares)."""
        features = self.features.of_charges(charges)
        index = pd.Index(pd.unique(features.bags.to_numpy()))
        return LabeledData(
            features,
            self.proportions.loc[index],
            self.defective_counts.loc[index],
            self.target,
            self.n_sticks.loc[index],
            self.type_shares.loc[index],
            self.subsample,
        )

    def for_type(self, defect_type: str) -> LabeledData:
        """The same sticks with one defect type as the target (its binary shares)."""
        return replace(
            self,
            proportions=self.type_shares[defect_type],
            target=defect_type,
            defective_counts=(self.type_shares[defect_type] * self.n_sticks).round(),
        )


@dataclass(frozen=True)
class TrainingResult:
    """What ``train_station`` recorded."""

    model_id: int
    station: str
    method: str
    target: str
    params: dict[str, Any]
    metrics: dict[str, float]
    n_charges: int
    n_sticks: int
    artifact_path: Path
    per_charge: pd.DataFrame = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "station": self.station,
            "method": self.method,
            "target": self.target,
            "params": self.params,
            "metrics": self.metrics,
            "n_charges": self.n_charges,
            "n_sticks": self.n_sticks,
            "artifact": str(self.artifact_path),
        }


def labeled_data(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    target: str = "defective",
    since: datetime | None = None,
    until: datetime | None = None,
    random_state: int | None = None,
) -> LabeledData:
    """Features and proportions of the charges that have final-QC counts; a charge's bag
    holds the sticks QC counted (not those the line locked out: :mod:`qcllp.station.final_qc`).

    When those charges hold more than ``training.max_sticks`` sticks (by their final-QC
    ``n_sticks``), only a seeded subset of whole charges is read (:func:`subsample_charges`,
    seeded by ``random_state``, default ``training.random_state``); the features of the others
    are never read. The result's ``subsample`` says how many there were."""
    config.station(station)  # an unknown station fails here, with the known ones listed
    check_target(config, target)
    counts = store.read_defect_counts(list(config.defect_types))
    kept_since = retained_since(config)  # older charges may have lost readings to retention
    if kept_since is not None and (since is None or since < kept_since):
        since = kept_since
    if since is not None or until is not None:
        times = store.read_charge_times().reindex(counts.index)
        keep = pd.Series(True, index=counts.index)
        if since is not None:
            keep &= times >= pd.Timestamp(since)
        if until is not None:
            keep &= times < pd.Timestamp(until)
        counts = counts.loc[keep.to_numpy()]
    if counts.empty:
        raise TrainingError(
            "no labeled charges yet: ingest final-QC defect counts first (qcllp ingest defects)"
            + (" or widen --since/--until" if since or until else "")
        )
    max_sticks = config.training.max_sticks
    seed = int(config.training.random_state if random_state is None else random_state)
    kept = subsample_charges(counts["n_sticks"], max_sticks, seed)
    subsample = Subsample(
        len(counts),
        int(counts["n_sticks"].sum()),
        len(kept),
        int(counts["n_sticks"].loc[kept].sum()),
        max_sticks,
        seed,
    )
    if subsample.applied:
        counts = counts.loc[kept]
        if len(counts) < 4:
            raise TrainingError(
                f"training.max_sticks {max_sticks:,} keeps only {len(counts)} of the "
                f"{subsample.labeled_charges:,} labeled charges; at least 4 are needed: "
                "raise it"
            )
    features = station_features(store, config, station, charge_ids=list(counts.index))
    features = sticks_qc_counted(store, config, features, counts["n_sticks"])
    data = labeled_from_frames(config, station, features, counts, target=target)
    return replace(data, subsample=subsample)


def labeled_from_frames(
    config: PlantConfig,
    station: str,
    features: StationFeatures,
    counts: pd.DataFrame,
    *,
    target: str = "defective",
) -> LabeledData:
    """The training set from a station feature table and the charges' defect counts
    (index ``charge_id``; ``n_sticks`` and one count column per defect type), as stored or as
    a simulator gives them. Only charges with both are kept; at least 4 are needed."""
    check_target(config, target)
    if features.X.empty:
        raise TrainingError(
            f"none of the {len(counts)} labeled charges has readings at station {station!r}"
        )
    known = pd.Index(pd.unique(features.bags.to_numpy()))
    counts = counts.loc[counts.index.intersection(known, sort=False)]
    if len(counts) < 4:
        raise TrainingError(
            f"only {len(counts)} labeled charges with readings at {station!r}; "
            "at least 4 are needed to validate a model on held-out charges"
        )
    if not features.bags.isin(counts.index).all():
        features = features.of_charges(counts.index)
    counts = counts.loc[pd.unique(features.bags.to_numpy())]
    types = list(config.defect_types)
    n_sticks = counts["n_sticks"].astype(float)
    defective = counts[types].sum(axis=1)
    type_shares = counts_to_shares(counts[types], n_sticks)
    if target == "defective":
        proportions: pd.Series | pd.DataFrame = counts_to_shares(
            defective.rename("defective"), n_sticks
        )
    elif target in types:
        proportions = type_shares[target]
        defective = counts[target]
    else:
        proportions = counts_to_shares(counts[types], n_sticks, remainder="ok")
    return LabeledData(
        features, proportions, defective.astype(float), target, n_sticks, type_shares
    )


def check_target(config: PlantConfig, target: str) -> None:
    """Targets: ``defective`` (any defect), one defect type, or ``multiclass`` (ok + types)."""
    if target not in ("defective", "multiclass", *config.defect_types):
        raise TrainingError(
            f"unknown target {target!r}; choose defective, multiclass or a defect type "
            f"({', '.join(config.defect_types)})"
        )


@dataclass(frozen=True)
class TrainingPlan:
    """What to train, resolved from the command's choices and the config's defaults.

    ``any_defect``: how the ``defective`` target is learned -- ``direct`` (one model on the
    charges' failing shares), ``per-type-sum`` / ``per-type-noisy-or`` (one model per
    defect type on its own shares, combined as :class:`qcllp.learn.PerDefectClassifier`) or
    ``auto`` (``per-type-sum`` and ``direct`` both trained, :func:`choose_any_defect`).
    """

    station: str
    method: Method
    target: str
    seed: int
    folds: int
    grid: dict[str, list]
    any_defect: str = DEFAULT_ANY_DEFECT
    bootstrap: int = DEFAULT_BOOTSTRAP

    @property
    def any_defect_auto(self) -> bool:
        """Whether both ways of learning the ``defective`` target are trained and compared."""
        return self.target == "defective" and self.any_defect == AUTO_ANY_DEFECT

    @property
    def per_type(self) -> bool:
        """Whether the model is one learner per defect type (``defective`` target only)."""
        return self.target == "defective" and self.any_defect.startswith("per-type")

    def folds_for(self, n_charges: int) -> int:
        """Charge folds: as configured, but at least 2 and at most half the charges."""
        return max(2, min(self.folds, n_charges // 2))


@dataclass(frozen=True)
class SearchResult:
    """The model refitted on all charges with the grid's best parameters."""

    estimator: BaseEstimator
    params: dict[str, Any]
    cv_bag_error: float


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


def training_plan(
    config: PlantConfig,
    station: str,
    *,
    method_name: str | None = None,
    target: str = "defective",
    random_state: int | None = None,
    n_splits: int | None = None,
    any_defect: str | None = None,
) -> TrainingPlan:
    """The method, grid, seed and folds for one station; unknown names fail here."""
    config.station(station)  # an unknown station fails here, with the known ones listed
    check_target(config, target)
    training = config.training
    chosen = method(method_name or training.default_method)
    grids = {canonical_name(k): v for k, v in training.methods.items()}
    return TrainingPlan(
        station=station,
        method=chosen,
        target=target,
        seed=int(training.random_state if random_state is None else random_state),
        folds=int(n_splits or training.cv),
        grid=chosen.param_grid(grids.get(chosen.name)),
        any_defect=any_defect or training.any_defect,
        bootstrap=training.bootstrap,
    )


AUTO = "auto"
AUTO_METHODS = ("em-llp", "alter-psvm", "invcal", "meanmap", "kmeans-labeler")


def is_auto(method_name: str | None, config: PlantConfig) -> bool:
    """Whether the method is chosen per station (``--method auto``, or the config's
    ``default_method: auto`` when no method is named)."""
    name = method_name or config.training.default_method
    return name.strip().lower() == AUTO


def auto_methods(config: PlantConfig) -> list[str]:
    """The methods ``auto`` tries: those the config gives grids for, else :data:`AUTO_METHODS`
    (not conv-psvm and twin-psvm: the slowest, and on the simulated plant not better)."""
    named = [canonical_name(k) for k in config.training.methods]
    return list(dict.fromkeys(named)) or list(AUTO_METHODS)


def methods_to_try(config: PlantConfig, method_name: str | None) -> list[str | None]:
    """The methods a training fits: every :func:`auto_methods` for ``auto``, else the one
    named (``None``: the config's default)."""
    return list(auto_methods(config)) if is_auto(method_name, config) else [method_name]


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


def search_parameters(
    plan: TrainingPlan, data: LabeledData, folds: int, progress: Progress = None
) -> SearchResult:
    """Bag-aware grid search (Yu et al. eq. 23 on held-out charges), refitted on all charges.

    ``progress`` hears how far a search of slow fits is (:func:`search_progress`)."""
    X, bags, props = data.features.X, data.bags, data.proportions
    estimator = plan.method.estimator(plan.seed)
    if not plan.grid:
        return SearchResult(clone(estimator).fit(X, bags, props), {}, float("nan"))
    cv = BagKFold(folds, shuffle=True, random_state=plan.seed)
    search = BagGridSearchCV(
        estimator,
        plan.grid,
        cv=cv,
        random_state=plan.seed,
        progress=search_progress(progress, f"{plan.station}: {data.target}"),
    )
    search.fit(X, bags, props)
    return SearchResult(
        search.best_estimator_, dict(search.best_params_), float(search.best_bag_error_)
    )


def search_progress(
    say: Progress, what: str, every_s: float = PROGRESS_EVERY_S
) -> Callable[[int, int, float], None] | None:
    """A grid search's progress as lines for ``say``: at most one every ``every_s`` seconds,
    so a search of fast fits stays silent and a slow one (twin-psvm: ~25 s a fit at plant
    size) says how far it is and how long it has run."""
    if say is None:
        return None
    last = [0.0]

    def tick(done: int, total: int, seconds: float) -> None:
        if seconds - last[0] >= every_s or (done == total and seconds >= every_s):
            last[0] = seconds
            say(f"{what}: {done}/{total} fits done in {seconds:.0f} s")

    return tick


def search_per_type(
    plan: TrainingPlan, data: LabeledData, folds: int, progress: Progress = None
) -> SearchResult:
    """One bag-aware grid search per defect type, each on its own shares; the any-defect model
    combines the chosen learners (:class:`qcllp.learn.PerDefectClassifier`), refitted on all
    charges. Types final QC never counted in these charges cannot be learned and are left out
    (they add nothing to the failure probability)."""
    types = [t for t in data.type_shares.columns if data.type_shares[t].to_numpy().sum() > 0]
    if not types:
        return search_parameters(plan, data, folds, progress)
    found = {t: search_parameters(plan, data.for_type(t), folds, progress) for t in types}
    combine = plan.any_defect.removeprefix("per-type-")
    estimator = PerDefectClassifier(
        [(t, clone(r.estimator)) for t, r in found.items()], combine=combine
    ).fit(data.features.X, data.bags, data.type_shares)
    params = {f"{t}.{k}": v for t, r in found.items() for k, v in r.params.items()}
    errors = [r.cv_bag_error for r in found.values()]
    return SearchResult(estimator, params, float(np.mean(errors)))


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
    """
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
        tried[mode] = (mine, search, out_of_fold(mine, data, search.estimator, folds))
    scores = {mode: t[2].count_loglik for mode, t in tried.items()}
    chosen = choose_any_defect(scores)
    plan, search, oof = tried[chosen]
    if len(tried) > 1:
        say(f"{plan.station}: any defect learned {chosen} ({_scored(scores)})")
        params = {**search.params, "any_defect": chosen, "any_defect_auto": scores}
        search = replace(search, params=params)
    decision = decide_lockout(plan, data, oof, costs, folds)
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
    return ", ".join(f"{mode} {value:.3f}" for mode, value in scores.items())


def station_costs(config: PlantConfig, station: str) -> LockoutCosts:
    """The lock-out costs of a station from the plant config."""
    st = config.station(station)
    return LockoutCosts(st.fail_cost, st.good_cost)


def train_station(
    store: Store,
    config: PlantConfig,
    station: str,
    *,
    method_name: str | None = None,
    target: str = "defective",
    since: datetime | None = None,
    until: datetime | None = None,
    random_state: int | None = None,
    n_splits: int | None = None,
    progress: Progress = None,
    lease: HeldLease | None = None,
    also: Callable[[Any, int], None] | None = None,
) -> TrainingResult:
    """Train, validate and register one station model; returns what was recorded.

    The station's training lease (:mod:`qcllp.store.leases`) is held throughout, so a daemon and a
    person
    never train one station at once (:class:`qcllp.store.leases.LeaseBusy` names who holds it);
    ``lease``:
    one the caller already holds. The model is registered only if the lease is still held;
    ``also`` as for :func:`qcllp.station.registry.register_model`.
    """
    if lease is None:
        name = station_lease_name(config.station(station).name)
        with HeldLease.take(store, name, ttl_s=config.retrainer.lease_ttl_s) as held:
            return train_station(
                store,
                config,
                station,
                method_name=method_name,
                target=target,
                since=since,
                until=until,
                random_state=random_state,
                n_splits=n_splits,
                progress=progress,
                lease=held,
                also=also,
            )
    say = progress or (lambda _msg: None)
    names = methods_to_try(config, method_name)
    plans = [
        training_plan(
            config,
            station,
            method_name=name,
            target=target,
            random_state=random_state,
            n_splits=n_splits,
        )
        for name in names
    ]
    say(f"{station}: reading features of labeled charges")
    data = labeled_data(
        store,
        config,
        station,
        target=target,
        since=since,
        until=until,
        random_state=plans[0].seed,
    )
    if data.subsample is not None and data.subsample.applied:
        say(f"{station}: {data.subsample.describe()}")
    times = store.read_charge_times().reindex(data.proportions.index)
    costs = station_costs(config, station)
    fits, trials = [], []
    for plan in plans:
        started = time.perf_counter()
        fit = fit_station_model(plan, data, costs, times=times, progress=progress)
        fits.append(fit)
        trials.append(_trial(plan, fit, time.perf_counter() - started))
    best = choose_method(trials)
    model = fits[best].model
    if len(trials) > 1:
        comparison = [t.as_dict() for t in trials]
        model = replace(model, params={**model.params, "auto": comparison})
        say(f"{station}: auto chose {trials[best].method} of {', '.join(names)}")
    lease.check()
    result = record_model(store, config, model, data, also=also)
    say(f"{station}: registered model {result.model_id} ({plan.method.name}) as a candidate")
    return result


def train_stations(
    store: Store,
    config: PlantConfig,
    stations: list[str] | None = None,
    **options: Any,
) -> list[TrainingResult]:
    """Train every station in line order (or the given ones); ``options`` as
    :func:`train_station`. Names are checked before the first (long) training starts."""
    names = list(stations) if stations else list(config.station_names)
    method_name = options.get("method_name")
    methods = methods_to_try(config, method_name)
    for name in names:
        for chosen in methods:
            training_plan(
                config, name, method_name=chosen, target=options.get("target", "defective")
            )
    return [train_station(store, config, name, **options) for name in names]


def _station_model(
    plan: TrainingPlan,
    data: LabeledData,
    search: SearchResult,
    decision: LockoutDecision,
    times: pd.Series,
) -> StationModel:
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
        "lockout_rate_bound": decision.lockout_rate_bound,
        "lockout_excess_bound": decision.lockout_excess_bound,
        **(data.subsample.metrics() if data.subsample is not None else {}),
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


def _trial(plan: TrainingPlan, fit: StationFit, seconds: float) -> MethodTrial:
    metrics = fit.model.metrics
    return MethodTrial(
        plan.method.name,
        float(metrics.get("cv_bag_error", float("nan"))),
        fit.decision.saving,
        bool(fit.decision.choice.declined),
        seconds,
    )


def record_model(
    store: Store,
    config: PlantConfig,
    model: StationModel,
    data: LabeledData,
    *,
    also: Callable[[Any, int], None] | None = None,
) -> TrainingResult:
    """Write the model's artifact and register it as a candidate (``also``: as for
    :func:`qcllp.station.registry.register_model`)."""
    created = datetime.now().astimezone()
    stem = f"{model.station}-{model.method}-{created:%Y%m%dT%H%M%S%f}"
    path, sha = save_station_model(model, store.models_dir or config.models_dir, stem)
    model_id = register_model(
        store,
        also=also,
        station=model.station,
        method=model.method,
        target=model.target,
        params=_jsonable(model.params),
        metrics=_jsonable(model.metrics),
        features=list(model.features),
        artifact_path=path.name,  # relative to the models folder
        sha256=sha,
        trained_from=model.trained_from,
        trained_until=model.trained_until,
        n_charges=data.n_charges,
        n_sticks=len(data.features.X),
    )
    return TrainingResult(
        model_id,
        model.station,
        model.method,
        model.target,
        dict(model.params),
        dict(model.metrics),
        data.n_charges,
        len(data.features.X),
        path,
        model.per_charge,
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


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not np.isfinite(value):
            value = None
        out[key] = value
    return out


def _py_time(value) -> datetime | None:
    return None if pd.isna(value) else pd.Timestamp(value).to_pydatetime()
