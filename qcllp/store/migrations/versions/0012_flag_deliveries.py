"""Delivery cursors of the flags to channels other than the sink (:class:`qcllp.store.schema.
FlagDelivery`): the MQTT publisher of a station's scorer moves its cursor once the broker
acknowledged. A new, empty table: a station's publisher, at its first start, sets its cursor
to the station's newest flag (the flags decided before MQTT was configured are not sent).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "flag_deliveries",
        sa.Column("station", sa.String(128), primary_key=True),
        sa.Column("channel", sa.String(32), primary_key=True),
        sa.Column("flag_id", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("flag_deliveries")
