"""Training a station model from the plant database and recording it in the registry.

The charges with final-QC counts are the labeled bags; the station-s features of their sticks
are the rows (stations up to s only). The bag-aware grid search picks the hyper-parameters by
the bag-level error on held-out charges, the chosen model is refitted on all charges, its
out-of-fold probabilities (charge-grouped CV, never a charge split) give the honest
validation metrics and the cost-based lock-out threshold, and the artifact plus its metadata
enter the registry as a candidate.

:func:`train_station` runs those steps; each lives in a module of its own, and every name is
still importable from here:

* :mod:`.labeled` -- the labeled charges, their features and shares, and the subsample of
  whole charges a large training set is cut to (``training.max_sticks``);
* :mod:`.plan` -- what is trained: method, grid, seed, folds, the methods ``auto`` tries;
* :mod:`.search` -- the bag-aware grid search (per defect type for the any-defect target);
* :mod:`.lockout` -- the count recalibration of the out-of-fold probabilities, the lock-out
  threshold and the scorer's guard bounds;
* :mod:`.fitting` -- one plan's station model, the way the any-defect target is learned and the
  method ``auto`` keeps;
* :mod:`.registering` -- the artifact and the registry row.

The out-of-fold pass reuses the hyper-parameters chosen on all charges, so its figures are
slightly optimistic for the grid's choice; nesting the search would multiply the training
time by the number of folds, which a nightly retraining on two cores cannot afford
(``qcllp evaluate`` does nest it, for the engineer who wants the unbiased figure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from qcllp.plant.config import PlantConfig
from qcllp.station.model import StationModel
from qcllp.store import Store
from qcllp.store.leases import HeldLease, station_lease_name
from qcllp.training.fitting import (
    MethodTrial,
    StationFit,
    choose_any_defect,
    choose_method,
    fit_methods,
    fit_station_model,
)
from qcllp.training.labeled import (
    LabeledData,
    Subsample,
    TrainingError,
    check_target,
    labeled_data,
    labeled_from_frames,
    subsample_charges,
)
from qcllp.training.lockout import LockoutDecision, decide_lockout, station_costs
from qcllp.training.out_of_fold import OutOfFold, fit_proportions, out_of_fold
from qcllp.training.plan import (
    AUTO,
    AUTO_METHODS,
    TrainingPlan,
    auto_methods,
    is_auto,
    methods_to_try,
    training_plan,
)
from qcllp.training.registering import TrainingResult, record_model
from qcllp.training.search import (
    Progress,
    SearchResult,
    search_parameters,
    search_per_type,
    search_progress,
)

__all__ = [
    "AUTO",
    "AUTO_METHODS",
    "LabeledData",
    "LockoutDecision",
    "MethodTrial",
    "OutOfFold",
    "SearchResult",
    "StationFit",
    "Subsample",
    "TrainingError",
    "TrainingPlan",
    "TrainingResult",
    "auto_methods",
    "check_target",
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
    "search_progress",
    "station_costs",
    "subsample_charges",
    "train_station",
    "train_stations",
    "training_plan",
]


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
    person never train one station at once (:class:`qcllp.store.leases.LeaseBusy` names who holds
    it); ``lease``: one the caller already holds. The model is registered only if the lease is
    still held; ``also`` as for :func:`qcllp.station.registry.register_model`.
    """
    with _station_lease(store, config, station, lease) as held:
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
        data = _read_labeled(store, config, station, plans[0].seed, say, target, since, until)
        times = store.read_charge_times().reindex(data.proportions.index)
        costs = station_costs(config, station)
        fits, trials = fit_methods(plans, data, costs, times=times, progress=progress)
        model = _chosen_model(station, names, fits, trials, say)
        held.check()
        result = record_model(store, config, model, data, also=also)
        say(f"{station}: registered model {result.model_id} ({model.method}) as a candidate")
        return result


@contextmanager
def _station_lease(
    store: Store, config: PlantConfig, station: str, lease: HeldLease | None
) -> Iterator[HeldLease]:
    """The lease a training holds: the caller's, or the station's training lease taken for the
    block (an unknown station fails here, before any lease is taken)."""
    if lease is not None:
        yield lease
        return
    name = station_lease_name(config.station(station).name)
    with HeldLease.take(store, name, ttl_s=config.retrainer.lease_ttl_s) as held:
        yield held


def _read_labeled(
    store: Store,
    config: PlantConfig,
    station: str,
    seed: int,
    say: Callable[[str], None],
    target: str,
    since: datetime | None,
    until: datetime | None,
) -> LabeledData:
    """The labeled charges' training set (:func:`labeled_data`, subsampled with the plan's
    seed), saying when only a subset of the charges is trained on."""
    say(f"{station}: reading features of labeled charges")
    data = labeled_data(
        store, config, station, target=target, since=since, until=until, random_state=seed
    )
    if data.subsample is not None and data.subsample.applied:
        say(f"{station}: {data.subsample.describe()}")
    return data


def _chosen_model(
    station: str,
    names: list[str | None],
    fits: list[StationFit],
    trials: list[MethodTrial],
    say: Callable[[str], None],
) -> StationModel:
    """The model of the trial :func:`choose_method` keeps; when several methods were tried
    (``auto``) its params record every trial (``auto``) and the choice is said."""
    best = choose_method(trials)
    model = fits[best].model
    if len(trials) > 1:
        comparison = [t.as_dict() for t in trials]
        model = replace(model, params={**model.params, "auto": comparison})
        say(f"{station}: auto chose {trials[best].method} of {', '.join(names)}")
    return model


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
