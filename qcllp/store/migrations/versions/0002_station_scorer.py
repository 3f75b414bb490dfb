"""Station scorer: batch commit order, sticks per batch, scorer checkpoints and pending sticks,
flag decisions with reasons, alarms.

Existing finished batches get ``commit_seq = id`` (their commit order is not recorded; id order
is the best estimate) and their sticks are listed in ``batch_sticks`` from the readings, so a
scorer started on an existing plant database sees the history as already arrived.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ID = sa.String(length=128)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("ingestion_batches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("commit_seq", sa.BigInteger(), nullable=True))
        batch_op.create_unique_constraint("uq_ingestion_batches_commit_seq", ["commit_seq"])
    op.execute("UPDATE ingestion_batches SET commit_seq = id WHERE status = 'done'")

    with op.batch_alter_table("flags", schema=None) as batch_op:
        batch_op.alter_column("probability", existing_type=sa.Double(), nullable=True)
        batch_op.add_column(
            sa.Column("decision", sa.String(length=16), server_default="pass", nullable=False)
        )
        batch_op.add_column(sa.Column("reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("arrived_at", TS, nullable=True))
    op.execute("UPDATE flags SET decision = 'lock_out' WHERE flagged")

    op.create_table(
        "batch_sticks",
        sa.Column("batch_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("station", ID, nullable=False),
        sa.Column("charge_id", ID, nullable=False),
        sa.Column("stick_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("batch_id", "station", "charge_id", "stick_id"),
    )
    op.execute(
        "INSERT INTO batch_sticks (batch_id, station, charge_id, stick_id) "
        "SELECT DISTINCT r.batch_id, s.station, s.charge_id, s.stick_id "
        "FROM readings r JOIN series s ON s.id = r.series_id"
    )
    op.create_table(
        "scorer_checkpoints",
        sa.Column("station", ID, nullable=False),
        sa.Column("commit_seq", sa.BigInteger(), nullable=False),
        sa.Column("sink_path", sa.Text(), nullable=True),
        sa.Column("sink_offset", sa.BigInteger(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("station"),
    )
    op.create_table(
        "scorer_pending",
        sa.Column("station", ID, nullable=False),
        sa.Column("charge_id", ID, nullable=False),
        sa.Column("stick_id", ID, nullable=False),
        sa.Column("first_arrived_at", TS, nullable=False),
        sa.Column("arrived_at", TS, nullable=False),
        sa.Column("due_at", TS, nullable=False),
        sa.Column("later_seen", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("station", "charge_id", "stick_id"),
    )
    with op.batch_alter_table("scorer_pending", schema=None) as batch_op:
        batch_op.create_index("ix_scorer_pending_station_due", ["station", "due_at"], unique=False)
    op.create_table(
        "alarms",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("station", ID, nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("alarms")
    with op.batch_alter_table("scorer_pending", schema=None) as batch_op:
        batch_op.drop_index("ix_scorer_pending_station_due")
    op.drop_table("scorer_pending")
    op.drop_table("scorer_checkpoints")
    op.drop_table("batch_sticks")
    with op.batch_alter_table("flags", schema=None) as batch_op:
        batch_op.drop_column("arrived_at")
        batch_op.drop_column("reason")
        batch_op.drop_column("decision")
        batch_op.alter_column("probability", existing_type=sa.Double(), nullable=False)
    with op.batch_alter_table("ingestion_batches", schema=None) as batch_op:
        batch_op.drop_constraint("uq_ingestion_batches_commit_seq", type_="unique")
        batch_op.drop_column("commit_seq")
