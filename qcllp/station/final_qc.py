"""Which sticks final QC counted: once the line acts on the flags, not all of a charge's.

A stick locked out at any station never reaches final QC, and neither does an audit sample
(flag decision ``inspect``: taken aside and inspected at the station) whose inspection there
failed: it was scrapped. An audit sample found ``ok`` went back to the line and was counted.
So a charge's ``n_sticks`` and defect counts are those of the sticks that remained. A training
bag (or a holdout charge of the promotion gate and the drift watch) that still held the
locked-out sticks would pair the shares of one set of sticks with the features of another:
the locked-out sticks were mostly failures, so the bag's share would be understated and the
next model taught that sticks like them are good. :func:`sticks_qc_counted` takes them out of
the bags. Per charge:

* no stick of it taken off anywhere: the bag stays as it is;
* its feature rows number exactly QC's ``n_sticks``: the line did not act on the flags (a
  trial in shadow mode) and QC counted every stick: the bag stays whole;
* otherwise the sticks that never reached QC leave the bag: the locked-out ones and the
  audit samples that failed their inspection;
* an audit sample whose inspection has not arrived yet may or may not be among QC's sticks,
  so the charge's count cannot be placed on its rows: the whole charge is **held back**
  (:func:`qc_counted` names it; training and the promotion gate leave it out) until the
  inspection arrives, usually within the shift. Held back rather than trained on as a stick
  of unknown membership: the count likelihood and every learner take a bag's count as the
  count of exactly its rows, and one charge fewer for a while costs less than a bag whose
  count may be off by one failure.

The lock-outs and the audit samples are read from the flags of *every* station (a stick
scrapped at an earlier station is missing at QC all the same), each audit sample joined to
that station's inspection of it. The scorer's count rule (:mod:`qcllp.scoring.count_guard`)
makes the same distinction for lock-outs and reads the flags through :func:`read_flags`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import Connection, select

from qcllp.features import StationFeatures
from qcllp.plant.config import PlantConfig
from qcllp.store import IN_CHUNK, Flag, Inspection, Store, rows_frame

__all__ = ["qc_counted", "read_flags", "sticks_qc_counted", "taken_off"]

OK = "ok"


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
    """``features`` without the sticks that never reached final QC and without the charges
    held back for an audit inspection still to come (module docstring); ``n_sticks``: QC's
    count per charge id."""
    return qc_counted(store, config, features, n_sticks)[0]


def qc_counted(
    store: Store, config: PlantConfig, features: StationFeatures, n_sticks: pd.Series
) -> tuple[StationFeatures, pd.Index]:
    """The rows of ``features`` final QC counted, and the charges held back (module
    docstring: an audit sample's inspection is missing), whose rows are all left out."""
    if features.X.empty:
        return features, pd.Index([])
    charges = pd.unique(features.bags.to_numpy()).tolist()
    with store.engine.connect() as conn:
        acted = taken_off(conn, list(config.station_names), charges)
    if acted.empty:
        return features, pd.Index([])
    sticks = pd.MultiIndex.from_frame(acted[["charge_id", "stick_id"]])
    gone = features.X.index.isin(sticks[acted["fate"].to_numpy() == "gone"])
    unsure = features.X.index.isin(sticks[acted["fate"].to_numpy() == "pending"]) & ~gone
    bags = features.bags.to_numpy()
    rows = features.bags.map(features.bags.value_counts()).to_numpy()
    whole = rows == pd.Series(bags).map(n_sticks).to_numpy()  # shadow mode: QC saw them all
    held = pd.Index(pd.unique(bags[unsure & ~whole]))
    keep = ~(gone & ~whole) & ~np.isin(bags, held)
    if keep.all():
        return features, held
    kept = StationFeatures(
        features.station, features.X.loc[keep], features.bags.loc[keep], features.imputation
    )
    return kept, held


def taken_off(conn: Connection, stations: list[str], charges: list[str]) -> pd.DataFrame:
    """``charge_id, stick_id, fate, decision`` of the sticks the line took off at these stations:
    ``gone`` (locked out, or an audit sample that failed its inspection there), ``back`` (an
    audit sample found ok) or ``pending`` (an audit sample not inspected yet). One query per
    :data:`IN_CHUNK` charges, flags left-joined to the same station's inspections."""
    f, i = Flag.__table__, Inspection.__table__
    joined = f.outerjoin(
        i,
        (i.c.station == f.c.station)
        & (i.c.charge_id == f.c.charge_id)
        & (i.c.stick_id == f.c.stick_id),
    )
    columns = ["charge_id", "stick_id", "decision", "result"]
    rows = []
    for start in range(0, len(charges), IN_CHUNK):
        query = (
            select(f.c.charge_id, f.c.stick_id, f.c.decision, i.c.result)
            .select_from(joined)
            .where(
                f.c.station.in_(stations),
                f.c.charge_id.in_(charges[start : start + IN_CHUNK]),
                f.c.decision.in_(["lock_out", "inspect"]),
            )
        )
        rows += conn.execute(query).all()
    frame = rows_frame(rows, columns)
    audit = frame["decision"].to_numpy() == "inspect"
    result = frame["result"]
    fate = np.where(
        ~audit, "gone", np.where(result.isna(), "pending", np.where(result == OK, "back", "gone"))
    )
    sticks = frame[["charge_id", "stick_id"]].astype(str)
    return sticks.assign(fate=fate, decision=frame["decision"])
