"""Initial schema: charges, sticks, series and readings, defect counts and conflicts, ingestion
batches, quarantine, SQL-source watermarks, and the model registry and flags tables (used
later).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ingestion_batches",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rows_read", sa.BigInteger(), nullable=False),
        sa.Column("rows_stored", sa.BigInteger(), nullable=False),
        sa.Column("rows_duplicate", sa.BigInteger(), nullable=False),
        sa.Column("rows_quarantined", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("ingestion_batches", schema=None) as batch_op:
        batch_op.create_index(
            "ix_ingestion_batches_kind_checksum", ["kind", "checksum"], unique=False
        )

    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("station", sa.String(length=128), nullable=False),
        sa.Column("method", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=128), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("features", sa.JSON(), nullable=False),
        sa.Column("artifact_path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("trained_from", sa.DateTime(timezone=True), nullable=True),
        sa.Column("trained_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("n_charges", sa.Integer(), nullable=False),
        sa.Column("n_sticks", sa.Integer(), nullable=False),
        sa.Column("qcllp_version", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_models_station"), ["station"], unique=False)

    op.create_table(
        "readings",
        sa.Column("series_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("ts_us", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "ts_us"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "series",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("station", sa.String(length=128), nullable=False),
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("stick_id", sa.String(length=128), nullable=False),
        sa.Column("sensor", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("station", "charge_id", "stick_id", "sensor"),
    )
    op.create_table(
        "sticks",
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("stick_id", sa.String(length=128), nullable=False),
        sa.Column("first_seen_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("charge_id", "stick_id"),
    )
    op.create_table(
        "charges",
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("first_seen_us", sa.BigInteger(), nullable=True),
        sa.Column("n_sticks", sa.Integer(), nullable=True),
        sa.Column("counts_batch_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["counts_batch_id"],
            ["ingestion_batches.id"],
        ),
        sa.PrimaryKeyConstraint("charge_id"),
    )
    op.create_table(
        "defect_count_conflicts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("n_sticks", sa.Integer(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["ingestion_batches.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("defect_count_conflicts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_defect_count_conflicts_charge_id"), ["charge_id"], unique=False
        )

    op.create_table(
        "flags",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("station", sa.String(length=128), nullable=False),
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("stick_id", sa.String(length=128), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("probability", sa.Double(), nullable=False),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("scored_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("station", "charge_id", "stick_id"),
    )
    op.create_table(
        "quarantine",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("row_number", sa.BigInteger(), nullable=True),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["ingestion_batches.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("quarantine", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_quarantine_batch_id"), ["batch_id"], unique=False)

    op.create_table(
        "watermarks",
        sa.Column("source_name", sa.String(length=128), nullable=False),
        sa.Column("column", sa.String(length=128), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["ingestion_batches.id"],
        ),
        sa.PrimaryKeyConstraint("source_name"),
    )
    op.create_table(
        "defect_counts",
        sa.Column("charge_id", sa.String(length=128), nullable=False),
        sa.Column("defect_type", sa.String(length=128), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["charge_id"],
            ["charges.charge_id"],
        ),
        sa.PrimaryKeyConstraint("charge_id", "defect_type"),
    )


def downgrade() -> None:
    op.drop_table("defect_counts")
    op.drop_table("watermarks")
    with op.batch_alter_table("quarantine", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_quarantine_batch_id"))

    op.drop_table("quarantine")
    op.drop_table("flags")
    with op.batch_alter_table("defect_count_conflicts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_defect_count_conflicts_charge_id"))

    op.drop_table("defect_count_conflicts")
    op.drop_table("charges")
    op.drop_table("sticks")
    op.drop_table("series")
    op.drop_table("readings")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_models_station"))

    op.drop_table("models")
    with op.batch_alter_table("ingestion_batches", schema=None) as batch_op:
        batch_op.drop_index("ix_ingestion_batches_kind_checksum")

    op.drop_table("ingestion_batches")
