"""Bag-aware model selection: folds that never split a bag, and a grid search scored on bags.

Held-out bags come without instance labels, so candidates are compared by the bag-level
validation error of Yu et al. (2013), eq. (23): the predicted share of each class in a held-out
bag against its known share. Because a bag is never split, that comparison is honest: the
model has seen neither the bag's rows nor its proportions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils import check_random_state

from qcllp.learn.core.problem import plain_value
from qcllp.learn.metrics import bag_error_from_labels

__all__ = ["BagKFold", "BagGridSearchCV", "bag_cross_val_error"]


class BagKFold:
    """K folds over bags: every bag lands, whole, in exactly one test fold.

    Bags are shuffled (when ``shuffle``) and dealt round-robin in decreasing size order so that
    folds get similar numbers of rows as well as of bags.
    """

    def __init__(self, n_splits: int = 5, *, shuffle: bool = True, random_state=None):
        if int(n_splits) < 2:
            raise ValueError(f"n_splits must be at least 2, got {n_splits}")
        self.n_splits = int(n_splits)
        self.shuffle = shuffle
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.n_splits

    def split(self, X, y=None, groups=None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield (train rows, test rows); ``groups`` holds the bag id of every row."""
        if groups is None:
            raise ValueError("BagKFold.split needs groups=bags (the bag id of every row)")
        bag_ids, codes = np.unique(np.asarray(groups), return_inverse=True)
        if len(bag_ids) < self.n_splits:
            raise ValueError(
                f"cannot split {len(bag_ids)} bags into {self.n_splits} folds: "
                "need at least one bag per fold"
            )
        order = np.arange(len(bag_ids))
        if self.shuffle:
            order = check_random_state(self.random_state).permutation(len(bag_ids))
        sizes = np.bincount(codes)
        order = order[np.argsort(-sizes[order], kind="stable")]
        fold_of_bag = np.empty(len(bag_ids), dtype=np.intp)
        fold_of_bag[order] = np.arange(len(bag_ids)) % self.n_splits
        fold_of_row = fold_of_bag[codes]
        for fold in range(self.n_splits):
            yield np.flatnonzero(fold_of_row != fold), np.flatnonzero(fold_of_row == fold)


def _subset(X, rows: np.ndarray):
    return X.iloc[rows] if isinstance(X, pd.DataFrame | pd.Series) else np.asarray(X)[rows]


def _rows_of(fit_params: Mapping, rows: np.ndarray, n: int) -> dict:
    """Per-row fit parameters (e.g. known labels ``y``) restricted to ``rows``."""
    return {
        key: _subset(value, rows) if hasattr(value, "__len__") and len(value) == n else value
        for key, value in fit_params.items()
    }


def _fit_and_score(estimator, params, X, bags, proportions, train, test, fit_params, keep=False):
    """(bag error on the test rows, fit seconds, the fitted model if ``keep`` else ``None``)."""
    model = clone(estimator).set_params(**params)
    train_bags, test_bags = bags[train], bags[test]
    start = time.perf_counter()
    model.fit(
        _subset(X, train),
        train_bags,
        proportions.loc[pd.unique(train_bags)],
        **_rows_of(fit_params, train, len(bags)),
    )
    fit_time = time.perf_counter() - start
    error = bag_error_from_labels(
        test_bags, proportions.loc[pd.unique(test_bags)], model.predict(_subset(X, test))
    )
    return error, fit_time, model if keep else None


def bag_cross_val_error(
    estimator: BaseEstimator,
    X,
    bags,
    proportions: pd.Series | pd.DataFrame,
    *,
    cv: int | BagKFold = 5,
    n_jobs: int | None = None,
    random_state=None,
    fit_params: Mapping | None = None,
) -> np.ndarray:
    """Bag-level validation error (mean per held-out bag, eq. 23) of each fold."""
    splitter = cv if isinstance(cv, BagKFold) else BagKFold(cv, random_state=random_state)
    bags = np.asarray(bags)
    folds = list(splitter.split(X, groups=bags))
    results = Parallel(n_jobs=n_jobs)(
        delayed(_fit_and_score)(estimator, {}, X, bags, proportions, tr, te, fit_params or {})
        for tr, te in folds
    )
    return np.array([error for error, _, _ in results])


