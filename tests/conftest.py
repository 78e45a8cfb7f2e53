"""Shared fixtures: real SQLite and Postgres databases, migrated with Alembic, and a Milvus server.

Postgres comes from ``HINDSIGHT_TEST_DATABASE_URL`` (default: the machine's local server). Each test
session works in a database of its own, created here and dropped at the end; tables are emptied
after every test, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text

from cluster.storage.db import Base, Database
from cluster.storage.migrate import upgrade

# One Milvus server per test session, shared by every test marked ``milvus_server`` (tests/milvus_server.py).
pytest_plugins = ["tests.milvus_server"]

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated Postgres database for this test session."""
    admin_url = make_url(os.environ.get("HINDSIGHT_TEST_DATABASE_URL", DEFAULT_PG))
    name = f"hindsight_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        pytest.fail(f"Postgres at {admin_url.render_as_string()} is not reachable: {exc}")
    url = admin_url.set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# Fixtures whose "server" parameter is the session's Milvus server (tests/milvus_server.py).
_MILVUS_PARAMS = ("milvus", "milvus_client")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on the Milvus server runs with Postgres only, the pairing production runs.

    SQLite is the embedded default, which pairs with Milvus Lite; running each server test on both
    databases would double the server tier's time for no pairing anybody deploys.
    """
    kept, dropped = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        params = params.params if params is not None else {}
        on_server = any(params.get(name) == "server" for name in _MILVUS_PARAMS)
        (dropped if on_server and params.get("database") == "sqlite" else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _truncate(db: Database) -> None:
    with db.transaction() as session:
        for table in reversed(Base.metadata.sorted_tables):
            session.execute(table.delete())


@pytest.fixture
def postgres_emptied_after(postgres_url: str) -> Iterator[str]:
    """The session's Postgres database for a test that writes through a running service; emptied after it."""
    yield postgres_url
    db = Database(postgres_url)
    try:
        _truncate(db)
    finally:
        db.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """A migrated database: a SQLite file, then the session's Postgres database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sql') / 'hindsight.db'}"
        upgrade(url)
    else:
        url = request.getfixturevalue("postgres_url")
    db = Database(url)
    yield db
    if request.param == "postgres":
        _truncate(db)
    db.dispose()
