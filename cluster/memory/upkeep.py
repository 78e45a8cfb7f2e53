"""Memory upkeep off the agents' path: activity decay and archiving (and restoring), the purge of
expired memories, queued vector work, and the rebuild of Milvus from SQL.

:func:`cluster.memory.maintenance.run_maintenance` runs the periodic steps (with re-evaluation,
:mod:`cluster.memory.promotion`); ``hindsight reindex`` and the ``reindex`` job run the rebuild.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from cluster.core.owner import check_owner
from cluster.core.ports import Embedder
from cluster.core.types import utcnow
from cluster.memory.derived import DerivedState
from cluster.memory.entities import embedded_text
from cluster.memory.index import MilvusMemoryIndex, VectorRow
from cluster.memory.models import MaintenanceReport, MemoryRecord
from cluster.memory.neighbours import delete_versions
from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.repository.queue import IndexQueue
from cluster.memory.repository.versions import Versions, owners
from cluster.memory.tables import IndexOp
from cluster.memory.word_store import SharedWordVectors
from cluster.storage.db import Database
from cluster.storage.vector_builds import record_vector_build

logger = logging.getLogger(__name__)


class Upkeep:
    """The maintenance part of the memory service (see :class:`~cluster.memory.service.MemoryService`).

    Args:
        embedder_name: the embedder's identity: a rebuild of every owner records it as the builder
            of the collection's vectors.
        words: the expansion's stored word vectors: a rebuild of every owner drops other embedders'.
    """

    def __init__(
        self,
        database: Database,
        embedder: Embedder,
        index: MilvusMemoryIndex,
        derived: DerivedState,
        *,
        activity: ActivityPolicy,
        embedder_name: str | None = None,
        words: SharedWordVectors | None = None,
    ) -> None:
        self.db = database
        self.embedder = embedder
        self.index = index
        self.derived = derived
        self.activity = activity
        self.embedder_name = embedder_name
        self.words = words

    def _owners(self, owner: str | None) -> list[str]:
        if owner is not None:
            return [check_owner(owner)]
        with self.db.read() as session:
            return owners(session)

    def decay_and_archive(self, now: datetime | None = None, *, owner: str | None = None) -> MaintenanceReport:
        """Archive current memories whose decayed activity fell below the threshold."""
        now = now or utcnow()
        self.derived.flush_accesses()  # the decision must count the accesses queries recorded
        cutoff = self.activity.archive_candidates_before(now)
        scanned = 0
        archived: list[uuid.UUID] = []
        for who in self._owners(owner):
            with self.db.transaction() as session:
                versions = Versions(session, who, self.db.dialect)
                stale = versions.stale(cutoff)
                scanned += len(stale)
                gone = [m for m in stale if self.activity.should_archive(m.activity, m.activity_at, now)]
                if gone:
                    versions.set_archived([m.seq for m in gone], now)
                    versions.bump_generation()
            archived.extend(m.record.memory_id for m in gone)
        return MaintenanceReport(scanned=scanned, changed=len(archived), memory_ids=tuple(archived))

    def restore(self, owner: str, memory_id: uuid.UUID, *, now: datetime | None = None) -> MemoryRecord:
        """Bring an archived memory back, with fresh activity. Raises ``NotFound``."""
        check_owner(owner)
        now = now or utcnow()
        with self.db.transaction() as session:
            versions = Versions(session, owner, self.db.dialect)
            found = versions.get(memory_id)
            versions.restore(found.seq, self.activity.initial, now)
            versions.bump_generation()
        return found.record.model_copy(update={"archived": False})

    def purge_expired(self, now: datetime | None = None, *, owner: str | None = None) -> MaintenanceReport:
        """Delete expired memories (every version) from SQL and Milvus."""
        now = now or utcnow()
        removed = 0
        for who in self._owners(owner):
            with self.db.transaction() as session:
                versions = Versions(session, who, self.db.dialect)
                seqs = versions.expired_seqs(now)
                if seqs:
                    removed += delete_versions(versions, seqs, now)
                    IndexQueue(session, who, self.db.dialect).add(seqs, IndexOp.DELETE)
                    versions.bump_generation()
            self.derived.settle(who, (), seqs, fresh=True)
        return MaintenanceReport(scanned=removed, changed=removed)

    def sync_index(self, owner: str | None = None) -> int:
        """Do all queued vector work (left by a Milvus failure, or by migration 0004); returns items done."""
        return self.derived.sync_index(check_owner(owner) if owner is not None else None)

    def flush_accesses(self) -> int:
        """Write the accesses this process's queries recorded; returns how many."""
        return self.derived.flush_accesses()

    def reindex(self, owner: str | None = None, *, batch_size: int = 256) -> int:
        """Rebuild Milvus from SQL (all owners, or one); returns the vectors written.

        Online: each owner's vectors are upserted from SQL, then the ones SQL no longer has are
        deleted; the collection is never emptied, so queries keep their dense stage (a vector being
        replaced can be missing for the instant of its upsert; queries check every candidate in SQL).
        Only a collection made for another vector length is dropped first: it cannot take these.
        A rebuild of every owner visits the owners Milvus has as well as SQL's, records this embedder
        as the collection's builder (with ``embedder_name``) and deletes the expansion's word vectors
        of other embedders.
        """
        if owner is not None:
            check_owner(owner)
        elif self.index.holds_other_dimension():
            logger.warning("the memory collection holds vectors of another length: dropped, rebuilt from SQL")
            self.index.reset()
        written = 0
        # Every owner with a vector too: one whose last memory was forgotten may have kept a vector
        # (a lost delete); it has no rows, so the pass below only deletes what Milvus holds.
        everyone = [owner] if owner is not None else sorted(self.index.owners() | set(self._owners(None)))
        for who in everyone:
            started = utcnow()
            after = -1
            while True:
                with self.db.read() as session:
                    page = Versions(session, who, self.db.dialect).all_rows(after, batch_size)
                if not page:
                    break
                vectors = self.embedder.embed([embedded_text(m.text, m.record.metadata) for m in page])
                self.index.upsert(
                    [
                        VectorRow(seq=m.seq, owner=who, scope_key=m.record.scope.key, entity=m.record.entity, vector=v)
                        for m, v in zip(page, vectors, strict=True)
                    ]
                )
                written += len(page)
                after = page[-1].seq
            # Milvus first, SQL second: a vector found is then either a row SQL still has (writers
            # commit before they index) or one forgotten meanwhile, perhaps rewritten by this pass.
            indexed = self.index.seqs(who)
            with self.db.read() as session:
                kept = Versions(session, who, self.db.dialect).seqs()
            self.index.delete(who, sorted(indexed - kept))
            with self.db.transaction() as session:
                # Work queued well before this pass read the rows is done. Younger work may still be
                # in flight in its writer: it stays queued, retried like any other (idempotent).
                IndexQueue(session, who, self.db.dialect).clear(before=started - self.derived.retry_after)
                Versions(session, who, self.db.dialect).bump_generation()
        if owner is None and self.embedder_name is not None:
            record_vector_build(self.db, self.index.collection, self.embedder_name)
        if owner is None and self.words is not None:
            # Every vector is this embedder's now; words another one embedded are never read again.
            self.words.drop_others()
        logger.info("reindexed %s memory vectors", written)
        return written
