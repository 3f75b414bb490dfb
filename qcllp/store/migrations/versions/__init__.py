"""Alembic revisions of the plant database, oldest first (``0001_initial`` ...)."""
