"""The learning-from-label-proportions problem model and its input validation.

An LLP training set is a feature matrix ``X``, a bag id per row (``bags``: the charge of each
stick) and, per bag, the share of each class (``proportions``). Everything a learner needs is
checked here once, at the boundary, and turned into integer-coded arrays so that the
algorithms can work on whole bags at once with ``np.bincount`` and friends.

Conventions (``DESIGN.md``):

* binary proportions: a :class:`pandas.Series` indexed by bag id holding the share of class 1
  (1 = positive/defective); classes are ``[0, 1]``;
* multi-class proportions: a :class:`pandas.DataFrame` indexed by bag id, one column per class,
  rows summing to one; the classes are the column labels, in column order;
* known instance labels (optional, e.g. sticks inspected by hand): an array of length n with
  the class label where known and ``None``/``NaN`` (or ``-1`` when -1 is not a class) elsewhere.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "LLPProblem",
    "ROW_SUM_TOLERANCE",
    "check_features",
    "check_llp_input",
    "counts_to_shares",
    "IdentifiabilityWarning",
    "plain_value",
]

ROW_SUM_TOLERANCE = 1e-6
UNKNOWN = -1


@dataclass(frozen=True, eq=False)
class LLPProblem:
    """A validated, integer-coded LLP training set.

    Attributes
    ----------
    X : (n, m) float64 feature matrix, finite.
    bag_codes : (n,) int, row -> index into ``bag_ids``.
    bag_ids : (h,) the original bag ids, in the order of ``proportions``' index.
    proportions : (h, l) float64, shares per bag and class; rows sum to one.
    classes : (l,) the class labels; ``[0, 1]`` for binary problems.
    binary : whether the proportions were given as a Series of positive shares.
    known : (n,) int, class index of rows whose label is known, ``-1`` elsewhere.
    feature_names : column names when X was a DataFrame, else ``None``.
    """

    X: np.ndarray
    bag_codes: np.ndarray
    bag_ids: np.ndarray
    proportions: np.ndarray
    classes: np.ndarray
    binary: bool
    known: np.ndarray
    feature_names: np.ndarray | None = None

    @property
    def n_bags(self) -> int:
        return len(self.bag_ids)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def bag_sizes(self) -> np.ndarray:
        """|G_i|, the number of rows per bag, shape (h,)."""
        return np.bincount(self.bag_codes, minlength=self.n_bags)

    @property
    def positive_share(self) -> np.ndarray:
        """Share of the last class (class 1 for binary problems), shape (h,)."""
        return self.proportions[:, -1]

    def subset(self, rows: np.ndarray) -> LLPProblem:
        """The problem restricted to ``rows`` (whole bags); bags without rows are dropped."""
        rows = np.asarray(rows)
        codes = self.bag_codes[rows]
        present = np.unique(codes)
        remap = np.full(self.n_bags, -1, dtype=np.intp)
        remap[present] = np.arange(len(present))
        return LLPProblem(
            X=self.X[rows],
            bag_codes=remap[codes],
            bag_ids=self.bag_ids[present],
            proportions=self.proportions[present],
            classes=self.classes,
            binary=self.binary,
            known=self.known[rows],
            feature_names=self.feature_names,
        )


def counts_to_shares(
    counts: pd.Series | pd.DataFrame | Mapping,
    bag_sizes: pd.Series | Mapping,
    *,
    remainder: Hashable | None = None,
) -> pd.Series | pd.DataFrame:
    """Turn per-bag class counts and bag sizes into shares.

    ``counts`` is a Series (binary: the number of positives per bag) or a DataFrame (one
    column per class), indexed by bag id; ``bag_sizes`` a Series indexed by bag id. With
    ``remainder="ok"`` a DataFrame of defect counts gets an extra column ``"ok"`` holding the
    sticks that had none of the counted classes (the plant's ``n_sticks - sum(defects)``).

    Raises ``ValueError`` naming the bag when a count is negative, a bag's counts exceed its
    size, a size is not positive, or a bag appears in one input but not the other.
    """
    counts = pd.Series(counts) if isinstance(counts, Mapping) else counts
    sizes = pd.Series(bag_sizes, dtype=float) if isinstance(bag_sizes, Mapping) else bag_sizes
    sizes = sizes.astype(float)
    frame = counts.to_frame() if isinstance(counts, pd.Series) else counts
    _check_same_bags(frame.index, sizes.index, "counts", "bag_sizes")
    sizes = sizes.reindex(frame.index)
    bad_size = ~np.isfinite(sizes.to_numpy()) | (sizes.to_numpy() <= 0)
    if bad_size.any():
        bag = sizes.index[np.argmax(bad_size)]
        raise ValueError(
            f"bag {plain_value(bag)!r}: bag size {plain_value(sizes[bag])!r} "
            "is not a positive number"
        )
    values = frame.to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"bag {plain_value(frame.index[i])!r}, column {frame.columns[j]!r}: "
            f"count {plain_value(values[i, j])!r} is negative or not a number"
        )
    totals = values.sum(axis=1)
    over = totals > sizes.to_numpy() + ROW_SUM_TOLERANCE
    if over.any():
        i = int(np.argmax(over))
        raise ValueError(
            f"bag {plain_value(frame.index[i])!r}: counts sum to {totals[i]:g}, above the bag size "
            f"{sizes.iloc[i]:g}"
        )
    shares = frame.div(sizes, axis=0)
    if isinstance(counts, pd.Series):
        return shares.iloc[:, 0].rename(counts.name)
    if remainder is not None:
        if remainder in shares.columns:
            raise ValueError(f"remainder column {remainder!r} already exists in counts")
        shares.insert(0, remainder, 1.0 - shares.sum(axis=1).clip(upper=1.0))
    return shares


def check_llp_input(
    X,
    bags,
    proportions: pd.Series | pd.DataFrame,
    y=None,
) -> LLPProblem:
    """Validate an LLP training set and return it integer-coded.

    Every error is a ``ValueError`` whose message names the offending bag, column or row:
    shares outside [0, 1], multi-class rows not summing to one (tolerance 1e-6), bags in
    ``proportions`` without rows, rows whose bag has no proportion, NaN/inf features, fewer
    than two classes present overall, and X/bags/y of different lengths.
    """
    Xa, feature_names = _as_feature_matrix(X)
    bags_a = _as_1d(bags, "bags")
    _check_rows(Xa, bags_a, feature_names)
    binary, classes, table = _proportion_table(proportions)
    index = proportions.index
    if index.has_duplicates:
        twice = plain_value(index[index.duplicated()][0])
        raise ValueError(f"proportions lists bag {twice!r} twice")
    bag_codes = _bag_codes(index, bags_a)
    _check_classes_present(bag_codes, index, table, classes)
    if y is None:  # known instance labels identify what the shares cannot
        _warn_unidentifiable(table)
    known = _encode_known(y, classes, Xa.shape[0])
    return LLPProblem(
        X=Xa,
        bag_codes=bag_codes.astype(np.intp),
        bag_ids=np.asarray(index),
        proportions=table,
        classes=classes,
        binary=binary,
        known=known,
        feature_names=feature_names,
    )


def _check_rows(Xa: np.ndarray, bags_a: np.ndarray, feature_names: np.ndarray | None) -> None:
    """X has rows, one bag per row, and only finite features."""
    if len(bags_a) != Xa.shape[0]:
        raise ValueError(f"X has {Xa.shape[0]} rows but bags has {len(bags_a)} entries")
    if Xa.shape[0] == 0:
        raise ValueError("X has no rows")
    _check_finite(Xa, feature_names)


def _proportion_table(
    proportions: pd.Series | pd.DataFrame,
) -> tuple[bool, np.ndarray, np.ndarray]:
    """``(binary, classes, table)``: the shares as an (h, l) table of checked shares, one column
    per class; a Series of positive shares becomes the two columns of classes ``[0, 1]``."""
    if isinstance(proportions, pd.Series):
        shares = _numeric(proportions.to_frame("share of class 1"))[:, 0]
        _check_share_range(shares[:, None], proportions.index, ["share of class 1"])
        return True, np.array([0, 1]), np.column_stack([1.0 - shares, shares])
    if isinstance(proportions, pd.DataFrame):
        return False, np.asarray(proportions.columns), _class_share_table(proportions)
    raise TypeError(
        "proportions must be a pandas Series (binary: share of class 1 per bag) or a "
        f"DataFrame (one column per class), got {type(proportions).__name__}"
    )


def _class_share_table(proportions: pd.DataFrame) -> np.ndarray:
    """The multi-class shares: at least two distinct class columns, shares in [0, 1], every
    bag's row summing to one (within :data:`ROW_SUM_TOLERANCE`)."""
    classes = np.asarray(proportions.columns)
    if len(classes) < 2:
        raise ValueError(
            f"proportions has {len(classes)} column(s); a multi-class problem needs one "
            "column per class (at least 2)"
        )
    if proportions.columns.has_duplicates:
        dup = proportions.columns[proportions.columns.duplicated()][0]
        raise ValueError(f"proportions has the class column {plain_value(dup)!r} twice")
    table = _numeric(proportions)
    _check_share_range(table, proportions.index, list(proportions.columns))
    row_sums = table.sum(axis=1)
    off = np.abs(row_sums - 1.0) > ROW_SUM_TOLERANCE
    if off.any():
        i = int(np.argmax(off))
        raise ValueError(
            f"bag {plain_value(proportions.index[i])!r}: class shares sum to "
            f"{row_sums[i]:.8g}, not 1 "
            f"(tolerance {ROW_SUM_TOLERANCE:g})"
        )
    return table


def _bag_codes(index: pd.Index, bags_a: np.ndarray) -> np.ndarray:
    """Each row's bag as a position in ``index``; every row's bag must be there and every bag
    of ``index`` must have rows."""
    bag_codes = index.get_indexer(pd.Index(bags_a))
    if (bag_codes < 0).any():
        row = int(np.argmax(bag_codes < 0))
        raise ValueError(f"row {row}: bag {plain_value(bags_a[row])!r} has no entry in proportions")
    sizes = np.bincount(bag_codes, minlength=len(index))
    if (sizes == 0).any():
        empty = [index[i] for i in np.flatnonzero(sizes == 0)[:5]]
        listed = ", ".join(repr(plain_value(b)) for b in empty)
        raise ValueError(f"bag(s) {listed} in proportions have no rows in X")
    return bag_codes


def _check_classes_present(
    bag_codes: np.ndarray, index: pd.Index, table: np.ndarray, classes: np.ndarray
) -> None:
    """At least two classes have a positive share over all rows (eta, weighted by bag size):
    with one class there is nothing to learn."""
    sizes = np.bincount(bag_codes, minlength=len(index))
    eta = sizes @ table / sizes.sum()
    if np.count_nonzero(eta > 0) < 2:
        present = [plain_value(classes[j]) for j in np.flatnonzero(eta > 0)]
        raise ValueError(
            f"the proportions contain fewer than 2 classes overall (only {present!r}); "
            "there is nothing to learn"
        )


def check_features(X, n_features: int, feature_names: np.ndarray | None = None) -> np.ndarray:
    """Validate a prediction-time feature matrix against what the model was fitted on."""
    Xa, names = _as_feature_matrix(X)
    if Xa.shape[1] != n_features:
        raise ValueError(f"X has {Xa.shape[1]} features, but the model was fitted on {n_features}")
    if feature_names is not None and names is not None and not np.array_equal(names, feature_names):
        missing = [c for c in feature_names if c not in set(names)]
        detail = f"missing {missing[:5]!r}" if missing else "in a different order"
        raise ValueError(f"X's columns differ from those the model was fitted on: {detail}")
    _check_finite(Xa, names)
    return Xa


def _as_feature_matrix(X) -> tuple[np.ndarray, np.ndarray | None]:
    names = None
    if isinstance(X, pd.DataFrame):
        names = np.asarray(X.columns, dtype=object)
        non_numeric = [c for c, t in X.dtypes.items() if not pd.api.types.is_numeric_dtype(t)]
        if non_numeric:
            raise ValueError(f"X column {plain_value(non_numeric[0])!r} is not numeric")
        Xa = X.to_numpy(dtype=float)
    else:
        try:
            Xa = np.asarray(X, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"X must be numeric: {exc}") from None
    if Xa.ndim == 1:
        raise ValueError("X must be 2-dimensional (n_samples, n_features), got a 1-d array")
    if Xa.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got {Xa.ndim} dimensions")
    return np.ascontiguousarray(Xa), names


def _check_finite(Xa: np.ndarray, names: np.ndarray | None) -> None:
    bad = ~np.isfinite(Xa)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        column = plain_value(names[col]) if names is not None else int(col)
        raise ValueError(
            f"X has {int(bad.sum())} NaN/inf value(s), first at row {row}, column {column!r}; "
            "impute missing readings before fitting"
        )


def _check_share_range(table: np.ndarray, index: pd.Index, columns: list) -> None:
    bad = ~np.isfinite(table) | (table < 0) | (table > 1)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"bag {plain_value(index[i])!r}, {plain_value(columns[j])!r}: "
            f"share {plain_value(table[i, j])!r} is outside [0, 1]"
        )


