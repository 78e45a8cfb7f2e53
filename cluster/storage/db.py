"""SQL engine, declarative base and unit of work, shared by every SQL store (SQLite and Postgres)."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from sqlalchemy import JSON, DateTime, MetaData, String, create_engine, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

from cluster.storage.files import private_file

# Stable constraint names so migrations are the same on both dialects.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

READ_ONLY = "hindsight_read_only"

# JSON on SQLite, JSONB on Postgres (indexable, compact).
PortableJSON = JSON().with_variant(JSONB(), "postgresql")

E = TypeVar("E", bound=StrEnum)


class UtcDateTime(TypeDecorator[datetime]):
    """An instant: stored in UTC, handed back as an aware UTC ``datetime``, on every dialect.

    SQLite has no time zone type: SQLAlchemy writes the wall-clock digits of whatever offset the
    value carries and drops the offset, so ``12:00+14:00`` was stored (and compared) as noon UTC.
    Converting every bound value to UTC first makes stored text and comparisons agree; Postgres'
    ``timestamptz`` gets the same UTC value and returns it in the session's zone, so results are
    converted back to UTC too. A naive value is taken as UTC already (as ``cluster.core.types.as_utc``).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        # SQLite stores the digits it is given: give it UTC digits, without an offset to drop.
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StrEnumType(TypeDecorator[E], Generic[E]):
    """A ``StrEnum`` in a plain string column: binds the member's value (or a valid string), reads the member.

    No database enum type: adding a member then needs no migration, on SQLite or Postgres.
    """

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int = 16) -> None:
        super().__init__(length)
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine with the pragmas that make SQLite safe for several writers."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)
        _sqlite_file_private(engine.url.database)
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def _sqlite_file_private(database: str | None) -> None:
    """Make the database file (created empty here if absent: SQLite takes it as a new database) and
    its -wal and -shm files readable by this user only."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if not path.parent.is_dir():
        return  # SQLite reports the missing directory on connect
    private_file(path)
    for companion in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if companion.exists():
            private_file(companion)


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy, not the driver, decide when transactions begin (so BEGIN IMMEDIATE works).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _sqlite_on_begin(conn: Any) -> None:
    # Writers take the write lock up front: a deferred transaction that later upgrades to a writer
    # can fail with "database is locked" instead of waiting its turn. Readers (WAL) need no lock.
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


class SqliteWriteLock:
    """Queues SQLite writers of every thread and process of one database file.

    SQLite admits one writer at a time; a writer that finds the database locked polls with
    growing sleeps (1, 2, 5, 10 ... ms), which wastes most of each wait once writes are frequent.
    Here writers wait in the kernel on a lock file beside the database and wake as soon as it is
    free. BEGIN IMMEDIATE stays as the safety net for writers that do not take this lock.

    The lock is re-entrant within a thread, so a caller may take it (e.g. only if it is free right
    now, :meth:`acquire` with ``blocking=False``) and then open a write transaction under it.
    """

    def __init__(self, database_path: str | None) -> None:
        self._path = f"{database_path}.write-lock" if database_path and database_path != ":memory:" else None
        self._threads = threading.RLock()
        self._depth = 0  # only the thread holding _threads reads or writes it
        self._fd: int | None = None
        self._pid = 0

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; with ``blocking=False`` return False at once if another writer has it."""
        if not self._threads.acquire(blocking=blocking):
            return False
        if self._depth == 0 and self._path is not None:
            try:
                if self._fd is None or self._pid != os.getpid():
                    # A forked child must not share the parent's open file (flock is per open file).
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
                    self._pid = os.getpid()
                fcntl.flock(self._fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._threads.release()
                return False
            except BaseException:
                self._threads.release()
                raise
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and self._path is not None and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


class Database:
    """Owns the engine and hands out units of work: one transaction per request or task."""

    def __init__(self, url: str, **engine_kwargs: Any) -> None:
        self.url = url
        self.engine = make_engine(url, **engine_kwargs)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._readers = sessionmaker(self.engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False)
        self._sqlite_lock = SqliteWriteLock(self.engine.url.database) if self.dialect == "sqlite" else None
        self._write_lock: AbstractContextManager[object] = self._sqlite_lock or nullcontext()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """Commit on success, roll back on any error."""
        with self._write_lock, self._sessions.begin() as session:
            yield session

    @contextmanager
    def writes_if_free(self) -> Iterator[bool]:
        """Hold the SQLite write lock if no other writer has it right now (True), without waiting.

        A caller on an event loop runs a short write inline when this yields True and hands it to a
        thread when False, so the loop never waits for another writer. Always True on Postgres
        (its writers take row locks instead).
        """
        if self._sqlite_lock is None:
            yield True
            return
        if not self._sqlite_lock.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            self._sqlite_lock.release()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only unit of work: on SQLite it does not queue behind writers."""
        with self._readers.begin() as session:
            yield session

    def ping(self) -> bool:
        """Whether the database answers. Read-only: on SQLite a health check must not queue for the
        write lock (every check took ``BEGIN IMMEDIATE`` before)."""
        try:
            with self.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception:
            return False
        return True

    def dispose(self) -> None:
        self.engine.dispose()
