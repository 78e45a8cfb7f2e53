"""The Alembic history has one head, and the migrated schema is exactly what the ORM maps."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from cluster.storage.db import Base, Database
from cluster.storage.migrate import alembic_config, include_object


def test_the_migration_history_has_exactly_one_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def test_migrated_schema_matches_the_orm(database: Database) -> None:
    with database.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": include_object})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []
