"""The kept statistics as one row per stick and station (:class:`qcllp.store.schema.
StickStatistics`, the series' records in one value) instead of one row per series, and the
codes that name a record's sensor (:class:`qcllp.store.schema.SensorCode`): a scorer's read
of a drain fetched three times the rows before (issue 34). The rows are computed here from
the readings already stored, by the code ``qcllp features rebuild`` runs (it reads every
reading once); the old table goes.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sensor_codes",
        sa.Column("code", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("station", sa.String(128), nullable=False),
        sa.Column("sensor", sa.String(128), nullable=False),
        sa.UniqueConstraint("station", "sensor"),
    )
    op.create_table(
        "stick_stats",
        sa.Column("station", sa.String(128), primary_key=True),
        sa.Column("charge_id", sa.String(128), primary_key=True),
        sa.Column("stick_id", sa.String(128), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("t0_us", sa.BigInteger(), nullable=False),
        sa.Column("t1_us", sa.BigInteger(), nullable=False),
        sa.Column("stats", sa.LargeBinary(), nullable=False),
        sqlite_with_rowid=False,
    )
    op.drop_table("series_stats")
    # the current definition's rows of what is stored: the same code the ingester keeps them by
    from qcllp.store.kept_stats import rebuild_series_stats

    rebuild_series_stats(op.get_bind())


def downgrade() -> None:
    op.drop_table("stick_stats")
    op.drop_table("sensor_codes")
    op.create_table(
        "series_stats",
        sa.Column(
            "series_id",
            sa.Integer(),
            sa.ForeignKey("series.id"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("t0_us", sa.BigInteger(), nullable=False),
        sa.Column("t1_us", sa.BigInteger(), nullable=False),
        sa.Column("moments", sa.LargeBinary(), nullable=False),
    )  # empty: run qcllp features rebuild with the qcllp of that revision
