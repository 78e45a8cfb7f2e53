"""SQLite's writer queue: an event-loop caller can take the lock only when it is free, and never waits."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import text

from cluster.storage.db import Database
from cluster.storage.migrate import upgrade


def sqlite_db(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'hindsight.db'}"
    upgrade(url)
    return Database(url)


def test_a_free_lock_is_taken_and_a_write_transaction_runs_under_it(tmp_path: Path) -> None:
    db = sqlite_db(tmp_path)
    with db.writes_if_free() as free:
        assert free
        with db.transaction() as session:  # re-entrant: the same thread opens its transaction
            session.execute(text("CREATE TABLE t (x INTEGER)"))
    with db.read() as session:
        assert session.execute(text("SELECT count(*) FROM t")).scalar() == 0
    db.dispose()


def test_a_held_lock_is_reported_busy_at_once(tmp_path: Path) -> None:
    db = sqlite_db(tmp_path)
    other = Database(db.url)  # another connection pool on the same file, as another process would have
    holding, done = threading.Event(), threading.Event()

    def writer() -> None:
        with other.transaction():
            holding.set()
            done.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(5)
        with db.writes_if_free() as free:
            assert not free
    finally:
        done.set()
        thread.join(5)
    with db.writes_if_free() as free:
        assert free
    db.dispose()
    other.dispose()


def test_postgres_never_reports_busy(database: Database) -> None:
    if database.dialect == "sqlite":
        return
    with database.writes_if_free() as free:
        assert free


def test_a_health_ping_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    db = sqlite_db(tmp_path)
    other = Database(db.url)
    holding, done = threading.Event(), threading.Event()
    answered: list[bool] = []

    def writer() -> None:
        with other.transaction() as session:
            session.execute(text("SELECT 1"))  # the transaction now holds SQLite's write lock
            holding.set()
            done.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(5)
        pinger = threading.Thread(target=lambda: answered.append(db.ping()))
        pinger.start()
        pinger.join(5)  # a write-mode ping would sit in SQLite's busy wait until the writer ends
        assert answered == [True]
    finally:
        done.set()
        thread.join(10)
    db.dispose()
    other.dispose()