def _numeric(frame: pd.DataFrame) -> np.ndarray:
    """The shares as floats; a cell that is not a number is named by bag and column."""
    try:
        return frame.to_numpy(dtype=float)
    except (TypeError, ValueError):
        pass
    for column in frame.columns:
        converted = pd.to_numeric(frame[column], errors="coerce")
        bad = converted.isna() & frame[column].notna()
        if bad.any():
            bag = frame.index[int(np.argmax(bad.to_numpy()))]
            value = frame[column].loc[bag]
            raise ValueError(
                f"bag {plain_value(bag)!r}, {plain_value(column)!r}: share "
                f"{plain_value(value)!r} is not a number"
            )
    return frame.apply(pd.to_numeric).to_numpy(dtype=float)


class IdentifiabilityWarning(UserWarning):
    """The bags given cannot pin the model down: it fits, but what it learned is arbitrary."""


def _warn_unidentifiable(table: np.ndarray) -> None:
    """Warn when the bags cannot identify the model: one bag, or bags that all have the same
    shares, say only that share -- any model predicting it for every instance fits them
    exactly, so what is learned is arbitrary. (Fewer bags than features is not warned about:
    the learners are regularized -- the SVM margin, MeanMap's ridge -- and a plant's training
    set of a few dozen charges with more features is a normal, if weak, case.)"""
    if len(table) < 2:
        warnings.warn(
            "only 1 bag: its share alone cannot identify a model (any model predicting that "
            "share for every instance fits); give the learner several bags with different shares",
            IdentifiabilityWarning,
            stacklevel=3,
        )
    elif np.ptp(table, axis=0).max() < 1e-12:
        warnings.warn(
            f"all {len(table)} bags have the same class shares: they cannot identify a model "
            "(any model predicting those shares for every instance fits); give bags whose "
            "shares differ",
            IdentifiabilityWarning,
            stacklevel=3,
        )


