"""Alembic environment: runs migrations on the connection or URL the caller configured."""

from __future__ import annotations

from typing import Any

from alembic import context

# Importing the table modules registers every table on Base.metadata.
import cluster.experience.tables
import cluster.jobs.tables
import cluster.memory.tables
import cluster.storage.vector_builds
import cluster.trajectories.tables  # noqa: F401
from cluster.storage.db import Base, make_engine
from cluster.storage.migrate import include_object


def run(connection: Any) -> None:
    context.configure(
        connection=connection, target_metadata=Base.metadata, render_as_batch=True, include_object=include_object
    )
    with context.begin_transaction():
        context.run_migrations()


config = context.config
connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        run(conn)
    engine.dispose()
