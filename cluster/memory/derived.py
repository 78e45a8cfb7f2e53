"""Derived memory state brought in step after each commit: vectors in Milvus, activity in SQL.

Vectors: the transaction that changes a memory row queues its vector work
(``memory_index_queue``). After the commit :meth:`DerivedState.settle` applies it to Milvus and clears
the entries in a short second transaction that also bumps the owner's generation (dense results
change only now, so results cached in between must go). When Milvus fails, the entries stay and
:meth:`DerivedState.sync_index` does them later (the owner's next write retries old ones, maintenance
all of them), embedding again from the SQL text. No Milvus call ever runs inside a write
transaction, and a committed write never fails because of Milvus.

Activity: queries note accesses in an :class:`~cluster.memory.access.AccessLog`; they are written
by :meth:`DerivedState.flush_accesses`, and ride along on every settle transaction for free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from cluster.core.errors import StoreUnavailable
from cluster.core.ports import Embedder
from cluster.core.types import utcnow
from cluster.memory.access import AccessLog, Pending, apply_accesses
from cluster.memory.index import MilvusMemoryIndex, VectorRow
from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.repository.queue import IndexQueue, IndexWork, queued
from cluster.memory.repository.versions import Versions
from cluster.memory.tables import IndexOp
from cluster.storage.db import Database

logger = logging.getLogger(__name__)

INDEX_BATCH = 256


class DerivedState:
    """Applies queued vector work and recorded accesses for one memory service.

    Args:
        retry_after: queued work older than this is retried after the owner's next write; younger
            work may still be in flight in the process that queued it.
    """

    def __init__(
        self,
        database: Database,
        index: MilvusMemoryIndex,
        embedder: Embedder,
        activity: ActivityPolicy,
        accesses: AccessLog,
        *,
        retry_after: timedelta = timedelta(seconds=60),
    ) -> None:
        self.db = database
        self.index = index
        self.embedder = embedder
        self.activity = activity
        self.accesses = accesses
        self.retry_after = retry_after
        # Told the texts of the vectors made here, before they count as indexed (the memory service
        # stores their words' vectors for the query expansion then).
        self.embedded: Callable[[Sequence[str]], object] | None = None

    # -------------------------------------------------------------------------------- vectors

    def settle(
        self,
        owner: str,
        upserts: Sequence[VectorRow] = (),
        deletes: Sequence[int] = (),
        *,
        vanished: Sequence[int] = (),
        retry: bool = True,
        fresh: bool = False,
    ) -> bool:
        """Apply committed vector work to Milvus and clear its queue entries; ``False`` if that failed.

        ``vanished`` are queued upserts whose rows are gone meanwhile: their vectors are deleted.
        ``fresh``: the upserts are new versions settled by the write that made them, so Milvus
        cannot hold them yet (queued work done later may have been half done: never fresh).
        A failure is logged, not raised: the write that queued the work has committed, and an error
        would make its caller retry it (a second version). The queue keeps the work.
        """
        if not upserts and not deletes and not vanished:
            return True
        try:
            self.index.upsert(upserts, fresh=fresh)
            self.index.delete(owner, [*deletes, *vanished])
        except StoreUnavailable:
            logger.warning("Milvus unavailable: %s memory vector changes stay queued", len(upserts) + len(deletes))
            return False
        done = [IndexWork(seq=r.seq, owner=owner, op=IndexOp.UPSERT) for r in upserts]
        done += [IndexWork(seq=seq, owner=owner, op=IndexOp.UPSERT) for seq in vanished]
        done += [IndexWork(seq=seq, owner=owner, op=IndexOp.DELETE) for seq in deletes]
        accesses = self.accesses.take()
        try:
            with self.db.transaction() as session:
                IndexQueue(session, owner, self.db.dialect).done(done)
                # Dense results change only now: results cached since the commit may lack these vectors.
                Versions(session, owner, self.db.dialect).bump_generation()
                self.write_accesses(session, accesses)
        except SQLAlchemyError:
            self.accesses.restore(accesses)
            logger.warning("could not clear %s finished memory vector changes; they will be redone", len(done))
            return False
        if retry:
            self.sync_index(owner, older_than=self.retry_after, batches=1)
        return True

    def sync_index(
        self,
        owner: str | None = None,
        *,
        older_than: timedelta = timedelta(0),
        batches: int | None = None,
    ) -> int:
        """Do queued vector work of one owner or of all; returns how many items were done.

        Takes work queued at least ``older_than`` ago (wall clock), ``INDEX_BATCH`` items at a time, at most
        ``batches`` times (default: until none is left). Stops at the first failure.
        """
        cutoff = utcnow() - older_than
        done = 0
        seen: set[int] = set()
        rounds = 0
        while batches is None or rounds < batches:
            rounds += 1
            with self.db.read() as session:
                work = [w for w in queued(session, owner, cutoff, INDEX_BATCH) if w.seq not in seen]
            if not work:
                break
            seen.update(w.seq for w in work)
            for who in dict.fromkeys(w.owner for w in work):
                mine = [w for w in work if w.owner == who]
                wanted = [w.seq for w in mine if w.op is IndexOp.UPSERT]
                deletes = [w.seq for w in mine if w.op is IndexOp.DELETE]
                if not self.make_vectors(who, wanted, deletes):
                    return done
                done += len(mine)
        if done:
            logger.info("did %s queued memory vector changes", done)
        return done

    def make_vectors(self, owner: str, seqs: Sequence[int], deletes: Sequence[int] = ()) -> bool:
        """Make the vectors of the owner's ``seqs`` from their SQL text and settle them (with
        ``deletes``); ``False`` if that failed (the queue keeps the work). ``embedded`` gets the texts
        once they are embedded, before their queue entries are cleared."""
        with self.db.read() as session:
            sources = IndexQueue(session, owner, self.db.dialect).sources(seqs)
        texts = [src.text for src in sources]
        vectors = self.embedder.embed(texts) if sources else []
        if self.embedded is not None and texts:
            self.embedded(texts)
        rows = [
            VectorRow(seq=src.seq, owner=owner, scope_key=src.scope_key, entity=src.entity, vector=v)
            for src, v in zip(sources, vectors, strict=True)
        ]
        vanished = sorted(set(seqs) - {r.seq for r in rows})
        return self.settle(owner, rows, deletes, vanished=vanished, retry=False)

    # ------------------------------------------------------------------------------- accesses

    def flush_accesses(self) -> int:
        """Write the accesses queries recorded in this process, in one short transaction; returns how many."""
        taken = self.accesses.take()
        if not taken:
            return 0
        try:
            with self.db.transaction() as session:
                self.write_accesses(session, taken)
        except SQLAlchemyError:
            self.accesses.restore(taken)
            logger.warning("could not record memory accesses; they stay queued")
            return 0
        return sum(len(times) for seqs in taken.values() for times in seqs.values())

    def write_accesses(self, session: Session, taken: Pending) -> None:
        """Apply recorded accesses to the stored activity, in the caller's unit of work."""
        for owner, seqs in taken.items():
            versions = Versions(session, owner, self.db.dialect)
            stored = versions.activity_of(sorted(seqs))
            changes: dict[int, tuple[float, datetime, int]] = {}
            for seq, (score, since) in stored.items():
                score, since = apply_accesses(self.activity, score, since, seqs[seq])
                changes[seq] = (score, since, len(seqs[seq]))
            versions.set_activity(changes)
