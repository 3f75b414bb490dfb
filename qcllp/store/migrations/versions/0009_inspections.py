"""Inspections: sticks looked at at a station (at the lock-out bay, or as audit samples), with
their result, the flag they judge and the batch that brought them; and, per station and model,
the lock-out guard's reading of them (a cursor on inspection ids, lock-outs inspected failing
and good, the CUSUM of the precision's shortfall; :mod:`qcllp.scoring.inspection_guard`).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_GUARD_COLUMNS = (
    ("inspect_id", sa.BigInteger(), "0"),
    ("inspect_fail", sa.BigInteger(), "0"),
    ("inspect_good", sa.BigInteger(), "0"),
    ("inspect_excess", sa.Float(), "0"),
)


def upgrade() -> None:
    op.create_table(
        "inspections",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("station", sa.String(128), nullable=False),
        sa.Column("charge_id", sa.String(128), nullable=False),
        sa.Column("stick_id", sa.String(128), nullable=False),
        sa.Column("result", sa.String(128), nullable=False),
        sa.Column("inspected_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("flag_id", sa.Integer(), nullable=True),
        sa.Column("audit", sa.Boolean(), nullable=False),
        sa.Column("batch_id", sa.Integer(), sa.ForeignKey("ingestion_batches.id"), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("station", "charge_id", "stick_id", name="uq_inspections_stick"),
    )
    op.create_index("ix_inspections_station_id", "inspections", ["station", "id"])
    op.create_index("ix_inspections_batch_id", "inspections", ["batch_id"])
    with op.batch_alter_table("lockout_guards") as batch:
        for name, kind, default in _GUARD_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=False, server_default=default))


def downgrade() -> None:
    with op.batch_alter_table("lockout_guards") as batch:
        for name, _, _ in reversed(_GUARD_COLUMNS):
            batch.drop_column(name)
    op.drop_index("ix_inspections_batch_id", table_name="inspections")
    op.drop_index("ix_inspections_station_id", table_name="inspections")
    op.drop_table("inspections")
