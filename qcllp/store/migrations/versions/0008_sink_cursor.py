"""Flag sinks delivered by cursor: each scorer checkpoint keeps the highest flag id its sink
holds (``sink_flag_id``), and flags are indexed by (station, id) so a step reads only the
flags above it (:mod:`qcllp.scoring.flag_sink`).

An existing checkpoint starts at the station's highest flag id: the flags written before the
upgrade are taken as delivered (the old scorer appended them, or the station had no sink), so
the upgrade sends nothing twice.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scorer_checkpoints") as batch:
        batch.add_column(
            sa.Column("sink_flag_id", sa.BigInteger(), nullable=False, server_default="0")
        )
    op.execute(
        "UPDATE scorer_checkpoints SET sink_flag_id = COALESCE((SELECT max(f.id) FROM flags f "
        "WHERE f.station = scorer_checkpoints.station), 0)"
    )
    op.create_index("ix_flags_station_id", "flags", ["station", "id"])


def downgrade() -> None:
    op.drop_index("ix_flags_station_id", table_name="flags")
    with op.batch_alter_table("scorer_checkpoints") as batch:
        batch.drop_column("sink_flag_id")