def _as_1d(values, name: str) -> np.ndarray:
    arr = values.to_numpy() if isinstance(values, pd.Series | pd.Index) else np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional, got shape {arr.shape}")
    return arr


def _check_same_bags(a: pd.Index, b: pd.Index, name_a: str, name_b: str) -> None:
    only_a = a.difference(b)
    if len(only_a):
        raise ValueError(f"bag {only_a[0]!r} is in {name_a} but not in {name_b}")
    only_b = b.difference(a)
    if len(only_b):
        raise ValueError(f"bag {only_b[0]!r} is in {name_b} but not in {name_a}")


def _encode_known(y, classes: np.ndarray, n: int) -> np.ndarray:
    if y is None:
        return np.full(n, UNKNOWN, dtype=np.intp)
    ya = _as_1d(y, "y")
    if len(ya) != n:
        raise ValueError(f"y has {len(ya)} entries but X has {n} rows")
    missing = np.asarray(pd.isna(ya), dtype=bool)
    if UNKNOWN not in set(classes.tolist()):
        missing |= np.asarray(pd.Series(ya, dtype=object) == UNKNOWN, dtype=bool)
    codes = np.full(n, UNKNOWN, dtype=np.intp)
    given = np.flatnonzero(~missing)
    found = pd.Index(classes).get_indexer(pd.Index(ya[given]))
    if (found < 0).any():
        row = given[int(np.argmax(found < 0))]
        raise ValueError(
            f"y row {row}: label {plain_value(ya[row])!r} is not one of the classes "
            f"{classes.tolist()!r}"
        )
    codes[given] = found
    return codes


def plain_value(value):
    """A numpy scalar as a plain Python value, so that error messages read ``'G3'`` and
    ``-1.0``, not ``np.str_('G3')`` and ``np.float64(-1.0)``; other values are returned as they
    are. For messages that name a bag, a label or a parameter value."""
    return value.item() if isinstance(value, np.generic) else value
