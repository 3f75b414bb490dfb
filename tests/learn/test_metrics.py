"""The error measures of Stolpe & Morik (2011) eq. 2-8 and Yu et al. (2013) eq. 23.

Hand-computed on the paper's Fig. 1 example: G1 = {x1:1, x3:1, x7:0}, G2 = {x2:0, x4:0,
x5:1, x6:1}, G3 = {x8:0, x9:0}; classes y1 = 0, y2 = 1.
"""

import numpy as np
import pandas as pd
import pytest

from qcllp.learn import (
    bag_error,
    bag_error_from_labels,
    err_mse,
    err_pi,
    err_prior,
    err_t,
    err_weight,
    eta,
    model_proportions,
)

PI = np.array([[1 / 3, 2 / 3], [1 / 2, 1 / 2], [1.0, 0.0]])
SIZES = np.array([3, 4, 2])
# rows x1..x9 in order: bag index and true label
BAG_OF_ROW = np.array([0, 1, 0, 1, 1, 1, 0, 2, 2])
TRUE_LABEL = np.array([1, 0, 1, 0, 1, 1, 0, 0, 0])
ALL_ZERO = np.array([[1.0, 0.0]] * 3)


def test_eta_of_fig1_is_five_ninths_and_four_ninths():
    np.testing.assert_allclose(eta(PI, SIZES), [5 / 9, 4 / 9])


def test_model_proportions_of_true_labels_reproduce_pi():
    gamma = model_proportions(TRUE_LABEL, BAG_OF_ROW, 3, 2)
    np.testing.assert_allclose(gamma, PI)


def test_model_proportions_of_a_constant_model():
    gamma = model_proportions(np.zeros(9, dtype=int), BAG_OF_ROW, 3, 2)
    np.testing.assert_allclose(gamma, ALL_ZERO)


def test_errors_vanish_for_the_true_labeling():
    assert err_mse(PI, PI) == 0
    assert err_weight(PI, PI, SIZES) == 0
    assert err_prior(PI, PI, SIZES) == 0
    assert err_pi(PI, PI, SIZES) == 0
    assert bag_error(PI, PI) == 0


def test_err_mse_of_the_all_zero_model_is_25_over_108():
    assert err_mse(PI, ALL_ZERO) == pytest.approx(25 / 108)


def test_err_weight_of_the_all_zero_model_is_7_over_162():
    # G1: (1/3)(5/9)(4/9) + (1/3)(4/9)(4/9) = 36/243; G2: (4/9)(1/4)(5/9 + 4/9) = 27/243;
    # G3 exact; divided by h*l = 6.
    assert err_weight(PI, ALL_ZERO, SIZES) == pytest.approx(7 / 162)


def test_err_prior_of_the_all_zero_model_is_16_over_81():
    # eta(Gamma) = (1, 0): ((5/9 - 1)^2 + (4/9)^2) / 2
    assert err_prior(PI, ALL_ZERO, SIZES) == pytest.approx(16 / 81)


def test_err_pi_is_the_geometric_mean_of_weight_and_prior():
    assert err_pi(PI, ALL_ZERO, SIZES) == pytest.approx(np.sqrt(7 / 162 * 16 / 81))


def test_err_pi_with_labeled_instances_multiplies_in_err_t():
    # T = {x1 (label 1), x8 (label 0)}; the all-zero model errs on x1: Err_T = 1/2 (eq. 8)
    e_t = err_t(np.array([1, 0]), np.array([0, 0]))
    assert e_t == 0.5
    assert err_pi(PI, ALL_ZERO, SIZES, err_labeled=e_t) == pytest.approx(
        np.sqrt(7 / 162 * 16 / 81 * 0.5)
    )


def test_err_t_needs_labeled_instances():
    with pytest.raises(ValueError, match="at least one labeled"):
        err_t(np.array([]), np.array([]))


def test_bag_error_counts_one_wrong_stick_as_its_share_of_the_bag():
    # x7 predicted 1 instead of 0: G1's predicted positive share 1 vs 2/3
    predicted = TRUE_LABEL.copy()
    predicted[6] = 1
    gamma = model_proportions(predicted, BAG_OF_ROW, 3, 2)
    assert bag_error(PI, gamma) == pytest.approx(1 / 3)
    assert err_mse(PI, gamma) == pytest.approx((2 / 9) / 6)


def test_bag_error_from_labels_averages_over_bags_and_accepts_any_bag_ids():
    bags = np.array(["G1", "G2", "G1", "G2", "G2", "G2", "G1", "G3", "G3"])
    shares = pd.Series({"G1": 2 / 3, "G2": 0.5, "G3": 0.0})
    predicted = TRUE_LABEL.copy()
    predicted[6] = 1
    assert bag_error_from_labels(bags, shares, predicted) == pytest.approx(1 / 9)
    assert bag_error_from_labels(bags, shares, predicted, average=False) == pytest.approx(1 / 3)


def test_bag_error_multiclass_is_total_variation_per_bag():
    proportions = pd.DataFrame({"ok": [0.5, 1.0], "crack": [0.5, 0.0], "bend": [0.0, 0.0]})
    bags = np.array([0, 0, 1, 1])
    predicted = np.array(["ok", "bend", "ok", "ok"])
    # bag 0: predicted (ok .5, bend .5) vs (ok .5, crack .5): half the sticks are misplaced
    assert bag_error_from_labels(bags, proportions, predicted, average=False) == pytest.approx(0.5)


def test_bag_error_from_labels_names_an_unknown_class():
    with pytest.raises(ValueError, match="'bend' is not a class"):
        bag_error_from_labels([0], pd.DataFrame({"ok": [1.0], "crack": [0.0]}), ["bend"])
