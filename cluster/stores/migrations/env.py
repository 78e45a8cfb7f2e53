"""Alembic environment: runs migrations on the connection or URL the caller configured."""

from __future__ import annotations

from alembic import context

import cluster.stores.experience_tables
import cluster.stores.memory_tables  # noqa: F401  (registers the memory tables)
from cluster.stores import tables  # noqa: F401  (registers the trajectory tables)
from cluster.stores.db import Base, make_engine

config = context.config
connection = config.attributes.get("connection")
if connection is not None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
