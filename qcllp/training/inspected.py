"""Inspected sticks in a station's training set: per-stick labels where the counts are blind.

A stick the station's scorer locks out is looked at at the lock-out bay; audit samples the
model let pass are looked at too (table ``inspections``, one row per station and stick, its
``result`` ``ok`` or a defect type). Final QC's counts tell how many sticks of a charge failed,
never which; an inspection tells exactly that for one stick, and for the lock-outs it does so
at the top of the model's ranking, where a model trained on counts alone can claim far more
than its sticks deliver (a charge effect a sensor sees ranks charges, not sticks:
``simulate_plant(charge_effect=...)``).

How they enter the training set (:func:`with_inspections`), per labeled charge:

* both kinds, lock-outs and audit samples, are true labels of the station's own inspections
  (another station's inspection of a stick is that station's evidence);
* an inspected stick with features at the station is a row of the charge's bag with its label
  *known*; the charge's count covers the bag's other sticks: a lock-out never reached final
  QC, so it is added to the bag and its result to the charge's counts (``n_sticks`` + 1, the
  type's count + 1 when it failed); so is an audit sample (flag ``inspect``) that failed: it
  was scrapped at the station. An audit sample found ok, or one of a stick the model let pass
  (flag ``pass``), went on down the line and is among the sticks final QC counted, so the
  counts stay as they are (and an inspected failure of the latter is one of the charge's
  counted ones). Which sticks QC counted is :func:`qcllp.station.final_qc.qc_counted`'s
  call; a charge whose audit sample is not inspected yet is held back there;
* the learner gets the known labels (``y``, NaN where unknown: :mod:`qcllp.learn.core.
  problem`), each bag's share covering all its rows: a learner that takes known labels (EM,
  LLPFC, the pSVMs, AMM, the k-means labeler, proportion boosting) fixes them and spreads the
  rest of the count over the uninspected sticks; InvCal, MeanMap and LMM ignore them;
* the count recalibration and the lock-out rule (:mod:`qcllp.training.lockout`) see the
  uninspected sticks of a charge with its count reduced by its inspected failures, and every
  inspected stick as a bag of its own whose count is its label.

Inspections are read for the labeled charges only, in chunks of ids (a cost in proportion to
the charges trained on). A result that is neither ``ok`` nor a configured defect type (a type
removed from the config after the inspection was stored) stops training with one line naming
the stick: its failure could not be counted under any type.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import select

from qcllp.features import StationFeatures
from qcllp.store import IN_CHUNK, Inspection, Store, rows_frame

__all__ = ["OK", "InspectionError", "inspection_counts", "read_inspections", "with_inspections"]

OK = "ok"
_COLUMNS = ["charge_id", "stick_id", "result"]


class InspectionError(ValueError):
    """An inspection the training set cannot take (a result that is no configured type)."""


def read_inspections(store: Store, station: str, charges: list[str]) -> pd.DataFrame:
    """The station's inspections of these charges' sticks: ``charge_id, stick_id, result``
    (lock-outs and audit samples alike), read in chunks of :data:`IN_CHUNK` charge ids."""
    table = Inspection.__table__
    rows = []
    with store.engine.connect() as conn:
        for start in range(0, len(charges), IN_CHUNK):
            query = select(*(table.c[c] for c in _COLUMNS)).where(
                table.c.station == station,
                table.c.charge_id.in_(charges[start : start + IN_CHUNK]),
            )
            rows += conn.execute(query).all()
    return rows_frame(rows, _COLUMNS).astype(str)


def with_inspections(
    features: StationFeatures,
    counted: pd.Index,
    counts: pd.DataFrame,
    inspections: pd.DataFrame,
    defect_types: list[str],
) -> tuple[StationFeatures, pd.DataFrame, pd.Series | None]:
    """The training rows, counts and known labels of the labeled charges (module docstring).

    ``features``: every stick of the labeled charges with readings at the station;
    ``counted``: the (charge_id, stick_id) of those final QC counted
    (:func:`qcllp.station.final_qc.sticks_qc_counted`); ``counts``: QC's counts per charge id
    (``n_sticks`` and one column per defect type); ``inspections``: ``charge_id, stick_id,
    result``. Returns the rows QC counted plus the inspected ones it did not, the counts with
    the latter added, and per row its inspection result (NaN: not inspected), or ``None`` when
    no training row was inspected (then the rows and counts are exactly QC's)."""
    index = features.X.index
    result = _results(inspections, index, defect_types)
    inspected = result.notna().to_numpy()
    in_qc = index.isin(counted)
    if not inspected.any():
        return _rows(features, in_qc), counts, None
    keep = in_qc | inspected
    added = inspected & ~in_qc
    counts = counts.copy()
    extra = result[added].groupby(features.bags.to_numpy()[added]).value_counts().unstack()
    extra = extra.reindex(index=counts.index, columns=[*defect_types, OK], fill_value=0)
    extra = extra.fillna(0).astype(np.int64)
    counts["n_sticks"] = counts["n_sticks"] + extra.sum(axis=1)
    for kind in defect_types:
        counts[kind] = counts[kind] + extra[kind]
    return _rows(features, keep), counts, result[keep]


def _results(inspections: pd.DataFrame, index: pd.MultiIndex, defect_types: list[str]) -> pd.Series:
    """The inspection result of every row of ``index`` (NaN where not inspected), after
    checking that each result is ``ok`` or a configured defect type."""
    if inspections.empty:
        return pd.Series(np.nan, index=index, dtype=object)
    bad = ~inspections["result"].isin([OK, *defect_types])
    if bad.any():
        row = inspections.loc[bad].iloc[0]
        raise InspectionError(
            f"inspection of stick {row['stick_id']} (charge {row['charge_id']}) says "
            f"{row['result']!r}, neither ok nor a configured defect type "
            f"({', '.join(defect_types)}): its failure cannot be counted"
        )
    by_stick = inspections.set_index(["charge_id", "stick_id"])["result"]
    return by_stick.reindex(index).astype(object)


def _rows(features: StationFeatures, keep: np.ndarray) -> StationFeatures:
    """``features`` restricted to the rows ``keep`` (the same object when all are kept)."""
    if keep.all():
        return features
    return StationFeatures(
        features.station, features.X.loc[keep], features.bags.loc[keep], features.imputation
    )


def inspection_counts(labels: pd.Series | None) -> dict[str, float]:
    """What a model's metrics record of its inspected training sticks: how many, how many
    failed (0 and 0 without inspections)."""
    if labels is None:
        return {"inspected_sticks": 0.0, "inspected_failing": 0.0}
    given = labels.dropna()
    return {
        "inspected_sticks": float(len(given)),
        "inspected_failing": float((given != OK).sum()),
    }
