"""Boundary validation of LLP inputs: every bad input gets a ValueError naming what is wrong."""

import numpy as np
import pandas as pd
import pytest

from qcllp.learn import check_features, check_llp_input, counts_to_shares

X = np.arange(18, dtype=float).reshape(9, 2)
BAGS = np.array(["c1", "c2", "c1", "c2", "c2", "c2", "c1", "c3", "c3"])
SHARES = pd.Series({"c1": 2 / 3, "c2": 0.5, "c3": 0.0})


def test_binary_input_is_coded_with_classes_zero_and_one():
    problem = check_llp_input(X, BAGS, SHARES)
    assert problem.binary
    assert problem.classes.tolist() == [0, 1]
    assert problem.bag_sizes.tolist() == [3, 4, 2]
    np.testing.assert_allclose(problem.positive_share, [2 / 3, 0.5, 0.0])
    assert (problem.bag_ids[problem.bag_codes] == BAGS).all()


def test_multiclass_input_keeps_column_labels_as_classes():
    proportions = pd.DataFrame(
        {"ok": [0.5, 1.0, 0.5], "crack": [0.5, 0.0, 0.0], "bend": [0.0, 0.0, 0.5]},
        index=["c1", "c2", "c3"],
    )
    problem = check_llp_input(X, BAGS, proportions)
    assert not problem.binary
    assert problem.classes.tolist() == ["ok", "crack", "bend"]


def test_bag_ids_may_be_any_hashable_type():
    bags = [(2024, i % 3) for i in range(9)]
    shares = pd.Series([0.2, 0.4, 0.6], index=pd.Index([(2024, 0), (2024, 1), (2024, 2)]))
    problem = check_llp_input(X, pd.Series(bags, dtype=object), shares)
    assert problem.n_bags == 3


def test_dataframe_features_keep_their_names():
    frame = pd.DataFrame(X, columns=["temp", "force"])
    problem = check_llp_input(frame, BAGS, SHARES)
    assert problem.feature_names.tolist() == ["temp", "force"]


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        (pd.Series({"c1": 1.2, "c2": 0.5, "c3": 0.0}), r"bag 'c1'.*1\.2 is outside \[0, 1\]"),
        (pd.Series({"c1": -0.1, "c2": 0.5, "c3": 0.0}), r"bag 'c1'.*-0\.1 is outside \[0, 1\]"),
        (pd.Series({"c1": np.nan, "c2": 0.5, "c3": 0.0}), r"bag 'c1'.*nan is outside"),
        (pd.Series({"c1": 0.5, "c2": 0.5}), r"row 7: bag 'c3' has no entry in proportions"),
        (
            pd.Series({"c1": 0.5, "c2": 0.5, "c3": 0.0, "c9": 1.0}),
            r"bag\(s\) 'c9' in proportions have no rows",
        ),
        (pd.Series({"c1": 0.0, "c2": 0.0, "c3": 0.0}), "fewer than 2 classes overall"),
        (pd.Series([0.1, 0.2, 0.3], index=["c1", "c2", "c1"]), "lists bag 'c1' twice"),
    ],
)
def test_bad_binary_proportions_are_named(shares, message):
    with pytest.raises(ValueError, match=message):
        check_llp_input(X, BAGS, shares)


def test_multiclass_rows_must_sum_to_one():
    proportions = pd.DataFrame(
        {"ok": [0.5, 1.0, 0.5], "crack": [0.5, 0.0, 0.1]}, index=["c1", "c2", "c3"]
    )
    with pytest.raises(ValueError, match=r"bag 'c3': class shares sum to 0\.6, not 1"):
        check_llp_input(X, BAGS, proportions)


def test_multiclass_rows_within_tolerance_are_accepted():
    proportions = pd.DataFrame(
        {"ok": [0.5, 1.0, 0.5 + 5e-7], "crack": [0.5, 0.0, 0.5]}, index=["c1", "c2", "c3"]
    )
    check_llp_input(X, BAGS, proportions)


def test_multiclass_share_out_of_range_names_bag_and_column():
    proportions = pd.DataFrame(
        {"ok": [1.5, 1.0, 0.5], "crack": [-0.5, 0.0, 0.5]}, index=["c1", "c2", "c3"]
    )
    with pytest.raises(ValueError, match=r"bag 'c1', 'ok': share 1\.5"):
        check_llp_input(X, BAGS, proportions)


def test_nan_feature_names_row_and_column():
    frame = pd.DataFrame(X, columns=["temp", "force"])
    frame.loc[4, "force"] = np.inf
    with pytest.raises(ValueError, match=r"first at row 4, column 'force'"):
        check_llp_input(frame, BAGS, SHARES)


def test_x_and_bags_of_different_length():
    with pytest.raises(ValueError, match="X has 9 rows but bags has 8 entries"):
        check_llp_input(X, BAGS[:8], SHARES)


def test_non_numeric_feature_column_is_named():
    frame = pd.DataFrame({"temp": X[:, 0], "grade": ["A"] * 9})
    with pytest.raises(ValueError, match="X column 'grade' is not numeric"):
        check_llp_input(frame, BAGS, SHARES)


