"""ORM mappings for long-term memory: memory versions, the raw interaction log and bookkeeping.

Text, JSON and metadata each sit in their natural column; vectors live in Milvus, derived from
these rows (``MemoryRow.seq`` is the Milvus primary key). Full-text search is dialect-specific and
created by the migration: an FTS5 table over (owner, key, text, context) on SQLite, a GIN index on the
:data:`PG_SEARCH_DOC` generated column on Postgres.

Two bookkeeping tables keep derived state honest across processes: :class:`MemoryIndexQueueRow`
(vector work committed with the SQL change, done after it) and :class:`MemoryOwnerRow` (a
generation number per owner that every change bumps, so every process's query cache can tell
whether an entry is still current).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, Index, Integer, LargeBinary, String, Text, Uuid, false
from sqlalchemy.orm import Mapped, mapped_column

from cluster.memory.policy.promotion import LogStatus
from cluster.memory.policy.scope import ScopeKind
from cluster.memory.policy.versions import MemoryState
from cluster.storage.db import Base, PortableJSON, StrEnumType, UtcDateTime

# SQLite only auto-increments an INTEGER PRIMARY KEY (which is also the rowid FTS5 points at).
AutoId = BigInteger().with_variant(Integer(), "sqlite")

#: The Postgres full-text document: a ``tsvector`` column the migration adds as
#: ``GENERATED ALWAYS AS (...) STORED`` with a GIN index (Postgres only, so not mapped here).
PG_SEARCH_DOC = "memories.search_doc"
FTS_TABLE = "memories_fts"


class IndexOp(StrEnum):
    UPSERT = "upsert"
    DELETE = "delete"


class MemoryRow(Base):
    """One version of one memory. Versions of a key share ``lineage_id``; the newest is current.

    ``seq`` never repeats (SQLite ``AUTOINCREMENT``, a sequence on Postgres), not even after the
    newest row is deleted: a vector left behind in Milvus must never point at another memory.
    """

    __tablename__ = "memories"

    seq: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    memory_id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True)
    lineage_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    owner: Mapped[str] = mapped_column(String(200))
    scope_kind: Mapped[ScopeKind] = mapped_column(StrEnumType(ScopeKind))
    scope_key: Mapped[str] = mapped_column(String(220))
    session_id: Mapped[str | None] = mapped_column(String(200))
    task_id: Mapped[str | None] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[MemoryState] = mapped_column(StrEnumType(MemoryState))
    # The searchable text of the value; ``data`` holds the value itself when it is a JSON object.
    text: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", PortableJSON)
    entity: Mapped[str | None] = mapped_column(String(200))
    source_ids: Mapped[list[str]] = mapped_column(PortableJSON)
    context: Mapped[str | None] = mapped_column(Text)
    # The conversation it was told in (see ``ranking.conversation_of``), and whether ``context`` holds
    # the memories told just before and after it there instead of text its writer sent.
    thread: Mapped[str | None] = mapped_column(String(200))
    context_derived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    valid_from: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    session_bound: Mapped[bool] = mapped_column(Boolean, default=False)
    superseded_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    superseded_by: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    archived_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    activity: Mapped[float] = mapped_column(Float)
    activity_at: Mapped[datetime] = mapped_column(UtcDateTime)
    access_count: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        Index("ix_memories_identity", "owner", "scope_key", "key", "version", unique=True),
        Index("ix_memories_owner_state", "owner", "state", "archived_at"),
        Index("ix_memories_owner_entity", "owner", "entity"),
        Index("ix_memories_lineage", "owner", "lineage_id"),
        Index("ix_memories_session", "owner", "session_id"),
        Index("ix_memories_thread", "owner", "thread", "seq"),
        Index("ix_memories_expires", "expires_at"),
        {"sqlite_autoincrement": True},
    )


class MemoryLogRow(Base):
    """One raw interaction, written cheaply on the agent's path and re-evaluated later."""

    __tablename__ = "memory_log"

    seq: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    log_id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True)
    owner: Mapped[str] = mapped_column(String(200))
    session_id: Mapped[str] = mapped_column(String(200))
    speaker: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", PortableJSON)
    # pending → promoted | kept (evaluated, not promoted yet; a later turn may still promote it).
    status: Mapped[LogStatus] = mapped_column(StrEnumType(LogStatus))
    memory_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    evaluated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    __table_args__ = (
        Index("ix_memory_log_owner_at", "owner", "at"),
        Index("ix_memory_log_owner_status", "owner", "status"),
    )


class MemoryIndexQueueRow(Base):
    """Vector work for one memory version, written in the transaction that changed the SQL row.

    The vector is written (or deleted) after the commit; the row is removed once Milvus has it.
    If Milvus fails in between, the row stays and the next write of the owner, or maintenance,
    does the work again. A later change of the same version replaces the operation (a forget
    turns a pending upsert into a delete).
    """

    __tablename__ = "memory_index_queue"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    owner: Mapped[str] = mapped_column(String(200))
    op: Mapped[IndexOp] = mapped_column(StrEnumType(IndexOp))
    queued_at: Mapped[datetime] = mapped_column(UtcDateTime)

    __table_args__ = (Index("ix_memory_index_queue_owner", "owner", "queued_at"),)


class MemoryOwnerRow(Base):
    """Per-owner generation: bumped in the same transaction as any change of the owner's memories.

    A cached query result is served only while the generation it was computed at is still the
    current one, so a change made by any process invalidates every process's cache entries.
    """

    __tablename__ = "memory_owners"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)


class WordVectorRow(Base):
    """One word's unit vector as an embedder made it (float32, little-endian), for query expansion.

    A word's vector depends on the word and the embedder alone, so every owner and process shares
    it: a process building an owner's term space reads the words another process embedded already.
    ``embedder`` is a digest of the embedder's identity; another embedder's rows are never read.
    """

    __tablename__ = "word_vectors"

    embedder: Mapped[str] = mapped_column(String(32), primary_key=True)
    word: Mapped[str] = mapped_column(String(64), primary_key=True)
    vector: Mapped[bytes] = mapped_column(LargeBinary)
