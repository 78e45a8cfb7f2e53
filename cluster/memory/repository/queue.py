"""Vector work in SQL, queued by the transaction that changes a memory row and cleared once Milvus has it
(:mod:`cluster.memory.derived` does it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from cluster.core.types import Frozen, utcnow
from cluster.memory import statements
from cluster.memory.entities import embedded_text
from cluster.memory.repository.rows import owned, run
from cluster.memory.tables import IndexOp, MemoryIndexQueueRow, MemoryRow


class IndexSource(Frozen):
    """What a memory vector is made from: the text to embed and the fields Milvus filters on."""

    seq: int
    scope_key: str
    entity: str | None
    text: str


class IndexWork(Frozen):
    """A queued vector operation (see ``MemoryIndexQueueRow``)."""

    seq: int
    owner: str
    op: IndexOp


def queued(session: Session, owner: str | None, before: datetime, limit: int) -> list[IndexWork]:
    """Vector work queued up to ``before`` (of one owner, or of all), oldest first."""
    params: dict[str, Any] = {"before": before, "limit": limit}
    if owner is not None:
        params["owner"] = owner
    found = run(session, statements.queued(of_owner=owner is not None), params)
    return [IndexWork(seq=seq, owner=who, op=op) for seq, who, op in found]


class IndexQueue:
    """One owner's queued vector work in one unit of work."""

    def __init__(self, session: Session, owner: str, dialect: str) -> None:
        self.session = session
        self.owner = owner
        self.dialect = dialect

    def add(self, seqs: Sequence[int], op: IndexOp) -> None:
        """Queue vector work for ``seqs`` in this unit of work; a later operation on a seq replaces an earlier one.

        Stamped with the wall clock, not the write's (possibly simulated) time: the age of queued
        work tells whether the process that queued it may still be doing it.
        """
        if not seqs:
            return
        at = utcnow()
        rows = [{"seq": seq, "owner": self.owner, "op": op, "queued_at": at} for seq in dict.fromkeys(seqs)]
        run(self.session, statements.queue_index(self.dialect), rows)

    def done(self, done: Sequence[IndexWork]) -> None:
        """Remove finished work; an entry whose operation changed meanwhile (upsert → delete) stays."""
        for op in IndexOp:
            seqs = [w.seq for w in done if w.op is op]
            for start in range(0, len(seqs), 500):
                params = {"owner": self.owner, "op": op, "seqs": seqs[start : start + 500]}
                run(self.session, statements.index_done(), params)

    def sources(self, seqs: Sequence[int]) -> list[IndexSource]:
        """What the vectors of those of ``seqs`` that still exist are made from."""
        out: list[IndexSource] = []
        for start in range(0, len(seqs), 500):
            stmt = select(MemoryRow.seq, MemoryRow.scope_key, MemoryRow.entity, MemoryRow.text, MemoryRow.meta).where(
                owned(self.owner), MemoryRow.seq.in_(list(seqs[start : start + 500]))
            )
            out.extend(
                IndexSource(seq=seq, scope_key=scope_key, entity=entity, text=embedded_text(text, meta))
                for seq, scope_key, entity, text, meta in self.session.execute(stmt)
            )
        return out

    def clear(self, before: datetime) -> None:
        """Forget the owner's work queued before ``before`` (a rebuild from SQL read afterwards did it)."""
        queue = MemoryIndexQueueRow
        self.session.execute(delete(queue).where(queue.owner == self.owner, queue.queued_at < before))