def test_known_labels_are_coded_and_missing_ones_marked():
    y = [1, None, np.nan, -1, 0, 1, 0, None, 0.0]
    problem = check_llp_input(X, BAGS, SHARES, y=y)
    assert problem.known.tolist() == [1, -1, -1, -1, 0, 1, 0, -1, 0]


def test_known_label_outside_the_classes_is_named():
    with pytest.raises(ValueError, match=r"y row 2: label 'bend' is not one of the classes"):
        check_llp_input(X, BAGS, SHARES, y=[None, None, "bend"] + [None] * 6)


def test_counts_become_shares_with_the_remainder_as_ok():
    counts = pd.DataFrame({"crack": [1, 0], "bend": [2, 1]}, index=["a", "b"])
    shares = counts_to_shares(counts, pd.Series({"a": 10, "b": 4}), remainder="ok")
    assert shares.columns.tolist() == ["ok", "crack", "bend"]
    np.testing.assert_allclose(shares.loc["a"], [0.7, 0.1, 0.2])
    np.testing.assert_allclose(shares.sum(axis=1), 1.0)


def test_binary_counts_become_a_share_series():
    shares = counts_to_shares(pd.Series({"a": 3, "b": 0}), pd.Series({"a": 12, "b": 5}))
    assert shares.to_dict() == {"a": 0.25, "b": 0.0}


@pytest.mark.parametrize(
    ("counts", "sizes", "message"),
    [
        (pd.Series({"a": -1}), pd.Series({"a": 5}), r"bag 'a'.*count -1\.0 is negative"),
        (
            pd.Series({"a": 6}),
            pd.Series({"a": 5}),
            r"bag 'a': counts sum to 6, above the bag size 5",
        ),
        (pd.Series({"a": 1}), pd.Series({"a": 0}), r"bag 'a': bag size 0\.0 is not a positive"),
        (pd.Series({"a": 1, "b": 1}), pd.Series({"a": 5}), r"bag 'b' is in counts but not in"),
        (pd.Series({"a": 1}), pd.Series({"a": 5, "z": 3}), r"bag 'z' is in bag_sizes but not"),
    ],
)
def test_bad_counts_are_named(counts, sizes, message):
    with pytest.raises(ValueError, match=message):
        counts_to_shares(counts, sizes)


def test_prediction_features_must_match_the_fitted_columns():
    with pytest.raises(ValueError, match="X has 3 features, but the model was fitted on 2"):
        check_features(np.zeros((2, 3)), 2)
    frame = pd.DataFrame(np.zeros((2, 2)), columns=["force", "temp"])
    with pytest.raises(ValueError, match="in a different order"):
        check_features(frame, 2, np.array(["temp", "force"], dtype=object))


def test_a_share_that_is_not_a_number_names_its_bag_and_column():
    X = np.zeros((4, 2))
    bags = ["a", "a", "b", "b"]
    with pytest.raises(
        ValueError, match=r"bag 'b', 'share of class 1': share 'lo' is not a number"
    ):
        check_llp_input(X, bags, pd.Series([0.5, "lo"], index=["a", "b"], dtype=object))
    table = pd.DataFrame({"ok": [0.5, 0.7], 1: [0.5, "x"]}, index=["a", "b"])
    with pytest.raises(ValueError, match=r"bag 'b', 1: share 'x' is not a number"):
        check_llp_input(X, bags, table)


def test_integer_column_names_print_as_plain_numbers():
    frame = pd.DataFrame({0: [1.0, 2.0, 3.0, 4.0], 1: [1.0, np.nan, 3.0, 4.0]})
    with pytest.raises(ValueError, match=r"first at row 1, column 1;") as caught:
        check_llp_input(frame, ["a", "a", "b", "b"], pd.Series([0.2, 0.6], index=["a", "b"]))
    assert "np." not in str(caught.value)
    table = pd.DataFrame({0: [0.5, 0.5], 1: [0.5, 1.5]}, index=[10, 11])
    with pytest.raises(ValueError, match=r"bag 11, 1: share 1.5 is outside") as caught:
        check_llp_input(np.zeros((4, 2)), [10, 10, 11, 11], table)
    assert "np." not in str(caught.value)


def test_bags_that_cannot_identify_a_model_are_warned_about():
    from qcllp.learn.core.problem import IdentifiabilityWarning

    X = np.arange(8.0).reshape(4, 2)
    with pytest.warns(IdentifiabilityWarning, match="only 1 bag"):
        check_llp_input(X, ["a"] * 4, pd.Series([0.25], index=["a"]))
    with pytest.warns(IdentifiabilityWarning, match="all 2 bags have the same class shares"):
        check_llp_input(X, ["a", "a", "b", "b"], pd.Series([0.5, 0.5], index=["a", "b"]))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_llp_input(X, ["a", "a", "b", "b"], pd.Series([0.0, 1.0], index=["a", "b"]))
