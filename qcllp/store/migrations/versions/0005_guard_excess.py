"""Lock-out guard: the recent excess of lock-outs per station and model (Page's CUSUM), so the
guard trips within charges of a sudden change however long the model was healthy before.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lockout_guards") as batch:
        batch.add_column(sa.Column("excess", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("lockout_guards") as batch:
        batch.drop_column("excess")
