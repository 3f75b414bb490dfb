"""The bag-aware grid search of a station's learner (Yu et al. eq. 23 on held-out charges),
one search per defect type when the any-defect target is learned per type, and its progress
lines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone

from qcllp.learn import BagGridSearchCV, BagKFold, PerDefectClassifier
from qcllp.training.labeled import LabeledData
from qcllp.training.plan import TrainingPlan

__all__ = [
    "PROGRESS_EVERY_S",
    "Progress",
    "SearchResult",
    "search_parameters",
    "search_per_type",
    "search_progress",
]

Progress = Callable[[str], None] | None
PROGRESS_EVERY_S = 5.0  # a grid search says how far it is at most this often


@dataclass(frozen=True)
class SearchResult:
    """The model refitted on all charges with the grid's best parameters."""

    estimator: BaseEstimator
    params: dict[str, Any]
    cv_bag_error: float


def search_parameters(
    plan: TrainingPlan, data: LabeledData, folds: int, progress: Progress = None
) -> SearchResult:
    """Bag-aware grid search (Yu et al. eq. 23 on held-out charges), refitted on all charges.

    ``progress`` hears how far a search of slow fits is (:func:`search_progress`). Inspected
    sticks' labels are passed as known labels (``y``) when there are any."""
    X, bags, props = data.features.X, data.bags, data.proportions
    known = data.known()
    fit_params = {} if known is None else {"y": known}
    estimator = plan.method.estimator(plan.seed)
    if not plan.grid:
        return SearchResult(clone(estimator).fit(X, bags, props, **fit_params), {}, float("nan"))
    cv = BagKFold(folds, shuffle=True, random_state=plan.seed)
    search = BagGridSearchCV(
        estimator,
        plan.grid,
        cv=cv,
        random_state=plan.seed,
        progress=search_progress(progress, f"{plan.station}: {data.target}"),
    )
    search.fit(X, bags, props, **fit_params)
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
    ).fit(data.features.X, data.bags, data.type_shares, data.known(per_type=True))
    params = {f"{t}.{k}": v for t, r in found.items() for k, v in r.params.items()}
    errors = [r.cv_bag_error for r in found.values()]
    return SearchResult(estimator, params, float(np.mean(errors)))
