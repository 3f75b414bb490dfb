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
from qcllp.training.evaluate import FoldModels
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
    """The model refitted on all charges with the grid's best parameters and, when the grid
    was searched, that model's fit on each fold (``folds``): the out-of-fold probabilities the
    lock-out rule is chosen on come from these, the same folds, not from fitting them again."""

    estimator: BaseEstimator
    params: dict[str, Any]
    cv_bag_error: float
    folds: FoldModels | None = None


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
        keep_fold_estimators=True,
    )
    search.fit(X, bags, props, **fit_params)
    return SearchResult(
        search.best_estimator_,
        dict(search.best_params_),
        float(search.best_bag_error_),
        FoldModels(search.best_fold_estimators_, search.fold_test_rows_),
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
    estimator = PerDefectClassifier.from_fitted(
        [(t, r.estimator) for t, r in found.items()], combine=combine
    )
    params = {f"{t}.{k}": v for t, r in found.items() for k, v in r.params.items()}
    errors = [r.cv_bag_error for r in found.values()]
    return SearchResult(estimator, params, float(np.mean(errors)), _combined_folds(found, combine))


def _combined_folds(found: dict[str, SearchResult], combine: str) -> FoldModels | None:
    """Each fold's per-type models combined as the any-defect model combines them; ``None``
    when a type's model was fitted without a search (an empty grid) or the types' folds are
    not the same rows."""
    per_type = [r.folds for r in found.values()]
    if any(f is None for f in per_type) or not all(
        _same_rows(f.test_rows, per_type[0].test_rows) for f in per_type
    ):
        return None
    estimators = [
        PerDefectClassifier.from_fitted(list(zip(found, fold, strict=True)), combine=combine)
        for fold in zip(*(f.estimators for f in per_type), strict=True)
    ]
    return FoldModels(estimators, per_type[0].test_rows)


def _same_rows(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether two lists of folds hold out the same rows, fold by fold."""
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
