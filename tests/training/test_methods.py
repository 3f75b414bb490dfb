"""The learners by name: spellings, grids for the scaled learners, and the scaling itself."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.preprocessing import StandardScaler

from qcllp.learn.baselines import MeanMap
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.training.methods import METHODS, Standardized, UnknownMethodError, canonical_name, method


@pytest.mark.parametrize("spelling", ["alter_psvm", "Alter-PSVM", "alterpsvm", "ALTER_PSVM"])
def test_every_spelling_names_the_same_method(spelling):
    assert canonical_name(spelling) == "alter-psvm"


def test_an_unknown_method_lists_the_known_ones():
    with pytest.raises(UnknownMethodError, match="unknown method 'svm'; choose one of") as info:
        method("svm")
    assert all(name in str(info.value) for name in METHODS)


def test_grids_of_scaled_learners_address_the_inner_estimator():
    assert method("invcal").param_grid({"C_p": [1.0]}) == {"estimator__C_p": [1.0]}
    assert method("invcal").param_grid({"estimator__C_p": [2]}) == {"estimator__C_p": [2]}
    assert method("kmeans-labeler").param_grid() == {"n_clusters": [8, 16]}


def test_every_method_builds_a_clonable_estimator_with_its_seed():
    for name, m in METHODS.items():
        estimator = m.estimator(11)
        params = clone(estimator).get_params(deep=True)
        seeds = [v for k, v in params.items() if k.endswith("random_state")]
        assert seeds and set(seeds) <= {11, None}, name


def test_standardized_fits_the_inner_learner_on_scaled_features():
    X, y = make_gaussian_mixture(300, 4, random_state=0)
    X = X * np.array([1000.0, 1.0, 0.01, 50.0]) + 300.0  # sensors in degrees, kN, m/s
    bags, shares = bags_from_labels(y, 30, random_state=0)
    wrapped = Standardized(MeanMap()).fit(X, bags, shares)
    inner = MeanMap().fit(StandardScaler().fit_transform(X), bags, shares)
    np.testing.assert_allclose(
        wrapped.predict_proba(X), inner.predict_proba(StandardScaler().fit(X).transform(X))
    )
    assert wrapped.set_params(estimator__reg=5.0).estimator.reg == 5.0


def test_standardized_scales_as_the_fitted_scaler_does_and_refuses_what_it_refuses():
    X, y = make_gaussian_mixture(200, 4, random_state=1)
    X = X * np.array([1000.0, 1.0, 0.01, 50.0]) + 300.0
    bags, shares = bags_from_labels(y, 20, random_state=1)
    wrapped = Standardized(MeanMap()).fit(X, bags, shares)
    fresh = np.random.default_rng(2).normal(300.0, 100.0, size=(7, 4))
    fresh[3, 1] = np.nan  # kept as the scaler keeps it
    got = wrapped._scaled(fresh)
    np.testing.assert_array_equal(got, wrapped.scaler_.transform(fresh))  # the same numbers
    assert np.isnan(got[3, 1]) and not np.shares_memory(got, fresh)
    fresh[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        wrapped.predict_proba(fresh)
    with pytest.raises(ValueError, match="features"):
        wrapped.predict_proba(fresh[1:, :3])
