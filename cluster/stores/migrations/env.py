"""Alembic environment: runs migrations on the connection or URL the caller configured."""

from __future__ import annotations

from typing import Any

from alembic import context

# Importing the table modules registers every table on Base.metadata.
import cluster.stores.experience_tables
import cluster.stores.memory_tables
import cluster.stores.tables  # noqa: F401
from cluster.stores.db import Base, make_engine


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Keep autogenerate away from the full-text objects 0002_memory creates by hand (SQLite FTS5
    table and its shadow tables, the Postgres tsvector column): they are not in the ORM metadata."""
    if type_ == "table" and (name or "").startswith("memories_fts"):
        return False
    return not (type_ == "column" and name == "search_doc")


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
