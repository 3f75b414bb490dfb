"""Windows of charges by time: the newest labeled charges (a holdout, a drift window) and the
newest charges of all (feature drift before final QC has counted them).

Charges are ordered by ``charges.first_seen_us``, their first reading; the query touches the
``charges`` table only (one row per charge), never the readings.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd
from sqlalchemy import select

from qcllp.store import Charge, DefectCountConflict, Store, stored_utc, us_to_utc

__all__ = ["recent_charges"]


def recent_charges(
    store: Store,
    *,
    labeled: bool,
    after: datetime | None = None,
    before: datetime | None = None,
    limit: int | None = None,
) -> pd.Series:
    """First-seen times (UTC) of the newest charges, oldest first; index ``charge_id``.

    ``labeled``: only charges final QC has counted (without unresolved count conflicts).
    ``after`` / ``before``: first seen strictly after / before these times. ``limit``: the
    newest ones only.
    """
    c = Charge.__table__
    query = select(c.c.charge_id, c.c.first_seen_us).where(c.c.first_seen_us.is_not(None))
    if labeled:
        query = query.where(c.c.n_sticks.is_not(None)).where(
            c.c.charge_id.not_in(select(DefectCountConflict.charge_id))
        )
    if after is not None:
        query = query.where(c.c.first_seen_us > _us(after))
    if before is not None:
        query = query.where(c.c.first_seen_us < _us(before))
    query = query.order_by(c.c.first_seen_us.desc(), c.c.charge_id.desc())
    if limit is not None:
        query = query.limit(limit)
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()[::-1]
    index = pd.Index([str(r.charge_id) for r in rows], name="charge_id", dtype="object")
    times = us_to_utc(pd.Series([int(r.first_seen_us) for r in rows], dtype="int64").to_numpy())
    return pd.Series(times, index=index, name="first_seen")


def _us(value: datetime) -> int:
    """Epoch microseconds of a time; a time without zone is UTC (as SQLite returns them)."""
    return int(pd.Timestamp(stored_utc(value)).value // 1000)
