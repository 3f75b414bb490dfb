"""Any-defect probability from one LLP model per defect type."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.metrics import roc_auc_score

from qcllp.learn import InvCal, PerDefectClassifier


def _two_mechanisms(seed: int, n_bags: int = 120):
    """Type a is driven by feature 0, type b by feature 1 (exclusive, one defect per row)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 60, n_bags)
    bags = np.repeat(np.arange(n_bags), sizes)
    X = rng.normal(size=(len(bags), 3)) + 0.7 * rng.normal(size=(n_bags, 3))[bags]
    a = rng.random(len(bags)) < 1 / (1 + np.exp(-(3 * X[:, 0] - 5)))
    b = ~a & (rng.random(len(bags)) < 1 / (1 + np.exp(-(3 * X[:, 1] - 5))))
    shares = pd.DataFrame({"a": a, "b": b}).groupby(bags).mean()
    return X, bags, shares, a | b, a


def test_sum_of_per_type_models_ranks_any_defect_better_than_one_model():
    X, bags, shares, failing, _ = _two_mechanisms(0)
    Xt, _, _, failing_t, _ = _two_mechanisms(1)
    per_type = PerDefectClassifier([("a", InvCal()), ("b", InvCal())]).fit(X, bags, shares)
    direct = InvCal().fit(X, bags, shares.sum(axis=1))
    auc_per_type = roc_auc_score(failing_t, per_type.predict_proba(Xt)[:, 1])
    auc_direct = roc_auc_score(failing_t, direct.predict_proba(Xt)[:, 1])
    assert auc_per_type > auc_direct + 0.03, (auc_per_type, auc_direct)
    assert auc_per_type > 0.85


def test_per_type_probabilities_and_combinations():
    X, bags, shares, _, a = _two_mechanisms(2)
    model = PerDefectClassifier([("a", InvCal()), ("b", InvCal())]).fit(X, bags, shares)
    p = model.defect_proba(X)
    assert p.shape == (len(X), 2) and model.defect_types_ == ["a", "b"]
    assert roc_auc_score(a, p[:, 0]) > 0.85  # the type-a model learned type a's mechanism
    np.testing.assert_allclose(model.predict_proba(X)[:, 1], np.minimum(p.sum(axis=1), 1))
    noisy = clone(model).set_params(combine="noisy-or").fit(X, bags, shares)
    np.testing.assert_allclose(noisy.predict_proba(X)[:, 1], 1 - np.prod(1 - p, axis=1))
    assert list(model.classes_) == [0, 1] and set(model.predict(X)) <= {0, 1}


def test_bad_inputs_name_what_is_wrong():
    X, bags, shares, _, _ = _two_mechanisms(3, n_bags=20)
    with pytest.raises(ValueError, match="lack the defect type column"):
        PerDefectClassifier([("a", InvCal()), ("c", InvCal())]).fit(X, bags, shares)
    with pytest.raises(ValueError, match="per-type shares"):
        PerDefectClassifier([("a", InvCal())]).fit(X, bags, shares["a"])
    with pytest.raises(ValueError, match="combine"):
        PerDefectClassifier([("a", InvCal())], combine="max").fit(X, bags, shares)
    with pytest.raises(ValueError, match="at least one"):
        PerDefectClassifier([]).fit(X, bags, shares)


def test_learners_fitted_per_type_combine_into_the_model_fit_gives():
    X, bags, shares, _, _ = _two_mechanisms(3)
    fitted = [("a", InvCal().fit(X, bags, shares["a"])), ("b", InvCal().fit(X, bags, shares["b"]))]
    for combine in ("sum", "noisy-or"):
        adopted = PerDefectClassifier.from_fitted(fitted, combine=combine)
        fit = PerDefectClassifier([("a", InvCal()), ("b", InvCal())], combine=combine)
        fit.fit(X, bags, shares)
        np.testing.assert_array_equal(adopted.predict_proba(X), fit.predict_proba(X))
        assert adopted.defect_types_ == ["a", "b"] and adopted.estimators_["a"] is fitted[0][1]
        assert not hasattr(clone(adopted).estimators[0][1], "classes_")  # unfitted parameter
    with pytest.raises(ValueError, match="named once each"):
        PerDefectClassifier.from_fitted([fitted[0], fitted[0]])
    with pytest.raises(ValueError, match="combine"):
        PerDefectClassifier.from_fitted(fitted, combine="max")
