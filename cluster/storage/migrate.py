"""Bring a database to the current schema with Alembic (SQLite and Postgres alike)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Keep autogenerate away from the full-text objects 0002_memory creates by hand (SQLite FTS5
    table and its shadow tables, the Postgres tsvector column and its GIN index): they are not in the ORM metadata."""
    if type_ == "table" and (name or "").startswith("memories_fts"):
        return False
    if type_ == "index" and name == "ix_memories_fulltext":
        return False
    return not (type_ == "column" and name == "search_doc")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Apply every migration up to ``revision``; safe to call on an up-to-date database."""
    command.upgrade(alembic_config(url), revision)
