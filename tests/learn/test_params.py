"""Parameter checks: every learner declares a constraint for each parameter, a bad value is
rejected at the start of ``fit`` with a message naming the learner, the parameter and the
value, and the same parameter is checked the same way in every learner."""

import numpy as np
import pandas as pd
import pytest

from qcllp.learn import (
    AlterPSVM,
    ConvPSVM,
    InvCal,
    KMeansLabeler,
    MeanMap,
    TwinPSVM,
    WellSVM,
)
from qcllp.learn.core.params import check_params

LEARNERS = [AlterPSVM, ConvPSVM, InvCal, KMeansLabeler, MeanMap, TwinPSVM, WellSVM]


@pytest.mark.parametrize("learner", LEARNERS, ids=lambda cls: cls.__name__)
def test_every_parameter_has_a_constraint_and_the_defaults_pass(learner):
    assert set(learner._parameter_constraints) == set(learner().get_params(deep=False))
    check_params(learner())


@pytest.mark.parametrize(
    ("learner", "params", "message"),
    [
        (AlterPSVM, {"C": -1.0}, "AlterPSVM: C must be a finite number > 0, got -1.0"),
        (AlterPSVM, {"n_restarts": 2.5}, "AlterPSVM: n_restarts must be an integer >= 1, got 2.5"),
        (TwinPSVM, {"init": "bogus"}, "TwinPSVM: init must be None or one of 'conv', 'invcal'"),
        (ConvPSVM, {"epsilon": 1.5}, r"ConvPSVM: epsilon must be a number in \[0, 1\], got 1.5"),
        (InvCal, {"gamma": "auto"}, "InvCal: gamma must be .* or one of 'scale', got 'auto'"),
        (MeanMap, {"reg": np.float64(np.nan)}, "MeanMap: reg must be a finite number > 0, got nan"),
        (
            KMeansLabeler,
            {"maxgen": True},
            "KMeansLabeler: maxgen must be an integer >= 1, got True",
        ),
        (WellSVM, {"C_u": 0}, "WellSVM: C_u must be None or a finite number > 0, got 0"),
    ],
)
def test_bad_value_is_named_with_the_learner_and_the_parameter(learner, params, message):
    with pytest.raises(ValueError, match=message):
        check_params(learner(**params))


@pytest.mark.parametrize("learner", [AlterPSVM, TwinPSVM, InvCal], ids=lambda cls: cls.__name__)
def test_zero_proportion_weight_is_rejected_by_every_llp_learner(learner):
    with pytest.raises(ValueError, match="C_p must be a finite number > 0, got 0.0"):
        check_params(learner(C_p=0.0))


@pytest.mark.parametrize("learner", [AlterPSVM, TwinPSVM, ConvPSVM, WellSVM])
def test_zero_tolerance_is_accepted_by_every_learner_with_tol(learner):
    check_params(learner(tol=0.0))


def test_parameters_are_checked_before_the_data():
    X = np.zeros((4, 2))
    wrong_shares = pd.Series([1.5, 0.5], index=["a", "b"])  # 1.5 is no share
    with pytest.raises(ValueError, match="AlterPSVM: kernel must be one of 'linear', 'rbf'"):
        AlterPSVM(kernel="poly").fit(X, ["a", "a", "b", "b"], wrong_shares)
