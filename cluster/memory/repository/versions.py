"""An owner's memory versions in SQL: written, superseded, read by id, deleted, archived and restored,
their conversations, their activity, and the owner's generation."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, or_, select, update
from sqlalchemy.orm import Session

from cluster.core.errors import NotFound
from cluster.memory import statements
from cluster.memory.policy.versions import MemoryState
from cluster.memory.repository.rows import NewMemory, StoredMemory, owned, run, stored
from cluster.memory.tables import MemoryRow
from cluster.storage.db import UtcDateTime


class Neighbour(NamedTuple):
    """A memory of a conversation, as the memories told beside it read it."""

    seq: int
    text: str
    context_derived: bool


class ThreadRow(NamedTuple):
    """A memory of a conversation near another, in any state."""

    seq: int
    neighbour: bool  # a neighbour at the time asked: current, unarchived, unexpired
    context_derived: bool


_Rows = TypeVar("_Rows", bound=Select[*tuple[Any, ...]])


def owners(session: Session) -> list[str]:
    """Every owner with memories (maintenance jobs then work owner by owner)."""
    return list(session.scalars(select(MemoryRow.owner).distinct()))


def _neighbour_at(now: datetime) -> ColumnElement[bool]:
    """A memory of a conversation that is a neighbour at ``now``: current, unarchived, unexpired."""
    m = MemoryRow
    return and_(
        m.state == MemoryState.CURRENT, m.archived_at.is_(None), or_(m.expires_at.is_(None), m.expires_at > now)
    )


class Versions:
    """One owner's memory versions in one unit of work."""

    def __init__(self, session: Session, owner: str, dialect: str) -> None:
        self.session = session
        self.owner = owner
        self.dialect = dialect

    # ------------------------------------------------------------------------------------- writes

    def bump_generation(self) -> None:
        """Mark a change of the owner's memories, in the transaction that makes it.

        On Postgres the row lock also queues concurrent writers of one owner behind each other.
        """
        run(self.session, statements.bump_generation(self.dialect), {"owner": self.owner})

    def latest(self, scope_key: str, key: str, *, lock: bool = True) -> StoredMemory | None:
        """The newest version of (scope, key), current or not (row-locked on Postgres unless ``lock`` is off)."""
        stmt = statements.latest(lock=lock and self.dialect == "postgresql")
        row = run(self.session, stmt, {"owner": self.owner, "scope_key": scope_key, "key": key}).first()
        return stored(row) if row is not None else None

    def insert(self, new: NewMemory) -> int:
        """Insert one version; returns its ``seq`` (the Milvus primary key, never handed out twice)."""
        values = {
            "memory_id": new.memory_id,
            "lineage_id": new.lineage_id,
            "owner": self.owner,
            "scope_kind": new.scope.kind,
            "scope_key": new.scope.key,
            "session_id": new.scope.session_id,
            "task_id": new.scope.task_id,
            "key": new.key,
            "version": new.version,
            "state": MemoryState.CURRENT,
            "text": new.text,
            "data": new.value if isinstance(new.value, dict) else None,
            "metadata": new.metadata,
            "entity": new.entity,
            "source_ids": list(new.source_ids),
            "context": new.context,
            "thread": new.thread,
            "context_derived": new.context_derived,
            "created_at": new.created_at,
            "valid_from": new.validity.valid_from,
            "expires_at": new.validity.expires_at,
            "session_bound": new.validity.session_bound,
            "superseded_at": None,
            "superseded_by": None,
            "archived_at": None,
            "activity": new.activity,
            "activity_at": new.created_at,
            "access_count": 0,
        }
        return int(run(self.session, statements.insert_version(), values).scalar_one())

    def supersede(self, seq: int, by: uuid.UUID, at: datetime) -> None:
        self.session.execute(
            update(MemoryRow)
            .where(MemoryRow.owner == self.owner, MemoryRow.seq == seq)
            .values(state=MemoryState.SUPERSEDED, superseded_at=at, superseded_by=by)
        )

    def delete_seqs(self, seqs: Sequence[int]) -> int:
        if not seqs:
            return 0
        result = self.session.execute(delete(MemoryRow).where(owned(self.owner), MemoryRow.seq.in_(list(seqs))))
        return int(getattr(result, "rowcount", 0) or 0)

    def end_session(self, session_id: str, at: datetime) -> list[MemoryState]:
        """Expire the session's bound memories, superseded versions too; returns the state of each."""
        return list(
            self.session.scalars(
                update(MemoryRow)
                .where(
                    MemoryRow.owner == self.owner,
                    MemoryRow.session_id == session_id,
                    MemoryRow.session_bound.is_(True),
                    or_(MemoryRow.expires_at.is_(None), MemoryRow.expires_at > at),
                )
                .values(expires_at=at)
                .returning(MemoryRow.state)
            )
        )

    # ------------------------------------------------------------------------------------ by id

    def get(self, memory_id: uuid.UUID) -> StoredMemory:
        row = self.session.scalars(
            select(MemoryRow).where(MemoryRow.owner == self.owner, MemoryRow.memory_id == memory_id)
        ).first()
        if row is None:
            raise NotFound(f"memory {memory_id} not found")
        return stored(row)

    def ids_between(self, first: uuid.UUID, last: uuid.UUID) -> list[uuid.UUID]:
        """At most two of the owner's memory ids from ``first`` to ``last`` (two tell a prefix is ambiguous)."""
        return list(
            self.session.scalars(
                select(MemoryRow.memory_id)
                .where(MemoryRow.owner == self.owner, MemoryRow.memory_id.between(first, last))
                .limit(2)
            )
        )

    def lineage_seqs(self, lineage_id: uuid.UUID) -> list[int]:
        return list(
            self.session.scalars(
                select(MemoryRow.seq).where(MemoryRow.owner == self.owner, MemoryRow.lineage_id == lineage_id)
            )
        )

    # ------------------------------------------------------------------------------- conversations

    def _thread_side(self, stmt: _Rows, thread: str, seq: int | None, *, after: bool) -> _Rows:
        """``stmt`` over the owner's memories of ``thread`` on one side of ``seq`` (all of them when
        ``seq`` is None), nearest first."""
        m = MemoryRow
        stmt = stmt.where(m.owner == self.owner, m.thread == thread)
        if seq is not None:
            stmt = stmt.where(m.seq > seq if after else m.seq < seq)
        return stmt.order_by(m.seq.asc() if after else m.seq.desc())

    def neighbour(self, thread: str, seq: int | None, now: datetime, *, after: bool) -> Neighbour | None:
        """The owner's current memory of ``thread`` (unarchived, unexpired at ``now``) told just
        before ``seq`` (its last when ``seq`` is None), or with ``after`` just after it."""
        m = MemoryRow
        stmt = self._thread_side(select(m.seq, m.text, m.context_derived), thread, seq, after=after)
        row = self.session.execute(stmt.where(_neighbour_at(now)).limit(1)).first()
        return Neighbour(row.seq, row.text, row.context_derived) if row is not None else None

    def thread_rows(self, thread: str, seq: int, now: datetime, *, after: bool, limit: int) -> list[ThreadRow]:
        """The owner's memories of ``thread`` nearest ``seq`` on one side, in any state, nearest first."""
        m = MemoryRow
        columns = select(m.seq, _neighbour_at(now).label("neighbour"), m.context_derived)
        stmt = self._thread_side(columns, thread, seq, after=after).limit(limit)
        return [ThreadRow(row.seq, bool(row.neighbour), row.context_derived) for row in self.session.execute(stmt)]

    def threads_of(self, seqs: Sequence[int]) -> dict[int, str]:
        """The conversation of those of ``seqs`` that have one."""
        stmt = select(MemoryRow.seq, MemoryRow.thread).where(
            owned(self.owner), MemoryRow.seq.in_(list(seqs)), MemoryRow.thread.is_not(None)
        )
        return {seq: thread for seq, thread in self.session.execute(stmt) if thread is not None}

    def set_context(self, seq: int, context: str | None) -> None:
        """Replace one version's derived context (its full-text document follows)."""
        self.session.execute(
            update(MemoryRow)
            .where(owned(self.owner), MemoryRow.seq == seq)
            .values(context=context, context_derived=True)
        )

    # ------------------------------------------------------------------------------------ activity

    def activity_of(self, seqs: Sequence[int]) -> dict[int, tuple[float, datetime]]:
        """The stored (activity, when it was set) of those of ``seqs`` that still exist."""
        out: dict[int, tuple[float, datetime]] = {}
        for start in range(0, len(seqs), 500):
            chunk = list(seqs[start : start + 500])
            stmt = select(MemoryRow.seq, MemoryRow.activity, MemoryRow.activity_at).where(
                owned(self.owner), MemoryRow.seq.in_(chunk)
            )
            out.update((seq, (activity, at)) for seq, activity, at in self.session.execute(stmt))
        return out

    def set_activity(self, changes: Mapping[int, tuple[float, datetime, int]]) -> None:
        """Record accesses: per seq the new activity, when it was set, and how many accesses to add."""
        if not changes:
            return
        # One compiled statement run for many rows (executemany): a CASE over hundreds of seqs
        # costs more to compile than to run.
        stmt = (
            update(MemoryRow.__table__)  # type: ignore[arg-type]
            .where(MemoryRow.__table__.c.owner == bindparam("b_owner"), MemoryRow.__table__.c.seq == bindparam("b_seq"))
            .values(
                activity=bindparam("b_activity"),
                activity_at=bindparam("b_at", type_=UtcDateTime),
                access_count=MemoryRow.__table__.c.access_count + bindparam("b_count"),
            )
        )
        self.session.execute(
            stmt,
            [
                {"b_owner": self.owner, "b_seq": seq, "b_activity": activity, "b_at": at, "b_count": count}
                for seq, (activity, at, count) in changes.items()
            ],
        )

    def set_archived(self, seqs: Sequence[int], at: datetime | None) -> None:
        if seqs:
            self.session.execute(
                update(MemoryRow).where(owned(self.owner), MemoryRow.seq.in_(list(seqs))).values(archived_at=at)
            )

    def restore(self, seq: int, activity: float, at: datetime) -> None:
        self.session.execute(
            update(MemoryRow)
            .where(MemoryRow.owner == self.owner, MemoryRow.seq == seq)
            .values(archived_at=None, activity=activity, activity_at=at)
        )

    # ----------------------------------------------------------------------------------- maintenance

    def stale(self, before: datetime) -> list[StoredMemory]:
        """Current, unarchived memories whose activity was last set before ``before``."""
        rows = self.session.scalars(
            select(MemoryRow).where(
                MemoryRow.owner == self.owner,
                MemoryRow.archived_at.is_(None),
                MemoryRow.state == MemoryState.CURRENT,
                MemoryRow.activity_at < before,
            )
        )
        return [stored(row) for row in rows]

    def expired_seqs(self, now: datetime) -> list[int]:
        return list(
            self.session.scalars(
                select(MemoryRow.seq).where(
                    MemoryRow.owner == self.owner, MemoryRow.expires_at.is_not(None), MemoryRow.expires_at <= now
                )
            )
        )

    def seqs(self) -> set[int]:
        """Every version the owner has in SQL, archived and superseded ones included."""
        return set(self.session.scalars(select(MemoryRow.seq).where(MemoryRow.owner == self.owner)))

    def all_rows(self, after_seq: int, limit: int) -> list[StoredMemory]:
        rows = self.session.scalars(
            select(MemoryRow)
            .where(MemoryRow.owner == self.owner, MemoryRow.seq > after_seq)
            .order_by(MemoryRow.seq)
            .limit(limit)
        )
        return [stored(row) for row in rows]

    # ------------------------------------------------------------------------------ browsing

    def newest(self, limit: int, *, current_only: bool = True) -> list[StoredMemory]:
        """The owner's latest versions, newest first (current ones only, unless asked): the console's list."""
        query = select(MemoryRow).where(MemoryRow.owner == self.owner)
        if current_only:
            query = query.where(MemoryRow.state == MemoryState.CURRENT)
        return [stored(row) for row in self.session.scalars(query.order_by(MemoryRow.seq.desc()).limit(limit))]

    def lineage(self, lineage_id: uuid.UUID) -> list[StoredMemory]:
        """Every version of one memory, oldest first."""
        rows = self.session.scalars(
            select(MemoryRow)
            .where(MemoryRow.owner == self.owner, MemoryRow.lineage_id == lineage_id)
            .order_by(MemoryRow.seq)
        )
        return [stored(row) for row in rows]
