"""A training fits each fold once: the lock-out rule's out-of-fold probabilities come from the
grid search's fits of the chosen parameters on the same folds, and the any-defect model
combines the searches' refits per type. Both give what fitting them again gives, exactly.
And it fits on one BLAS / OpenMP thread."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from qcllp.learn import PerDefectClassifier
from qcllp.learn.tabular.em_llp import EMLLP
from qcllp.store import Store
from qcllp.training.out_of_fold import out_of_fold
from qcllp.training.search import search_parameters, search_per_type
from qcllp.training.train import fit_station_model, labeled_data, station_costs, training_plan

STATION = "cooling"


@pytest.fixture(scope="module")
def inspected_data(history_plant):
    """The history plant's cooling data, a fifth of its sticks inspected (known labels)."""
    with Store.open(history_plant.url) as store:
        data = labeled_data(store, history_plant.config, STATION)
    truth = history_plant.history.truth.set_index(["charge_id", "stick_id"])["defect"]
    truth.index = truth.index.set_levels([lv.astype(str) for lv in truth.index.levels])
    labels = truth.reindex(data.features.X.index).astype(object)
    labels[np.random.RandomState(0).random_sample(len(labels)) > 0.2] = None
    return replace(data, labels=labels)


@pytest.mark.parametrize("any_defect", ["per-type-sum", "per-type-noisy-or", "direct"])
def test_the_searchs_fold_fits_give_the_out_of_fold_probabilities_of_fitting_again(
    history_plant, inspected_data, any_defect
):
    plan = training_plan(history_plant.config, STATION, method_name="em-llp")
    plan = replace(plan, any_defect=any_defect)
    folds = plan.folds_for(inspected_data.n_charges)
    search = (search_per_type if plan.per_type else search_parameters)(plan, inspected_data, folds)
    assert search.folds is not None and len(search.folds.estimators) == folds
    kept = out_of_fold(plan, inspected_data, search.estimator, folds, search.folds)
    again = out_of_fold(plan, inspected_data, search.estimator, folds)
    np.testing.assert_array_equal(kept.raw, again.raw)
    np.testing.assert_array_equal(kept.probability, again.probability)
    assert len(np.unique(kept.raw)) > 100  # probabilities that rank, not a constant


def test_the_any_defect_model_of_the_searches_refits_is_the_model_fitted_again(
    history_plant, inspected_data
):
    plan = training_plan(history_plant.config, STATION, method_name="em-llp")
    assert plan.per_type
    search = search_per_type(plan, inspected_data, plan.folds_for(inspected_data.n_charges))
    types = search.estimator.defect_types_
    again = PerDefectClassifier(search.estimator.estimators, combine=search.estimator.combine)
    data = inspected_data
    again.fit(data.features.X, data.bags, data.type_shares, data.known(per_type=True))
    assert again.defect_types_ == types
    X = data.features.X
    np.testing.assert_array_equal(search.estimator.predict_proba(X), again.predict_proba(X))


def test_a_training_fits_each_fold_of_each_type_once(history_plant, inspected_data, monkeypatch):
    """em-llp per defect type, a grid of two points: two points x folds fits and one refit per
    type, no more (before: the folds again for the lock-out rule and every type refitted)."""
    fits = []
    real_fit = EMLLP.fit

    def counted_fit(self, *args, **kwargs):
        fits.append(1)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(EMLLP, "fit", counted_fit)
    plan = training_plan(history_plant.config, STATION, method_name="em-llp")
    folds = plan.folds_for(inspected_data.n_charges)
    costs = station_costs(history_plant.config, STATION)
    fitted = fit_station_model(plan, inspected_data, costs)
    types = len(fitted.model.estimator.defect_types_)
    points = len(plan.grid["C"])
    assert (types, points) == (3, 2)
    assert len(fits) == types * (points * folds + 1)


def test_fold_models_of_other_folds_are_refused(history_plant, inspected_data):
    plan = training_plan(history_plant.config, STATION, method_name="em-llp")
    folds = plan.folds_for(inspected_data.n_charges)
    search = search_per_type(plan, inspected_data, folds)
    other = replace(plan, seed=plan.seed + 1)  # its folds hold out other charges
    with pytest.raises(ValueError, match="fitted on other folds"):
        out_of_fold(other, inspected_data, search.estimator, folds, search.folds)


def test_a_training_fits_on_one_thread_whatever_the_caller_allows(
    history_plant, inspected_data, monkeypatch
):
    """Every learner's fit sees the BLAS and OpenMP pools at one thread, also where the
    caller's limit is two (a training's parallelism is its processes)."""
    pools = []
    real_fit = EMLLP.fit

    def recorded_fit(self, *args, **kwargs):
        pools.append({(p["user_api"], p["num_threads"]) for p in threadpool_info()})
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(EMLLP, "fit", recorded_fit)
    plan = training_plan(history_plant.config, STATION, method_name="em-llp")
    costs = station_costs(history_plant.config, STATION)
    with threadpool_limits(2):
        fit_station_model(plan, inspected_data, costs)
        after = {p["num_threads"] for p in threadpool_info()}
    assert after == {2}  # the caller's limit is back once the training is done
    assert pools and {api for seen in pools for api, _ in seen} >= {"blas", "openmp"}
    assert {threads for seen in pools for _, threads in seen} == {1}
