"""Lock-out guard: per station and model, the sticks decided and locked out, and whether the
scorer suspended the model's lock-outs (it locked out far more than in training).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ID = sa.String(length=128)
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "lockout_guards",
        sa.Column("station", ID, nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("decided", sa.BigInteger(), nullable=False),
        sa.Column("locked", sa.BigInteger(), nullable=False),
        sa.Column("suspended_at", TS, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("station", "model_id"),
    )


def downgrade() -> None:
    op.drop_table("lockout_guards")
