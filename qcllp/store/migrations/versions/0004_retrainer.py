"""Retraining daemon: leases, its events and APScheduler's job table (``retrainer_jobs``,
the columns of ``SQLAlchemyJobStore``).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ID = sa.String(length=128)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=160), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("acquired_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "retrainer_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("station", ID, nullable=True),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_retrainer_events_kind_station", "retrainer_events", ["kind", "station"], unique=False
    )
    op.create_table(
        "retrainer_jobs",
        sa.Column("id", sa.Unicode(length=191), nullable=False),
        sa.Column("next_run_time", sa.Float(precision=25), nullable=True),
        sa.Column("job_state", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_retrainer_jobs_next_run_time", "retrainer_jobs", ["next_run_time"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_retrainer_jobs_next_run_time", table_name="retrainer_jobs")
    op.drop_table("retrainer_jobs")
    op.drop_index("ix_retrainer_events_kind_station", table_name="retrainer_events")
    op.drop_table("retrainer_events")
    op.drop_table("leases")
