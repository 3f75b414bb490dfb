"""Training a station model from the plant database: the plan, the labeled data, the steps,
and what ends up in the artifact and the registry."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from joblib.parallel import get_active_backend

from qcllp.features import station_features
from qcllp.plant.config import ConfigError, Training
from qcllp.station.registry import get_model, load_model
from qcllp.store import Store
from qcllp.training.cluster import compute_on
from qcllp.training.methods import UnknownMethodError
from qcllp.training.train import (
    TrainingError,
    labeled_data,
    train_station,
    train_stations,
    training_plan,
)


def test_the_plan_takes_the_configs_defaults_and_the_callers_choices_win(fast_config):
    plan = training_plan(fast_config, "cooling")
    assert (plan.method.name, plan.seed, plan.folds) == ("invcal", 0, 2)
    assert plan.grid == {"estimator__C_p": [1.0]}  # the config's grid, for the scaled learner
    plan = training_plan(fast_config, "cooling", method_name="Mean_Map", random_state=7, n_splits=4)
    assert (plan.method.name, plan.seed, plan.folds) == ("meanmap", 7, 4)
    assert plan.grid == {"estimator__reg": [0.1, 1.0]}  # no config grid: the method's own
    assert plan.folds_for(5) == 2 and plan.folds_for(100) == 4


def test_a_config_without_training_section_trains_its_one_default(fast_config):
    plan = training_plan(replace(fast_config, training=Training()), "furnace")
    assert plan.method.name == "em-llp" and plan.folds == 5


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"method_name": "svm"}, UnknownMethodError, "unknown method 'svm'"),
        ({"target": "rust"}, TrainingError, "unknown target 'rust'"),
    ],
)
def test_unknown_names_are_refused_before_any_work(fast_config, kwargs, error, message):
    with pytest.raises(error, match=message):
        training_plan(fast_config, "cooling", **kwargs)
    with pytest.raises(ConfigError, match="unknown station 'oven'"):
        training_plan(fast_config, "oven")


def test_labeled_data_turns_counts_into_shares_per_target(history_plant):
    config, counts = history_plant.config, history_plant.history.defect_counts
    counts = counts.set_index(counts["charge_id"].astype(str))
    with Store.open(history_plant.url) as store:
        anyd = labeled_data(store, config, "rolling")
        crack = labeled_data(store, config, "rolling", target="crack")
        multi = labeled_data(store, config, "rolling", target="multiclass")
    n = counts["n_sticks"].astype(float)
    expected = counts[list(config.defect_types)].sum(axis=1) / n
    pd.testing.assert_series_equal(
        anyd.proportions, expected.rename("defective"), check_names=False, check_index_type=False
    )
    assert anyd.proportions.name == "defective" and anyd.n_charges == len(counts)
    np.testing.assert_allclose(crack.proportions, counts["crack"] / n)
    assert list(multi.proportions.columns) == ["ok", *config.defect_types]
    np.testing.assert_allclose(multi.proportions.sum(axis=1), 1.0)
    np.testing.assert_allclose(multi.failing_shares, anyd.proportions)
    # the fresh charges have no counts yet: they are not training data
    assert set(anyd.proportions.index) == set(counts.index)


def test_since_and_until_select_charges_by_when_they_were_first_seen(history_plant):
    with Store.open(history_plant.url) as store:
        times = store.read_charge_times()
        labeled = store.read_defect_counts().index
        cut = times.reindex(labeled).sort_values().iloc[8]
        late = labeled_data(store, history_plant.config, "furnace", since=cut.to_pydatetime())
        early = labeled_data(store, history_plant.config, "furnace", until=cut.to_pydatetime())
        with pytest.raises(TrainingError, match="widen --since/--until"):
            labeled_data(
                store, history_plant.config, "furnace", since=pd.Timestamp("2100-01-01", tz="UTC")
            )
    assert late.n_charges + early.n_charges == len(labeled)
    assert times.reindex(late.proportions.index).min() >= cut


def test_a_trained_model_is_a_candidate_whose_artifact_decides_as_validated(
    history_plant, tmp_path
):
    url = history_plant.copy_to(tmp_path)
    config = history_plant.config
    with Store.open(url) as store:
        result = train_station(store, config, "cooling", random_state=1)
        record = get_model(store, result.model_id)
        model = load_model(store, result.model_id).model
        features = station_features(store, config, "cooling", imputation=model.imputation)
    assert record["status"] == "candidate" and record["station"] == "cooling"
    assert result.artifact_path.parent == tmp_path / "models"  # beside the SQLite file
    assert model.threshold == pytest.approx(result.metrics["threshold"])
    assert model.costs.fail_cost == config.station("cooling").fail_cost
    assert list(model.features) == record["features"] == list(features.X.columns)
    assert model.trained_from <= model.trained_until
    decided = model.decide(features.X)
    assert decided["probability"].between(0, 1).all()
    np.testing.assert_array_equal(
        decided["flagged"], decided["probability"].to_numpy() >= model.threshold
    )
    assert result.per_charge["n_sticks"].sum() == result.n_sticks


def test_the_same_seed_gives_the_same_model(history_plant, tmp_path):
    url = history_plant.copy_to(tmp_path)
    config = replace(
        history_plant.config,
        training=Training(
            default_method="alter-psvm", methods={"alter-psvm": {"C": [1.0]}}, cv=2, bootstrap=5
        ),
    )
    with Store.open(url) as store:
        first, second = (
            load_model(store, train_station(store, config, "rolling", random_state=3).model_id)
            for _ in range(2)
        )
        X = station_features(store, config, "rolling").X
    np.testing.assert_array_equal(
        first.model.failure_probability(X), second.model.failure_probability(X)
    )
    assert first.model.threshold == second.model.threshold


def test_a_training_on_two_processes_gives_the_model_of_one(history_plant, tmp_path):
    """training.n_jobs: the grid's fits and the out-of-fold folds run in loky processes, and
    the model is the same (the learners' own parallel parts: their ``n_jobs`` tests)."""
    url = history_plant.copy_to(tmp_path)
    method = "invcal"
    grid = {"C_p": [0.1, 1.0]}
    config = replace(
        history_plant.config,
        training=Training(default_method=method, methods={method: grid}, cv=2, bootstrap=5),
    )
    with Store.open(url) as store:
        models = []
        for n_jobs in (1, 2):
            with compute_on(None, n_jobs=n_jobs):
                assert get_active_backend()[1] == (None if n_jobs == 1 else n_jobs)
                trained = train_station(store, config, "rolling", random_state=3)
            models.append(load_model(store, trained.model_id))
        X = station_features(store, config, "rolling").X
    one, two = models
    np.testing.assert_array_equal(
        one.model.failure_probability(X), two.model.failure_probability(X)
    )
    assert one.model.threshold == two.model.threshold
    assert one.model.metrics == two.model.metrics


@pytest.mark.parametrize("n_jobs", [0, -2])
def test_no_process_to_train_on_is_refused_before_any_work(n_jobs):
    with pytest.raises(ValueError, match=f"got {n_jobs}"), compute_on(None, n_jobs=n_jobs):
        pytest.fail("the block ran")


def test_every_station_is_checked_before_the_first_training_starts(history_plant, tmp_path):
    url = history_plant.copy_to(tmp_path)
    with Store.open(url) as store, pytest.raises(ConfigError, match="unknown station 'oven'"):
        train_stations(store, history_plant.config, ["furnace", "oven"])
    with Store.open(url) as store:
        assert store.execute_sql("SELECT count(*) FROM models") == [(0,)]


def test_auto_tries_every_configured_method_and_keeps_the_best_with_its_comparison(
    history_plant, tmp_path
):
    from qcllp.training.train import is_auto

    training = Training(
        default_method="auto",
        methods={"invcal": {"C_p": [1.0]}, "meanmap": {"reg": [1.0]}},
        cv=2,
        bootstrap=5,
    )
    config = replace(history_plant.config, training=training)
    assert is_auto(None, config) and is_auto("AUTO", history_plant.config)
    store = Store.open(history_plant.copy_to(tmp_path))
    said: list[str] = []
    result = train_station(store, config, "cooling", progress=said.append)
    comparison = result.params["auto"]
    assert [c["method"] for c in comparison] == ["invcal", "meanmap"]
    assert all(np.isfinite(c["cv_bag_error"]) and c["seconds"] >= 0 for c in comparison)
    best = min(
        comparison,
        key=lambda c: (-c["expected_saving_per_1000"], c["cv_bag_error"]),
    )
    assert result.method == best["method"]
    assert get_model(store, result.model_id)["params"]["auto"] == comparison  # kept with it
    assert f"cooling: auto chose {result.method} of invcal, meanmap" in said
    registered = [line for line in said if "registered model" in line]
    assert registered == [
        f"cooling: registered model {result.model_id} ({result.method}) as a candidate"
    ]
    store.close()


def test_the_auto_rule_prefers_the_saving_then_the_bag_error():
    from qcllp.station.lockout_rule import SavingEstimate
    from qcllp.training.train import MethodTrial, choose_method

    def trial(name, error, saving):
        return MethodTrial(name, error, SavingEstimate(saving, saving - 5, saving + 5), False, 1.0)

    assert choose_method([trial("a", 0.05, 0.0), trial("b", 0.09, 12.0)]) == 1
    assert choose_method([trial("a", 0.05, 0.0), trial("b", 0.04, 0.0)]) == 1
    assert choose_method([trial("a", 0.05, 0.0), trial("b", 0.05, 0.0)]) == 0
    assert choose_method([trial("a", float("nan"), 0.0), trial("b", 0.2, 0.0)]) == 1


def test_any_defect_auto_keeps_the_way_whose_probabilities_explain_the_counts_better(
    history_plant,
):
    """``auto`` fits both ways; the model it keeps is exactly the one its way alone gives,
    scored as that way's own fit records it (the count log likelihood)."""
    from qcllp.training.train import fit_station_model, station_costs

    config = history_plant.config
    costs = station_costs(config, "cooling")
    with Store.open(history_plant.url) as store:
        data = labeled_data(store, config, "cooling")
    said: list[str] = []
    auto = fit_station_model(
        training_plan(config, "cooling", any_defect="auto"), data, costs, progress=said.append
    ).model
    scores = auto.params["any_defect_auto"]
    chosen = auto.params["any_defect"]
    assert set(scores) == {"per-type-sum", "direct"}
    assert scores[chosen] == max(scores.values())
    alone = fit_station_model(training_plan(config, "cooling", any_defect=chosen), data, costs)
    assert alone.model.metrics["count_loglik"] == scores[chosen] == auto.metrics["count_loglik"]
    assert auto.threshold == alone.model.threshold and auto.metrics == alone.model.metrics
    assert type(auto.estimator) is type(alone.model.estimator)
    assert f"cooling: any defect learned {chosen} (per-type-sum " in "\n".join(said)


def test_any_defect_auto_keeps_the_likelier_way_and_ties_keep_the_per_type_models():
    from qcllp.training.train import choose_any_defect

    assert Training().any_defect == "per-type-sum"  # auto is measured, not the default
    assert choose_any_defect({"per-type-sum": -2.0, "direct": -1.5}) == "direct"
    assert choose_any_defect({"per-type-sum": -1.5, "direct": -2.0}) == "per-type-sum"
    assert choose_any_defect({"per-type-sum": -1.5, "direct": -1.5}) == "per-type-sum"


@pytest.mark.slow  # 12 s: four learners through the whole pipeline; each learner has its own tests
def test_the_nonlinear_learners_train_a_station_through_the_whole_pipeline(history_plant, tmp_path):
    """Every learner of the issue "Beyond the seeds" is selectable by name: grid search on
    charges, per-type models, count calibration, threshold, artifact."""
    methods = {
        "lmm": {"reg": [1.0]},
        "amm": {"reg": [1.0], "max_iter": [3]},
        "llpfc": {"C": [1.0]},
        "proportion_boosting": {"n_estimators": [30]},
        "em_llp": {"C": [1.0], "max_iter": [2]},
    }
    training = Training(default_method="auto", methods=methods, cv=2, bootstrap=5)
    config = replace(history_plant.config, training=training)
    with Store.open(history_plant.copy_to(tmp_path)) as store:
        result = train_station(store, config, "cooling", random_state=0)
        comparison = {c["method"]: c for c in result.params["auto"]}
        model = load_model(store, result.model_id).model
        X = station_features(store, config, "cooling").X
    assert set(comparison) == {"lmm", "amm", "llpfc", "proportion-boosting", "em-llp"}
    errors = {m: c["cv_bag_error"] for m, c in comparison.items()}
    assert all(0.0 <= e < 0.2 for e in errors.values()), errors
    assert model.method == result.method and model.failure_probability(X).std() > 0
