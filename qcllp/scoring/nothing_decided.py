"""Why a scoring run decided no stick, in words an engineer can act on (``qcllp score``).

A run of :func:`qcllp.scoring.step.score_station` takes in the ingestion batches committed
after the station's checkpoint and decides the sticks they brought; it may rightly decide none:
nothing new was ingested at the station, every new stick belongs to a charge final QC has
already reported (those sticks have left the line, so flagging them would stop nothing), or
the station's scorer service decided them first. The counts come from the batches taken in
(``batch_sticks`` of the batches after the checkpoint), so the cost follows the new work, not
the history; the station's flags are counted only when nothing new came.
"""

from __future__ import annotations

from sqlalchemy import and_, case, func, select

from qcllp.store import BatchStick, Charge, Flag, IngestionBatch, ScorerCheckpoint, Store

__all__ = ["checkpoint_seq", "why_nothing_decided"]


def checkpoint_seq(store: Store, station: str) -> int:
    """The ``commit_seq`` the station's scorer has taken in up to (0: it never ran); read
    before a run so that :func:`why_nothing_decided` can look at what the run took in."""
    t = ScorerCheckpoint.__table__
    with store.engine.connect() as conn:
        seq = conn.execute(select(t.c.commit_seq).where(t.c.station == station)).scalar()
    return int(seq or 0)


def why_nothing_decided(store: Store, station: str, since_seq: int) -> str:
    """One sentence saying why a run that started at checkpoint ``since_seq`` decided no
    stick at ``station``."""
    arrived, reported, flagged = _new_sticks(store, station, since_seq)
    if arrived == 0:
        return _nothing_new(store, station, since_seq)
    if reported == arrived:
        return (
            f"all {arrived:,} sticks that arrived at {station} belong to charges final QC has "
            "already reported (they are past the line)"
        )
    if reported + flagged == arrived:
        return (
            f"of the {arrived:,} sticks that arrived at {station}, {reported:,} belong to "
            f"charges final QC has already reported (past the line) and {flagged:,} had their "
            "flags already (the station's scorer service decided them)"
        )
    waiting = arrived - reported - flagged
    return f"{waiting:,} of the {arrived:,} sticks that arrived at {station} are still waiting"


def _new_sticks(store: Store, station: str, since_seq: int) -> tuple[int, int, int]:
    """(sticks at ``station`` in the measurement batches after ``since_seq``, how many of
    them belong to reported charges, how many of the others have a flag at the station)."""
    b, bs = IngestionBatch.__table__, BatchStick.__table__
    c, f = Charge.__table__, Flag.__table__
    sticks = (
        select(bs.c.charge_id, bs.c.stick_id)
        .join(b, b.c.id == bs.c.batch_id)
        .where(b.c.commit_seq > since_seq, b.c.kind == "measurements", bs.c.station == station)
        .distinct()
        .subquery()
    )
    reported = c.c.n_sticks.is_not(None)
    query = (
        select(func.count(), _how_many(reported), _how_many(~reported & f.c.id.is_not(None)))
        .select_from(sticks)
        .outerjoin(c, c.c.charge_id == sticks.c.charge_id)
        .outerjoin(
            f,
            and_(
                f.c.station == station,
                f.c.charge_id == sticks.c.charge_id,
                f.c.stick_id == sticks.c.stick_id,
            ),
        )
    )
    with store.engine.connect() as conn:
        arrived, reported, flagged = conn.execute(query).one()
    return int(arrived), int(reported), int(flagged)


def _how_many(condition):  # noqa: ANN001, ANN202 - SQL expressions
    """SQL: the number of rows for which ``condition`` holds (0 for none)."""
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _nothing_new(store: Store, station: str, since_seq: int) -> str:
    """The reason when no batch after ``since_seq`` brought a stick to ``station``."""
    if since_seq == 0:
        return (
            f"no sticks with readings at {station} have been ingested yet "
            "(qcllp ingest measurements)"
        )
    f = Flag.__table__
    with store.engine.connect() as conn:
        flags = int(conn.execute(select(func.count()).where(f.c.station == station)).scalar())
    flagged = f" ({flags:,} sticks there have their flags)" if flags else ""
    return f"no sticks have arrived at {station} since its last scoring run{flagged}"
