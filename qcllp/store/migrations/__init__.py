"""Alembic migration environment of the plant database (run by ``Store.open``)."""
