"""Lock-out guard on final QC's counts: per station and model, the charges whose counts were
compared with the model's predictions (and those that could not be, with the latest reason),
the failures predicted and reported, and the CUSUM of the model's over-prediction
(:mod:`qcllp.scoring.count_guard`); charges are found by the ingestion batch that brought
their counts (indexed), so the scorer reads only new counts.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("count_charges", sa.BigInteger(), "0"),
    ("count_skipped", sa.BigInteger(), "0"),
    ("count_predicted", sa.Float(), "0"),
    ("count_observed", sa.BigInteger(), "0"),
    ("count_excess", sa.Float(), "0"),
)


def upgrade() -> None:
    with op.batch_alter_table("lockout_guards") as batch:
        for name, kind, default in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=False, server_default=default))
        batch.add_column(sa.Column("count_skip_reason", sa.Text(), nullable=True))
    op.create_index("ix_charges_counts_batch_id", "charges", ["counts_batch_id"])


def downgrade() -> None:
    op.drop_index("ix_charges_counts_batch_id", table_name="charges")
    with op.batch_alter_table("lockout_guards") as batch:
        batch.drop_column("count_skip_reason")
        for name, _, _ in reversed(_COLUMNS):
            batch.drop_column(name)
