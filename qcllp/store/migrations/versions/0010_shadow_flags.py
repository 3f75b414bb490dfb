"""Shadow trials: what a station's ``shadow`` model would have decided for each stick it scored
(the line acts on none of it; :class:`qcllp.store.schema.ShadowFlag`). A model's status may now
also be ``shadow`` and a flag's decision ``inspect`` (an audit sample); both columns are plain
strings, so only the new table is created.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shadow_flags",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("station", sa.String(128), nullable=False),
        sa.Column("charge_id", sa.String(128), nullable=False),
        sa.Column("stick_id", sa.String(128), nullable=False),
        sa.Column("model_id", sa.Integer(), sa.ForeignKey("models.id"), nullable=False),
        sa.Column("probability", sa.Double(), nullable=True),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("scored_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("model_id", "charge_id", "stick_id", name="uq_shadow_flags_stick"),
    )
    op.create_index("ix_shadow_flags_station_charge", "shadow_flags", ["station", "charge_id"])


def downgrade() -> None:
    op.drop_index("ix_shadow_flags_station_charge", table_name="shadow_flags")
    op.drop_table("shadow_flags")
