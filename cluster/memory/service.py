"""Long-term memory service: versions, lifetimes, owner isolation, hybrid retrieval, promotion.

SQL holds every memory version (the source of truth); Milvus holds one vector per version,
derived and rebuildable (:meth:`MemoryService.reindex`). Every method takes the ``owner`` from
the caller's credential as its first argument; no request model carries an owner.

:class:`MemoryService` is the entry point the MCP tools, the jobs and the CLI call; the work is
done by its parts, each a module of its own:

- :mod:`cluster.memory.writes` (:class:`~cluster.memory.writes.Writes`): new versions, updates,
  forgetting, the end of a session, reads by id;
- :mod:`cluster.memory.query` (:class:`~cluster.memory.query.Queries`): the query pipeline, with
  the ranking stages of :mod:`cluster.memory.ranking`;
- :mod:`cluster.memory.promotion` (:class:`~cluster.memory.promotion.Promotions`): the raw log of
  turns and their promotion, at once by rule or later by re-evaluation;
- :mod:`cluster.memory.upkeep` (:class:`~cluster.memory.upkeep.Upkeep`): decay and archiving, the
  purge of expired memories, queued vector work, the rebuild of Milvus;

and, under them, :mod:`cluster.memory.derived` brings vectors and activity in step after each commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from cluster.core.errors import HindsightError, InvalidInput
from cluster.core.ports import Embedder
from cluster.memory.access import AccessLog
from cluster.memory.cache import QueryCache
from cluster.memory.derived import DerivedState
from cluster.memory.expansion import TermSpaces, WordVectors
from cluster.memory.index import MilvusMemoryIndex
from cluster.memory.indexing import BackgroundIndexing
from cluster.memory.models import (
    MaintenanceReport,
    MemoryForget,
    MemoryForgetResult,
    MemoryObserve,
    MemoryQuery,
    MemoryQueryResult,
    MemoryRecord,
    MemoryUpdate,
    MemoryWrite,
    MemoryWriteResult,
    ObserveResult,
    SessionEnd,
    SessionEndResult,
)
from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.policy.limits import MemoryLimits
from cluster.memory.policy.promotion import PromotionPolicy
from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.promotion import Promotions
from cluster.memory.query import Queries
from cluster.memory.ranking.pipeline import Candidates
from cluster.memory.repository.search import Search
from cluster.memory.upkeep import Upkeep
from cluster.memory.word_store import SharedWordVectors
from cluster.memory.writes import Writes
from cluster.storage.db import Database


class MemoryService:
    """Layered long-term memory for many owners.

    Args:
        database: the SQL unit-of-work provider (SQLite or Postgres, migrated).
        embedder: turns texts into unit vectors; its dimension must match ``index``.
        index: the Milvus collection of memory vectors.
        activity: decay, reinforcement and archive rules.
        ranking: fusion weights and candidate counts.
        promotion: when a raw turn turned out to matter.
        limits: size limits of values, metadata and context.
        cache_bytes: hot-query cache bound in bytes of serialised results (0 disables the cache).
        cache_ttl: how long a cached result may be served while the owner's memories do not change.
        access_flush_entries: write recorded accesses once this many are waiting ...
        access_flush_interval: ... or once the oldest has waited this long.
        index_retry_after: queued vector work older than this is retried by the owner's next write
            (younger work may still be in flight in another process).
        embedder_name: the embedder's identity (:func:`cluster.embedding.factory.embedder_identity`):
            query expansion's word vectors are then kept in SQL under it, embedded once for every
            process; without it each process embeds the words it needs itself. A rebuild of every
            owner (:meth:`reindex`) also records it as the builder of the collection's vectors.
        word_embedder: embeds those words; default ``embedder``. The same model without a cache in
            front, when ``embedder`` has one: the words are kept here, and in that cache they would
            only push the queries' and writes' texts out.
    """

    def __init__(
        self,
        database: Database,
        embedder: Embedder,
        index: MilvusMemoryIndex,
        *,
        activity: ActivityPolicy | None = None,
        ranking: RankingPolicy | None = None,
        promotion: PromotionPolicy | None = None,
        limits: MemoryLimits | None = None,
        cache_bytes: int = 32 * 1024 * 1024,
        cache_ttl: timedelta = timedelta(seconds=30),
        access_flush_entries: int = 1000,
        access_flush_interval: timedelta = timedelta(seconds=10),
        index_retry_after: timedelta = timedelta(seconds=60),
        embedder_name: str | None = None,
        word_embedder: Embedder | None = None,
    ) -> None:
        if embedder.dimension != index.dimension:
            raise InvalidInput(f"embedder makes {embedder.dimension}-d vectors, the index holds {index.dimension}-d")
        self.db = database
        self.embedder = embedder
        self.index = index
        self.embedder_name = embedder_name
        self.activity = activity or ActivityPolicy()
        self.ranking = ranking or RankingPolicy()
        self.promotion = promotion or PromotionPolicy()
        self.limits = limits or MemoryLimits()
        self.cache = QueryCache(cache_bytes, cache_ttl)
        # Word vectors are shared through SQL under the embedder's name; without one, per process.
        self.words = SharedWordVectors(database, embedder_name) if embedder_name else None
        save = self.words.save if self.words else None
        self.terms = TermSpaces(WordVectors((word_embedder or embedder).embed, save=save), embedder.dimension)
        self.derived = DerivedState(
            database,
            index,
            embedder,
            self.activity,
            AccessLog(access_flush_entries, access_flush_interval),
            retry_after=index_retry_after,
        )
        self.writes = Writes(database, embedder, index, self.derived, activity=self.activity, limits=self.limits)
        self.queries = Queries(
            database,
            embedder,
            index,
            self.derived,
            ranking=self.ranking,
            activity=self.activity,
            cache=self.cache,
            terms=self.terms,
            words=self.words,
        )
        # Queued vector work done by anyone (the indexing thread, a retry, maintenance) stores its words' vectors.
        self.derived.embedded = self.queries.store_words
        self.indexing = BackgroundIndexing(self._index_queued)
        self.promotions = Promotions(database, self.writes, promotion=self.promotion, limits=self.limits)
        self.upkeep = Upkeep(
            database,
            embedder,
            index,
            self.derived,
            activity=self.activity,
            embedder_name=embedder_name,
            words=self.words,
        )

    # ------------------------------------------------------------------------------------- writes

    def apply_write(self, owner: str, request: MemoryWrite, *, now: datetime | None = None) -> MemoryWriteResult:
        """One write (what ``memory_write`` sends, without the batching of concurrent calls)."""
        written = self.writes.write(owner, [request], now=now)[0]
        self.queries.prepare(owner)
        return written

    def apply_writes(
        self, owner: str, requests: Sequence[MemoryWrite], *, now: datetime | None = None, index_later: bool = False
    ) -> list[MemoryWriteResult]:
        """Write many memories in one unit of work with one embedding batch (bulk ingest).

        ``index_later`` (the ``memory_writes`` tool): answer once the rows are stored; their vectors,
        and those of their words the query expansion reads, are made on this process's indexing
        thread (:mod:`cluster.memory.indexing`). :meth:`unindexed` says how many still wait.
        """
        if not index_later:
            written = self.writes.write(owner, requests, now=now)
            self.queries.prepare(owner)
            return written
        written, queued = self.writes.write_unindexed(owner, requests, now=now)
        self.indexing.request(owner, queued)
        return written

    def unindexed(self, owner: str) -> int:
        """How many of the owner's memories are stored but not yet searchable by meaning."""
        with self.db.read() as session:
            return Search(session, owner, self.db.dialect).unindexed()[0]

    def _index_queued(self, owner: str, seqs: Sequence[int]) -> None:
        """The indexing thread's work: the vectors of the owner's ``seqs``, and those of their words
        stored before their queue entries are cleared (so no query embeds them); the next query prepared."""
        self.derived.make_vectors(owner, seqs)
        self.queries.prepare(owner)

    def apply_write_batch(
        self, items: Sequence[tuple[str, MemoryWrite]], *, now: datetime | None = None
    ) -> list[MemoryWriteResult | HindsightError]:
        """The ``memory_write`` tool's concurrent calls: one unit of work per owner, each write's
        result or the error that refused it, in order."""
        written = self.writes.write_batch(items, now=now)
        for owner in dict.fromkeys(owner for owner, _ in items):
            self.queries.prepare(owner)
        return written

    def apply_update(self, owner: str, request: MemoryUpdate, *, now: datetime | None = None) -> MemoryWriteResult:
        """The ``memory_update`` tool. Raises ``NotFound`` (unknown for this owner) or ``Conflict`` (superseded)."""
        return self.writes.update(owner, request, now=now)

    def apply_forget(self, owner: str, request: MemoryForget) -> MemoryForgetResult:
        """The ``memory_forget`` tool. Raises ``NotFound`` if this owner has no such memory."""
        return self.writes.forget(owner, request)

    def apply_end_session(self, owner: str, request: SessionEnd, *, now: datetime | None = None) -> SessionEndResult:
        """The ``memory_end_session`` tool: the memories bound to the session expire."""
        return self.writes.end_session(owner, request, now=now)

    def memory_id(self, owner: str, ref: str) -> uuid.UUID:
        """The id a whole id or a short one (its first hex digits) names; ``memory_update`` and
        ``memory_forget`` take both."""
        return self.writes.memory_id(owner, ref)

    def get(self, owner: str, memory_id: uuid.UUID) -> MemoryRecord:
        """One version by id, whatever its state. Raises ``NotFound``."""
        return self.writes.get(owner, memory_id)

    # ------------------------------------------------------------------------------------- query

    def run_query(
        self, owner: str, request: MemoryQuery, *, now: datetime | None = None, record_access: bool = True
    ) -> MemoryQueryResult:
        """The ``memory_query`` tool: a read-only unit of work (``record_access`` False: not counted as a use)."""
        return self.queries.run(owner, request, now=now, record_access=record_access)

    def candidates(self, owner: str, request: MemoryQuery, *, now: datetime | None = None) -> Candidates:
        """What the ranking of :meth:`run_query` starts from, for tuning a ``RankingPolicy`` offline."""
        return self.queries.candidates(owner, request, now=now)

    # ---------------------------------------------------------------------- raw log and promotion

    def apply_observe(self, owner: str, request: MemoryObserve, *, now: datetime | None = None) -> ObserveResult:
        """The ``memory_observe`` tool: log a turn; one that asks to be remembered, or reports a state
        change, is stored at once by rule. Sending it again logs it once."""
        return self.promotions.observe(owner, request, now=now)

    def reevaluate(self, owner: str | None = None, *, now: datetime | None = None) -> MaintenanceReport:
        """The delayed promotion job: promote logged turns that later turns referred back to."""
        return self.promotions.reevaluate(owner, now=now)

    # ------------------------------------------------------------------------------- maintenance

    def decay_and_archive(self, now: datetime | None = None, *, owner: str | None = None) -> MaintenanceReport:
        """Archive current memories whose decayed activity fell below the threshold."""
        return self.upkeep.decay_and_archive(now, owner=owner)

    def restore(self, owner: str, memory_id: uuid.UUID, *, now: datetime | None = None) -> MemoryRecord:
        """Bring an archived memory back, with fresh activity. Raises ``NotFound``."""
        return self.upkeep.restore(owner, memory_id, now=now)

    def purge_expired(self, now: datetime | None = None, *, owner: str | None = None) -> MaintenanceReport:
        """Delete expired memories (every version) from SQL and Milvus."""
        return self.upkeep.purge_expired(now, owner=owner)

    def sync_index(self, owner: str | None = None) -> int:
        """Do all queued vector work (left by a Milvus failure, or by migration 0004); returns items done."""
        return self.upkeep.sync_index(owner)

    def flush_accesses(self) -> int:
        """Write the accesses this process's queries recorded; returns how many."""
        return self.upkeep.flush_accesses()

    def reindex(self, owner: str | None = None, *, batch_size: int = 256) -> int:
        """Rebuild Milvus from SQL (all owners, or one); returns the vectors written (see :meth:`Upkeep.reindex`)."""
        return self.upkeep.reindex(owner, batch_size=batch_size)
