"""What the memory stores take and hand back, and the helpers every store shares."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import Field
from sqlalchemy import ColumnElement, Executable, func
from sqlalchemy.orm import Session

from cluster.core.types import Frozen
from cluster.memory.models import MemoryRecord
from cluster.memory.policy.lifetime import Validity
from cluster.memory.policy.scope import MemoryScope
from cluster.memory.policy.versions import MemoryValue
from cluster.memory.tables import MemoryRow


class StoredMemory(Frozen):
    """A memory version with the bookkeeping the service needs besides the public record."""

    seq: int
    lineage_id: uuid.UUID
    record: MemoryRecord
    text: str
    activity: float
    activity_at: datetime
    session_bound: bool


class NewMemory(Frozen):
    """One memory version to insert: what the service decided, typed."""

    memory_id: uuid.UUID
    lineage_id: uuid.UUID
    scope: MemoryScope
    key: str
    version: int
    text: str = Field(description="The searchable text of the value.")
    value: MemoryValue
    metadata: dict[str, Any]
    entity: str | None
    source_ids: tuple[str, ...]
    context: str | None
    thread: str | None = Field(default=None, description="The conversation it was told in.")
    context_derived: bool = Field(default=False, description="Whether ``context`` holds its neighbours' texts.")
    created_at: datetime
    validity: Validity
    activity: float


def owned(owner: str) -> ColumnElement[bool]:
    """The owner constraint for statements that address rows by ``seq``.

    Wrapped in ``coalesce`` on purpose: without statistics, SQLite's planner prefers an equality on
    an indexed ``owner`` over a primary-key ``IN`` list and scans all of the owner's rows.
    """
    return func.coalesce(MemoryRow.owner, "") == owner


def run(session: Session, stmt: Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Any:
    """A prebuilt Core statement (:mod:`cluster.memory.statements`) on the session's connection,
    inside its transaction: the ORM session has nothing to add to it. A list of parameter sets runs
    it once per set. (Typed ``Any``: the rows' shape is the statement's, which the typing of a
    prebuilt statement does not carry.)"""
    return session.connection().execute(stmt, params)


def stored(row: Any) -> StoredMemory:
    """A stored version from a memory row: an ORM ``MemoryRow`` or a Core row of every column
    with ``metadata`` as ``meta`` (:mod:`cluster.memory.statements`)."""
    scope = MemoryScope(kind=row.scope_kind, session_id=row.session_id, task_id=row.task_id)
    value: Any = row.data if row.data is not None else row.text
    record = MemoryRecord(
        memory_id=row.memory_id,
        key=row.key,
        value=value,
        scope=scope,
        entity=row.entity,
        metadata=row.meta,
        source_ids=tuple(row.source_ids),
        version=row.version,
        state=row.state,
        archived=row.archived_at is not None,
        created_at=row.created_at,
        valid_from=row.valid_from,
        expires_at=row.expires_at,
    )
    return StoredMemory(
        seq=row.seq,
        lineage_id=row.lineage_id,
        record=record,
        text=row.text,
        activity=row.activity,
        activity_at=row.activity_at,
        session_bound=row.session_bound,
    )
