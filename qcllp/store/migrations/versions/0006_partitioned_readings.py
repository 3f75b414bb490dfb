"""Readings partitioned by month on PostgreSQL; charges keep the time of their latest reading.

``charges.last_seen_us`` (with ``first_seen_us``) bounds the readings of a charge in time, so
the scorer's and the trainer's reads prune partitions (:mod:`qcllp.store.partitions`); it is
filled from the stored readings.

On PostgreSQL ``readings`` becomes ``PARTITION BY RANGE (ts_us)`` with one partition per month
of the stored readings, which are moved in (one ``INSERT ... SELECT``, in the migration's one
transaction: on a large plant database this takes a while -- minutes per hundred million
readings -- and either finishes or leaves the database as it was). SQLite keeps one table.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from qcllp.store.partitions import PARENT, ensure_partitions

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_DAY_US = 86_400_000_000
_COLUMNS = (
    "series_id integer NOT NULL, ts_us bigint NOT NULL, value double precision NOT NULL, "
    "batch_id integer NOT NULL, CONSTRAINT readings_pkey PRIMARY KEY (series_id, ts_us)"
)


def upgrade() -> None:
    with op.batch_alter_table("charges") as batch:
        batch.add_column(sa.Column("last_seen_us", sa.BigInteger(), nullable=True))
    op.execute(
        "UPDATE charges SET last_seen_us = m.hi FROM (SELECT s.charge_id, max(r.ts_us) AS hi "
        "FROM readings r JOIN series s ON s.id = r.series_id GROUP BY s.charge_id) AS m "
        "WHERE m.charge_id = charges.charge_id"
    )
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE readings RENAME TO readings_unpartitioned")
    op.execute("ALTER TABLE readings_unpartitioned RENAME CONSTRAINT readings_pkey TO ru_pkey")
    op.execute(f"CREATE TABLE {PARENT} ({_COLUMNS}) PARTITION BY RANGE (ts_us)")
    # the days of the stored readings (exact numeric division), whose months get partitions
    days = bind.exec_driver_sql(
        f"SELECT DISTINCT floor(ts_us / {_DAY_US}.0)::bigint FROM readings_unpartitioned"
    ).scalars()
    import numpy as np  # here: opening a store reads this file, and needs no numpy

    ensure_partitions(bind, np.fromiter(days, dtype=np.int64) * _DAY_US)
    op.execute(f"INSERT INTO {PARENT} SELECT * FROM readings_unpartitioned")
    op.execute("DROP TABLE readings_unpartitioned")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE readings RENAME TO readings_partitioned")
        op.execute("ALTER TABLE readings_partitioned RENAME CONSTRAINT readings_pkey TO rp_pkey")
        op.execute(f"CREATE TABLE readings ({_COLUMNS})")
        op.execute("INSERT INTO readings SELECT * FROM readings_partitioned")
        op.execute("DROP TABLE readings_partitioned")  # with its partitions
    with op.batch_alter_table("charges") as batch:
        batch.drop_column("last_seen_us")
