"""Series statistics kept at ingest: one row per series with the mergeable statistics its
features follow from. Revision 0013 replaced the table by one row per stick and station
(:class:`qcllp.store.schema.StickStatistics`) and fills that from the readings; so this
revision now creates the table empty (it filled it from the readings when it shipped: a
database already past it loses these rows in 0013 anyway).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
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
    )


def downgrade() -> None:
    op.drop_table("series_stats")
