"""Which sticks final QC counted: once the line acts on the flags, not all of a charge's.

A stick locked out at any station never reaches final QC, so a charge's ``n_sticks`` and
defect counts are those of the sticks that remained. A training bag (or a holdout charge of
the promotion gate and the drift watch) that still held the locked-out sticks would pair the
shares of one set of sticks with the features of another: the locked-out sticks were mostly
failures, so the bag's share would be understated and the next model taught that sticks like
them are good. :func:`sticks_qc_counted` takes them out of the bags. Per charge:

* no stick of it locked out anywhere: the bag stays as it is;
* its feature rows number exactly QC's ``n_sticks``: the line did not act on the flags (a
  trial in shadow mode) and QC counted every stick: the bag stays whole;
* otherwise the locked-out sticks leave the bag.

The scorer's count rule (:mod:`qcllp.scoring.count_guard`) makes the same distinction and reads the
flags
through :func:`read_flags`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.features import StationFeatures
from qcllp.plant.config import PlantConfig
from qcllp.store import IN_CHUNK, Flag, Store, rows_frame

__all__ = ["read_flags", "sticks_qc_counted"]


def read_flags(
    conn: Connection,
    stations: list[str],
    charges: list[str],
    columns: list[str],
    *,
    locked_only: bool = False,
) -> pd.DataFrame:
    """``columns`` of the flags of these charges at these stations (``locked_only``: the
    lock-outs); the unique index's prefix (station, charge) serves the query, so it costs in
    proportion to the charges asked for."""
    f = Flag.__table__
    rows = []
    for start in range(0, len(charges), IN_CHUNK):
        query = select(*(f.c[c] for c in columns)).where(
            f.c.station.in_(stations), f.c.charge_id.in_(charges[start : start + IN_CHUNK])
        )
        if locked_only:
            query = query.where(f.c.decision == "lock_out")
        rows += conn.execute(query).all()
    frame = rows_frame(rows, columns)
    return frame.astype({"probability": np.float64}) if "probability" in columns else frame


def sticks_qc_counted(
    store: Store, config: PlantConfig, features: StationFeatures, n_sticks: pd.Series
) -> StationFeatures:
    """``features`` without the sticks that never reached final QC (module docstring);
    ``n_sticks``: QC's count per charge id."""
    if features.X.empty:
        return features
    charges = pd.unique(features.bags.to_numpy()).tolist()
    with store.engine.connect() as conn:
        locked = read_flags(
            conn, list(config.station_names), charges, ["charge_id", "stick_id"], locked_only=True
        )
    if locked.empty:
        return features
    out = features.X.index.isin(pd.MultiIndex.from_frame(locked.astype(str)))
    bags = features.bags.to_numpy()
    rows = features.bags.map(features.bags.value_counts()).to_numpy()
    whole = rows == pd.Series(bags).map(n_sticks).to_numpy()  # shadow mode: QC saw them all
    keep = ~(out & ~whole)
    if keep.all():
        return features
    return StationFeatures(
        features.station, features.X.loc[keep], features.bags.loc[keep], features.imputation
    )
