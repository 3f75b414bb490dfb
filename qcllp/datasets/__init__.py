"""The two small reference data sets the learners are checked against, shipped with qcllp.

* :func:`load_heart`: Statlog (Heart), 270 patients x 13 features scaled to [-1, 1], label in
  {-1, +1}; the data set of the pSVM paper's Tables 2 and 4 (Yu et al. 2013, Sect. 6.2) and the
  twin pSVM paper's Table I, so the learners can be compared with the published figures.
* :func:`load_toy`: the pSVM paper's toy set (Yu et al. 2013, Fig. 1), 200 points in 2-D in two
  bags (60 % and 40 % positive), on which MeanMap and InvCal reach 0 % and pSVM 100 %.

They ship inside the package (``data/``, their sources and licences in ``data/README.md``) so
that the tests and benchmarks run on any clone or installed copy, with no folder outside it.
Like :mod:`sklearn.datasets`, each loader returns a fresh :class:`pandas.DataFrame`; this module
reads package files, so :mod:`qcllp.learn` does not import it.
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

__all__ = ["load_heart", "load_toy"]


def _read(name: str) -> pd.DataFrame:
    """One packaged CSV file as a DataFrame (read through importlib.resources, so a zipped or
    installed package serves as well as a source tree)."""
    with resources.files(__package__).joinpath("data", name).open("rb") as handle:
        return pd.read_csv(handle)


def load_heart() -> pd.DataFrame:
    """Statlog (Heart): columns ``x1`` .. ``x13`` (scaled to [-1, 1]) and ``label`` in {-1, +1}."""
    return _read("heart.csv")


def load_toy() -> pd.DataFrame:
    """The pSVM paper's toy set: columns ``x1``, ``x2``, ``bag`` (1 or 2) and ``label`` in
    {-1, +1} (for evaluation only: a learner sees the bags' shares)."""
    return _read("toy.csv")
