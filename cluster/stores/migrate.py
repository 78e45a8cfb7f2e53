"""Bring a database to the current schema with Alembic (SQLite and Postgres alike)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    return config


def upgrade(url: str, revision: str = "heads") -> None:
    """Apply every migration up to ``revision``; safe to call on an up-to-date database."""
    command.upgrade(alembic_config(url), revision)