class BagGridSearchCV(BaseEstimator):
    """Exhaustive search over a parameter grid, scored by the bag-level error on held-out bags.

    Works for any learner following the LLP contract (``fit(X, bags, proportions)``,
    ``predict``). Candidates x folds run through joblib, so the caller's
    ``joblib.parallel_config`` decides the backend. After ``fit``: ``cv_results_`` (a dict of
    arrays as in scikit-learn, with ``mean_test_bag_error``, ``std_test_bag_error``,
    ``rank_test_bag_error``, ``mean_fit_time``, ``params``), ``best_params_``,
    ``best_bag_error_``, ``best_index_`` and, with ``refit=True``, ``best_estimator_`` fitted on
    all bags. Ties go to the earlier candidate in grid order.

    ``keep_fold_estimators=True`` also keeps the best candidate's model of every fold,
    ``best_fold_estimators_``, with ``fold_test_rows_`` (the rows each fold held out), as
    scikit-learn's ``cross_validate(return_estimator=True, return_indices=True)`` does: a caller
    that needs out-of-fold predictions of the chosen parameters on the same folds takes them
    from these instead of fitting every fold again. The other candidates' models are dropped.

    ``progress(done, total, seconds)`` is called after every finished fit (``total`` counts
    candidates x folds plus the refit; ``seconds`` since the search started): a search of slow
    learners can say how far it is. It is a plain callable, not a logger, so that
    :mod:`qcllp.learn` stays free of I/O; joblib hands results back in order as they finish
    (``return_as="generator"``).
    """

    def __init__(
        self,
        estimator: BaseEstimator,
        param_grid: Mapping | Sequence[Mapping],
        *,
        cv: int | BagKFold = 5,
        n_jobs: int | None = None,
        refit: bool = True,
        random_state=None,
        verbose: int = 0,
        progress: Callable[[int, int, float], None] | None = None,
        keep_fold_estimators: bool = False,
    ):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.n_jobs = n_jobs
        self.refit = refit
        self.random_state = random_state
        self.verbose = verbose
        self.progress = progress
        self.keep_fold_estimators = keep_fold_estimators

    def fit(self, X, bags, proportions: pd.Series | pd.DataFrame, **fit_params):
        """Score every candidate on every fold, then refit the best on all bags."""
        bags = np.asarray(bags)
        if len(bags) != len(X):
            raise ValueError(f"X has {len(X)} rows but bags has {len(bags)} entries")
        missing = pd.Index(pd.unique(bags)).difference(proportions.index)
        if len(missing):
            raise ValueError(f"bag {plain_value(missing[0])!r} has no entry in proportions")
        splitter = (
            self.cv
            if isinstance(self.cv, BagKFold)
            else BagKFold(self.cv, random_state=self.random_state)
        )
        folds = list(splitter.split(X, groups=bags))
        candidates = list(ParameterGrid(self.param_grid))
        total = len(candidates) * len(folds) + int(self.refit)
        started = time.perf_counter()
        results = []
        keep = bool(self.keep_fold_estimators)
        for result in Parallel(n_jobs=self.n_jobs, verbose=self.verbose, return_as="generator")(
            delayed(_fit_and_score)(
                self.estimator, params, X, bags, proportions, tr, te, fit_params, keep
            )
            for params in candidates
            for tr, te in folds
        ):
            results.append(result)
            if self.progress is not None:
                self.progress(len(results), total, time.perf_counter() - started)
        self._record(candidates, folds, results)
        if self.refit:
            self.best_estimator_ = clone(self.estimator).set_params(**self.best_params_)
            self.best_estimator_.fit(X, bags, proportions, **fit_params)
            self.classes_ = self.best_estimator_.classes_
            if self.progress is not None:
                self.progress(total, total, time.perf_counter() - started)
        return self

    def _record(self, candidates: list, folds: list, results: list) -> None:
        """``cv_results_``, the best candidate and, if kept, its fold models."""
        errors = np.array([e for e, _, _ in results]).reshape(len(candidates), len(folds))
        times = np.array([t for _, t, _ in results]).reshape(len(candidates), len(folds))
        mean = errors.mean(axis=1)
        order = np.argsort(mean, kind="stable")
        ranks = np.empty(len(candidates), dtype=int)
        ranks[order] = np.arange(1, len(candidates) + 1)
        self.cv_results_ = {
            "params": candidates,
            "mean_test_bag_error": mean,
            "std_test_bag_error": errors.std(axis=1),
            "rank_test_bag_error": ranks,
            "mean_fit_time": times.mean(axis=1),
            **{f"split{i}_test_bag_error": errors[:, i] for i in range(len(folds))},
        }
        self.best_index_ = int(order[0])
        self.best_params_ = candidates[self.best_index_]
        self.best_bag_error_ = float(mean[self.best_index_])
        self.n_splits_ = len(folds)
        if self.keep_fold_estimators:
            best = results[self.best_index_ * len(folds) : (self.best_index_ + 1) * len(folds)]
            self.best_fold_estimators_ = [model for _, _, model in best]
            self.fold_test_rows_ = [test for _, test in folds]

    def predict(self, X) -> np.ndarray:
        return self.best_estimator_.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        return self.best_estimator_.predict_proba(X)

    def decision_function(self, X) -> np.ndarray:
        return self.best_estimator_.decision_function(X)
