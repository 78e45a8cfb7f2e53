"""Long-term memory service: versions, lifetimes, owner isolation, hybrid retrieval, promotion.

SQL holds every memory version (the source of truth); Milvus holds one vector per version,
derived and rebuildable (:meth:`MemoryService.reindex`). Every method takes the ``owner`` from
the caller's credential as its first argument; no request model carries an owner.

Write order: embed first (slow, outside any transaction); then one write transaction inserts the
SQL rows, queues their vectors (``memory_index_queue``) and bumps the owner's generation; after the
commit the vectors go to Milvus and a short second transaction clears the queue entries. If Milvus
fails, the write still stands (it is durable and found lexically) and the queued work is done by
the next write of the owner or by maintenance (:meth:`MemoryService.sync_index`).

Queries are read-only units of work (``Database.read()``): they never wait for SQLite's writer.
The accesses they record are written later, in batches (:mod:`cluster.memory.access`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from cluster.core.errors import Conflict, HindsightError, InvalidInput, NotFound, StoreUnavailable
from cluster.core.owner import check_owner
from cluster.core.ports import Embedder
from cluster.core.types import JsonObject, as_utc, utcnow
from cluster.memory.access import AccessLog
from cluster.memory.cache import FactsCache, QueryCache
from cluster.memory.entities import Vocabulary, VocabularyCache, embedded_text, without_names
from cluster.memory.expansion import TermSpaces, WordVectors, expand
from cluster.memory.index import MilvusMemoryIndex, VectorHit, VectorRow
from cluster.memory.models import (
    MAX_SOURCE_IDS,
    MaintenanceReport,
    MatchExplanation,
    MemoryForget,
    MemoryForgetResult,
    MemoryHit,
    MemoryObserve,
    MemoryQuery,
    MemoryQueryResult,
    MemoryRecord,
    MemoryUpdate,
    MemoryWrite,
    MemoryWriteResult,
    ObserveResult,
    ServedMemory,
    SessionEnd,
    SessionEndResult,
    Turn,
    id_range,
    value_text,
)
from cluster.memory.neighbours import ThreadWrites, delete_versions, joined
from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.policy.lifetime import Ttl, Validity, validity_for
from cluster.memory.policy.limits import MemoryLimits
from cluster.memory.policy.promotion import (
    LoggedTurn,
    LogStatus,
    PromotionPolicy,
    PromotionReason,
    find_promotions,
    promotion_target,
    spoken,
    turn_log_id,
    write_trigger,
)
from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.policy.scope import MemoryScope
from cluster.memory.policy.state_change import state_key
from cluster.memory.policy.versions import MemoryState, MemoryValue, next_version
from cluster.memory.policy.words import described
from cluster.memory.ranking import (
    CandidateFacts,
    Candidates,
    Ranked,
    conversation_of,
    facts_of,
    needs_facts,
    plan_query,
    rank,
    read_ahead,
    stages_of,
)
from cluster.memory.repository import LoggedRow, LoggedTurnRow, NewMemory, SqlMemoryStore, StoredMemory, Visibility
from cluster.memory.tables import IndexOp
from cluster.memory.upkeep import Upkeep
from cluster.memory.word_store import SharedWordVectors
from cluster.storage.db import Database
from cluster.storage.vector_builds import record_vector_build

logger = logging.getLogger(__name__)

MAX_DENSE_CANDIDATES = 4096
M = TypeVar("M", bound=BaseModel)


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
        self.store = SqlMemoryStore(database.dialect)
        self.embedder_name = embedder_name
        self.activity = activity or ActivityPolicy()
        self.ranking = ranking or RankingPolicy()
        self.promotion = promotion or PromotionPolicy()
        self.limits = limits or MemoryLimits()
        self.cache = QueryCache(cache_bytes, cache_ttl)
        self.vocabularies = VocabularyCache()
        # Word vectors are shared through SQL under the embedder's name; without one, per process.
        self.words = SharedWordVectors(database, embedder_name) if embedder_name else None
        save = self.words.save if self.words else None
        words_by = word_embedder or embedder
        self.terms = TermSpaces(WordVectors(words_by.embed, save=save), embedder.dimension)
        self.facts = FactsCache()
        self.accesses = AccessLog(access_flush_entries, access_flush_interval)
        self._flushing = threading.Lock()
        # Each query's embedding and vector search, beside its lexical stage (see _gather). Threads
        # cost nothing idle; enough that concurrent queries of a replica do not queue here.
        self._searches = ThreadPoolExecutor(max_workers=32, thread_name_prefix="memory-search")
        self.upkeep = Upkeep(
            database,
            self.store,
            index,
            embedder,
            self.activity,
            self.accesses,
            retry_after=index_retry_after,
        )

    # ------------------------------------------------------------------------------------- write

    def write(
        self,
        owner: str,
        key: str,
        value: MemoryValue,
        scope: MemoryScope | None = None,
        ttl: Ttl | None = None,
        metadata: JsonObject | None = None,
        entity: str | None = None,
        source_ids: Sequence[str] = (),
        *,
        context: str | None = None,
        now: datetime | None = None,
    ) -> uuid.UUID:
        """Store ``value`` under ``key``; an existing key in the same scope gets a new version,
        unless the write repeats the current version (same value, metadata, entity, sources and
        lifetime): then it is done once and the current version's id comes back.

        Returns the new version's memory id. Raises ``InvalidInput`` for malformed fields and
        ``LimitExceeded`` for a value, metadata or context over its size limit.
        """
        request = _parse(
            MemoryWrite,
            key=key,
            value=value,
            scope=scope or MemoryScope(),
            ttl=ttl or Ttl(),
            metadata=metadata or {},
            entity=entity,
            source_ids=tuple(source_ids),
            context=context,
        )
        return self.apply_write(owner, request, now=now).memory_id

    def apply_write(self, owner: str, request: MemoryWrite, *, now: datetime | None = None) -> MemoryWriteResult:
        """The ``memory_write`` tool: takes and returns models."""
        return self.apply_writes(owner, [request], now=now)[0]

    def apply_writes(
        self, owner: str, requests: Sequence[MemoryWrite], *, now: datetime | None = None
    ) -> list[MemoryWriteResult]:
        """Write many memories in one unit of work with one embedding batch (bulk ingest)."""
        check_owner(owner)
        for request in requests:
            self._check(owner, request)
        return self._write_checked(owner, requests, now)

    def _write_checked(
        self, owner: str, requests: Sequence[MemoryWrite], now: datetime | None
    ) -> list[MemoryWriteResult]:
        if not requests:
            return []
        now = now or utcnow()
        validities = [validity_for(r.ttl, r.scope, now) for r in requests]
        texts = [value_text(r.value) for r in requests]
        vectors = self._embed(texts, [r.metadata for r in requests])
        with self.db.transaction() as session:
            results, rows = self._insert_versions(session, owner, requests, texts, vectors, validities, now)
        self._settle(owner, rows)
        return results

    def apply_write_batch(
        self, items: Sequence[tuple[str, MemoryWrite]], *, now: datetime | None = None
    ) -> list[MemoryWriteResult | HindsightError]:
        """Writes of concurrent callers in as few units of work as possible: one per owner.

        Returns, in order, each write's result or the error that refused it; one bad write fails
        only itself (a refused group is written again one by one, so the others still land).
        """
        results: list[MemoryWriteResult | HindsightError | None] = [None] * len(items)
        groups: dict[str, list[int]] = {}
        for i, (owner, request) in enumerate(items):
            try:
                check_owner(owner)
                self._check(owner, request)
            except HindsightError as exc:
                results[i] = exc
                continue
            groups.setdefault(owner, []).append(i)
        for owner, members in groups.items():
            try:
                written = self._write_checked(owner, [items[i][1] for i in members], now)
            except HindsightError as exc:
                if len(members) == 1:
                    results[members[0]] = exc
                    continue
                # One write the store refuses (e.g. a concurrent write of its key) must not fail the
                # rest of its group: each is written on its own.
                for i in members:
                    try:
                        results[i] = self._write_checked(owner, [items[i][1]], now)[0]
                    except HindsightError as one:
                        results[i] = one
                continue
            for i, result in zip(members, written, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _embed(self, texts: Sequence[str], metadata: Sequence[JsonObject]) -> list[list[float]]:
        """The vectors of memories with these texts and metadata (:func:`embedded_text`)."""
        return self.embedder.embed([embedded_text(t, m) for t, m in zip(texts, metadata, strict=True)])

    def _check(self, owner: str, request: MemoryWrite) -> None:
        self.limits.check(request.value, request.metadata, request.context)
        self.index.check(owner, request.scope.key, request.entity)

    def _insert_versions(
        self,
        session: Session,
        owner: str,
        requests: Sequence[MemoryWrite],
        texts: Sequence[str],
        vectors: Sequence[list[float]],
        validities: Sequence[Validity],
        now: datetime,
    ) -> tuple[list[MemoryWriteResult], list[VectorRow]]:
        """Insert the versions, supersede what they replace, queue their vectors, bump the generation."""
        # First, so concurrent writers of one owner queue on its row (Postgres) instead of racing.
        self.store.bump_generation(session, owner)
        results: list[MemoryWriteResult] = []
        rows: list[VectorRow] = []
        # What each write replaces, read up front: a key's first write in the batch replaces what is
        # stored, a later one the version written just before it.
        first = _first_of_key(requests)
        stored = [
            self.store.latest(session, owner, r.scope.key, r.key) if first[i] else None for i, r in enumerate(requests)
        ]
        # A later version says what changed, not what was said next: only a first joins its conversation.
        threads = [
            conversation_of(r.scope.session_id, described(r.metadata, r.value))
            if stored[i] is None and first[i]
            else None
            for i, r in enumerate(requests)
        ]
        neighbours = ThreadWrites(session, self.store, owner, now, threads, texts)
        for i, (request, text, vector, validity) in enumerate(zip(requests, texts, vectors, validities, strict=True)):
            previous = stored[i] if first[i] else self.store.latest(session, owner, request.scope.key, request.key)
            if previous is not None and _repeats(previous, request, validity):
                # A retried write whose answer was lost: done once, answered with what it made.
                results.append(MemoryWriteResult(memory_id=previous.record.memory_id, version=previous.record.version))
                continue
            thread = threads[i]
            derived = neighbours.context(i)
            memory_id = uuid.uuid4()
            new = NewMemory(
                memory_id=memory_id,
                lineage_id=previous.lineage_id if previous else uuid.uuid4(),
                owner=owner,
                scope=request.scope,
                key=request.key,
                version=_version(previous),
                text=text,
                value=request.value,
                metadata=request.metadata,
                entity=request.entity,
                source_ids=request.source_ids,
                context=request.context if request.context is not None else derived,
                thread=thread,
                context_derived=request.context is None and thread is not None,
                created_at=now,
                validity=validity,
                activity=self.activity.initial,
            )
            try:
                seq = self.store.insert(session, new)
            except IntegrityError as exc:
                raise Conflict(f"memory key {request.key!r} was written concurrently; retry the write") from exc
            superseded = None
            if previous is not None and previous.record.state is MemoryState.CURRENT:
                self.store.supersede(session, owner, previous.seq, memory_id, now)
                superseded = previous.record.memory_id
            results.append(MemoryWriteResult(memory_id=memory_id, version=new.version, superseded_id=superseded))
            rows.append(
                VectorRow(seq=seq, owner=owner, scope_key=request.scope.key, entity=request.entity, vector=vector)
            )
        neighbours.link()
        if rows:
            self.store.queue_index(session, owner, [r.seq for r in rows], IndexOp.UPSERT)
        return results, rows

    def update(
        self, owner: str, memory_id: uuid.UUID, value: MemoryValue, metadata: JsonObject | None = None
    ) -> MemoryWriteResult:
        """A new version of a current memory, keeping its key, scope, entity, sources and lifetime."""
        return self.apply_update(owner, _parse(MemoryUpdate, memory_id=memory_id, value=value, metadata=metadata))

    def apply_update(self, owner: str, request: MemoryUpdate, *, now: datetime | None = None) -> MemoryWriteResult:
        """The ``memory_update`` tool. Raises ``NotFound`` (unknown for this owner) or ``Conflict`` (superseded)."""
        check_owner(owner)
        now = now or utcnow()
        with self.db.read() as session:
            current = self.store.get(session, owner, request.memory_id)
        if current.record.state is not MemoryState.CURRENT:
            raise Conflict(f"memory {request.memory_id} was superseded; update the current version")
        old = current.record
        write = MemoryWrite(
            key=old.key,
            value=request.value,
            scope=old.scope,
            metadata=request.metadata if request.metadata is not None else old.metadata,
            entity=old.entity,
            source_ids=old.source_ids,
        )
        self._check(owner, write)
        validity = Validity(valid_from=old.valid_from, expires_at=old.expires_at, session_bound=current.session_bound)
        text = value_text(request.value)
        vectors = self._embed([text], [write.metadata])
        with self.db.transaction() as session:
            latest = self.store.latest(session, owner, old.scope.key, old.key)
            if latest is None or latest.record.memory_id != old.memory_id:
                raise Conflict(f"memory {request.memory_id} was superseded; update the current version")
            results, rows = self._insert_versions(session, owner, [write], [text], vectors, [validity], now)
        self._settle(owner, rows)
        return results[0]

    def forget(self, owner: str, memory_id: uuid.UUID) -> MemoryForgetResult:
        """Remove the memory and every version of its key, from SQL and from Milvus."""
        return self.apply_forget(owner, MemoryForget(memory_id=memory_id))

    def apply_forget(self, owner: str, request: MemoryForget) -> MemoryForgetResult:
        """The ``memory_forget`` tool. Raises ``NotFound`` if this owner has no such memory."""
        check_owner(owner)
        with self.db.transaction() as session:
            found = self.store.get(session, owner, request.memory_id)
            seqs = self.store.lineage_seqs(session, owner, found.lineage_id)
            removed = delete_versions(session, self.store, owner, seqs, utcnow())
            self.store.queue_index(session, owner, seqs, IndexOp.DELETE)
            self.store.bump_generation(session, owner)
        self._settle(owner, deletes=seqs)
        logger.info("forgot memory %s (%s versions)", request.memory_id, removed)
        return MemoryForgetResult(memory_id=request.memory_id, removed_versions=removed)

    def memory_id(self, owner: str, ref: str) -> uuid.UUID:
        """The id a reference names: a whole id as it is, or the one id of the owner's memories that
        starts with the reference's hex digits (``memory_update`` and ``memory_forget`` take both).
        Raises ``InvalidInput`` for a malformed or ambiguous reference, ``NotFound`` when none matches."""
        check_owner(owner)
        try:
            first, last = id_range(ref)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        if first == last:
            return first
        with self.db.read() as session:
            found = self.store.ids_between(session, owner, first, last)
        if not found:
            raise NotFound(f"no memory has an id starting {ref!r}")
        if len(found) > 1:
            raise InvalidInput(f"more than one memory has an id starting {ref!r}: send more digits, or the whole id")
        return found[0]

    def get(self, owner: str, memory_id: uuid.UUID) -> MemoryRecord:
        """One version by id, whatever its state. Raises ``NotFound``."""
        check_owner(owner)
        with self.db.read() as session:
            return self.store.get(session, owner, memory_id).record

    # ------------------------------------------------------------------------------ derived state

    def sync_index(self, owner: str | None = None) -> int:
        """Do all queued vector work (left by a Milvus failure, or by migration 0004); returns items done."""
        return self.upkeep.sync_index(check_owner(owner) if owner is not None else None)

    def flush_accesses(self) -> int:
        """Write the accesses this process's queries recorded; returns how many."""
        return self.upkeep.flush_accesses()

    def _settle(self, owner: str, upserts: Sequence[VectorRow] = (), deletes: Sequence[int] = ()) -> None:
        # Upserts here are always new versions from _insert_versions: seqs drawn in the commit just made.
        self.upkeep.settle(owner, upserts, deletes, fresh=True)

    # ------------------------------------------------------------------------------------- query

    def query(
        self,
        owner: str,
        query: str,
        entity: str | None = None,
        scope: MemoryScope | None = None,
        top_k: int = 5,
        include_history: bool = False,
        as_of: datetime | None = None,
        *,
        now: datetime | None = None,
    ) -> MemoryQueryResult:
        """Entity filter → temporal filter → dense + lexical ranking, fused → top-k."""
        request = _parse(
            MemoryQuery,
            query=query,
            entity=entity,
            scope=scope,
            top_k=top_k,
            include_history=include_history,
            as_of=as_of,
        )
        return self.run_query(owner, request, now=now)

    def run_query(
        self,
        owner: str,
        request: MemoryQuery,
        *,
        now: datetime | None = None,
    ) -> MemoryQueryResult:
        """The ``memory_query`` tool: takes and returns models. A read-only unit of work."""
        check_owner(owner)
        now = now or utcnow()
        cache_key = request.model_dump_json()
        vis = self._visibility(request, now)
        with self.db.read() as session:
            # The generation and the query read one snapshot, so an entry is never staler than its tag.
            generation = self.store.generation(session, owner)
            cached = self.cache.get(owner, cache_key, generation, now)
            if cached is not None:
                return cached.model_copy(update={"cached": True})
            found = self._gather(session, owner, request, vis, now, generation=generation, all_facts=False)
            top = rank(list(found.dense), list(found.lexical), found.facts, found.plan, self.ranking, request.top_k)
            # Full records only for what is returned: building them is the costly part.
            rows = self.store.visible(session, owner, [r.seq for r in top], vis)
        top = [r for r in top if r.seq in rows]
        hits = self._explain(owner, top, rows, found.dense, found.lexical, vis, now)
        expansions = tuple(w for w, _ in found.plan.expansions)
        candidates = len(found.dense.keys() | found.lexical.keys())
        result = MemoryQueryResult(
            memories=tuple(ServedMemory.of(h) for h in hits),
            hits=tuple(hits),
            candidates=candidates,
            expansions=expansions,
        )
        self.cache.put(owner, cache_key, generation, result, now)
        self.accesses.add(owner, [r.seq for r in top], now)
        if self.accesses.due(now) and self._flushing.acquire(blocking=False):
            # Off the query path: writing 1000 accesses takes ~70 ms, and may queue behind a writer.
            threading.Thread(target=self._flush_in_background, name="memory-accesses", daemon=True).start()
        return result

    def _flush_in_background(self) -> None:
        try:
            self.flush_accesses()
        finally:
            self._flushing.release()

    @staticmethod
    def _visibility(request: MemoryQuery, now: datetime) -> Visibility:
        return Visibility(
            valid_at=request.valid_at or request.as_of or now,
            entity=request.entity,
            scope_key=request.scope.key if request.scope else None,
            include_history=request.include_history,
            as_of=request.as_of,
        )

    def _search(self, owner: str, query: str, vis: Visibility) -> tuple[Sequence[float], list[VectorHit]]:
        """The query's vector and its first ``candidates`` neighbours."""
        vector = self.embedder.embed([query])[0]
        found = self.index.search(owner, vector, self.ranking.candidates, entity=vis.entity, scope_key=vis.scope_key)
        return vector, found

    def _dense(
        self, session: Session, owner: str, vector: Sequence[float], found: list[VectorHit], vis: Visibility
    ) -> dict[int, float]:
        """Vector candidates that pass the SQL filters, best first (seq -> cosine similarity).

        ``found`` is the first search's answer. Milvus filters by owner, entity and scope; version,
        archive and validity live in SQL, so ask for more when too many candidates were filtered out.
        """
        want = self.ranking.candidates
        limit = want
        while True:
            keep = self.store.visible_seqs(session, owner, [h.seq for h in found], vis)
            dense = [(h.seq, h.similarity) for h in found if h.seq in keep]
            if len(dense) >= want or len(found) < limit or limit >= MAX_DENSE_CANDIDATES:
                return dict(dense[:want])
            limit = min(limit * 4, MAX_DENSE_CANDIDATES)
            found = self.index.search(owner, vector, limit, entity=vis.entity, scope_key=vis.scope_key)

    def candidates(self, owner: str, request: MemoryQuery, *, now: datetime | None = None) -> Candidates:
        """What the ranking stages of :meth:`run_query` start from, every candidate's facts included.

        For tuning a ``RankingPolicy`` offline: ``ranking.rank(...)`` over these gives the order
        ``run_query`` would return under that policy (the lexical query depends on
        ``entity_terms_lexical`` and the lists on ``candidates``: those two are this service's).
        """
        check_owner(owner)
        now = now or utcnow()
        vis = self._visibility(request, now)
        with self.db.read() as session:
            return self._gather(session, owner, request, vis, now, generation=None, all_facts=True)

    def _gather(
        self,
        session: Session,
        owner: str,
        request: MemoryQuery,
        vis: Visibility,
        now: datetime,
        *,
        generation: int | None,
        all_facts: bool,
    ) -> Candidates:
        """Plan the query (entities, times), run the dense and lexical rankings, read the facts stages need.

        The embedding and the vector search run on another thread while this one plans the query,
        runs the lexical stage and reads the lexical candidates' facts (their time expressions
        parsed, when the query asks about time): both threads wait outside the GIL (the model,
        Milvus' gRPC call, SQLite), so none of that adds latency.
        """
        policy = self.ranking
        searching = self._searches.submit(self._search, owner, request.query, vis)
        vocabulary = self.vocabularies.vocabulary(
            owner, lambda after: self.store.entity_names(session, owner, after), generation
        )
        plan = plan_query(request.query, vocabulary, (request.as_of or now).date())
        if policy.expansion_weight > 0:
            plan = plan.model_copy(
                update={"expansions": self._expansions(session, owner, request.query, vocabulary, generation)}
            )
        words = request.query if policy.entity_terms_lexical else without_names(request.query, plan.entities)
        hits = self.store.lexical(
            session, owner, words, vis, policy.candidates, common_term_docs=policy.common_term_docs
        )
        lexical = {h.seq: h.score for h in hits}
        wanted = all_facts or needs_facts(plan, policy)
        facts: dict[int, CandidateFacts] = {}
        if wanted:
            facts = self._facts(session, owner, list(lexical))
            read_ahead(facts.values(), plan)
        dense = self._dense(session, owner, *searching.result(), vis)
        if wanted:
            facts.update(self._facts(session, owner, [s for s in dense if s not in facts]))
        return Candidates(dense=dense, lexical=lexical, facts=facts, plan=plan)

    def _expansions(
        self, session: Session, owner: str, query: str, vocabulary: Vocabulary, generation: int | None
    ) -> tuple[tuple[str, float], ...]:
        """The owner's words that stand in for the query's (see :mod:`cluster.memory.expansion`)."""
        policy = self.ranking
        words = self.words
        read = (lambda found: words.read(session, found)) if words else None
        space = self.terms.space(
            owner, lambda after: self.store.texts_after(session, owner, after), generation, read=read
        )
        return expand(
            query,
            space,
            self.terms.vectors,
            per_word=policy.expansion_per_word,
            min_similarity=policy.expansion_similarity,
            names=vocabulary.words,
            present=lambda candidates: self.store.held_words(session, owner, candidates),
            read=read,
        )

    def _facts(self, session: Session, owner: str, seqs: list[int]) -> dict[int, CandidateFacts]:
        """The candidates' ranking facts: from the process's facts cache, the rest read (and kept)."""
        facts, missing = self.facts.split(owner, seqs)
        if missing:
            read = [
                facts_of(
                    row.seq, row.entity, described(row.metadata, row.data), row.text, row.session_id, row.valid_from
                )
                for row in self.store.candidate_facts(session, owner, missing)
            ]
            self.facts.add(owner, read)
            facts.update((f.seq, f) for f in read)
        return facts

    def _explain(
        self,
        owner: str,
        top: list[Ranked],
        rows: dict[int, StoredMemory],
        dense: dict[int, float],
        lexical: dict[int, float],
        vis: Visibility,
        now: datetime,
    ) -> list[MemoryHit]:
        dense_rank = {seq: i for i, seq in enumerate(dense, start=1)}
        lexical_rank = {seq: i for i, seq in enumerate(lexical, start=1)}
        hits = []
        for ranked in top:
            seq = ranked.seq
            stored = rows[seq]
            why = MatchExplanation(
                entity=vis.entity,
                valid_at=vis.valid_at,
                dense_similarity=dense.get(seq),
                dense_rank=dense_rank.get(seq),
                lexical_score=lexical.get(seq),
                lexical_rank=lexical_rank.get(seq),
                expanded=ranked.expanded,
                fused=ranked.fused,
                entities=ranked.entities,
                time=ranked.time,
                session_bonus=ranked.session_bonus,
                stages=stages_of(ranked, seq in dense, seq in lexical),
                activity=self.accesses.activity(self.activity, owner, seq, stored.activity, stored.activity_at, now),
            )
            hits.append(MemoryHit(memory=stored.record, score=ranked.score, why=why))
        return hits

    # ---------------------------------------------------------------------- raw log and promotion

    def observe(self, owner: str, session_id: str, turn: Turn, *, now: datetime | None = None) -> ObserveResult:
        """Log a raw interaction (cheap). A turn that asks to be remembered, or reports a state
        change, is stored at once by rule; everything else waits for :meth:`reevaluate`."""
        return self.apply_observe(owner, _parse(MemoryObserve, session_id=session_id, turn=turn), now=now)

    def apply_observe(self, owner: str, request: MemoryObserve, *, now: datetime | None = None) -> ObserveResult:
        """The ``memory_observe`` tool.

        Retry-safe: a turn already logged (same session, speaker, text and ``at``) is not logged or
        stored again; the answer names what the first call stored (``repeated``).
        """
        check_owner(owner)
        session_id, turn = request.session_id, request.turn
        # A logged turn may become a memory value later: it must fit one.
        self.limits.check(spoken(turn.speaker, turn.text), turn.metadata)
        now = now or utcnow()
        log_id = turn_log_id(owner, session_id, turn.speaker, turn.text, turn.at)
        with self.db.read() as session:
            earlier = self.store.logged(session, owner, log_id)
        if earlier is not None:
            return self._repeated(owner, earlier)
        log = LoggedTurnRow(
            log_id=log_id,
            owner=owner,
            session_id=session_id,
            speaker=turn.speaker,
            text=turn.text,
            at=as_utc(turn.at) if turn.at is not None else now,
            metadata=turn.metadata,
            status=LogStatus.PENDING,
        )
        try:
            return self._log(owner, log, now)
        except (IntegrityError, Conflict):
            # The same turn sent twice at once: the other call logged it first.
            with self.db.read() as session:
                earlier = self.store.logged(session, owner, log_id)
            if earlier is None:
                raise
            return self._repeated(owner, earlier)

    def _log(self, owner: str, log: LoggedTurnRow, now: datetime) -> ObserveResult:
        reason = write_trigger(log.text)
        if reason is None:
            with self.db.transaction() as session:
                self.store.log(session, log)
            return ObserveResult(log_id=log.log_id)
        request = self._promoted_write(log, reason, ())
        self._check(owner, request)
        with self.db.read() as session:
            request = self._in_its_session(session, owner, request, log, None)
        text = value_text(request.value)
        vectors = self._embed([text], [request.metadata])
        validity = validity_for(request.ttl, request.scope, now)
        with self.db.transaction() as session:
            results, rows = self._insert_versions(session, owner, [request], [text], vectors, [validity], now)
            promoted = {"status": LogStatus.PROMOTED, "memory_id": results[0].memory_id, "evaluated_at": now}
            self.store.log(session, log.model_copy(update=promoted))
        self._settle(owner, rows)
        return ObserveResult(log_id=log.log_id, promoted=results[0], reason=reason, key=request.key)

    def _repeated(self, owner: str, earlier: LoggedTurnRow) -> ObserveResult:
        """The answer to a turn logged before: what its first call stored, if that still exists."""
        if earlier.memory_id is None:
            return ObserveResult(log_id=earlier.log_id, repeated=True)
        try:
            with self.db.read() as session:
                record = self.store.get(session, owner, earlier.memory_id).record
        except NotFound:  # forgotten since
            return ObserveResult(log_id=earlier.log_id, repeated=True)
        # A version's metadata never changes (an update writes a new version), so the rule's name is there.
        return ObserveResult(
            log_id=earlier.log_id,
            promoted=MemoryWriteResult(memory_id=record.memory_id, version=record.version),
            reason=PromotionReason(str(record.metadata["promoted"])),
            key=record.key,
            repeated=True,
        )

    @staticmethod
    def _promoted_write(
        log: LoggedTurnRow | LoggedRow, reason: PromotionReason, referenced_by: Sequence[uuid.UUID]
    ) -> MemoryWrite:
        """The memory a promoted turn becomes: who said it and what was said ("Caroline: I moved to
        Berlin"), keyed by what it changed when it is a state change (so the next change of the same
        thing supersedes it), else by the turn.

        Its provenance is the turn and the earliest of the later turns that referred to it: a turn
        a whole conversation keeps coming back to may have more references than a memory holds.
        """
        scope, ttl = promotion_target(reason, log.session_id)
        meta: dict[str, Any] = {
            **log.metadata,
            "speaker": log.speaker,
            "session_id": log.session_id,
            # The day the memory speaks of is the day it was said, not the day it was promoted
            # (a date the turn's own metadata holds still comes first: see ``memory_date``).
            "said_at": as_utc(log.at).isoformat(),
            "promoted": reason.value,
        }
        key = state_key(log.text, log.speaker) if reason is not PromotionReason.REFERENCED_LATER else None
        return MemoryWrite(
            key=key or f"turn:{log.log_id}",
            value=spoken(log.speaker, log.text),
            scope=scope,
            ttl=ttl,
            metadata=meta,
            source_ids=(str(log.log_id), *(str(r) for r in referenced_by[: MAX_SOURCE_IDS - 1])),
        )

    def _in_its_session(
        self, session: Session, owner: str, request: MemoryWrite, log: LoggedTurnRow | LoggedRow, seq: int | None
    ) -> MemoryWrite:
        """A promoted turn searched with the turns logged just before and after it in its session.

        A written memory of a conversation gets the memories told beside it as context; a promoted
        turn's memories are only the turns promoted too, while the log has every turn (the question it
        answers, the reply it got). It is the service's own context, as a derived one is, so the
        writer's context limit does not apply (each neighbour is cut to ``NEIGHBOUR_CHARS``).
        """
        before, after = (
            self.store.logged_beside(session, owner, log.session_id, log.at, seq, after=side) for side in (False, True)
        )
        context = joined(before, after)
        return request if context is None else request.model_copy(update={"context": context})

    def reevaluate(self, owner: str | None = None, *, now: datetime | None = None) -> MaintenanceReport:
        """The delayed promotion job: promote logged turns that later turns referred back to.

        Runs off the agent's path (a scheduler or the CLI calls it); ``observe`` never waits for it.
        A turn stays pending until promoted or until its horizon has passed without references.
        """
        now = now or utcnow()
        if owner is None:
            with self.db.read() as session:
                owners = self.store.log_owners(session)
        else:
            owners = [check_owner(owner)]
        scanned = 0
        promoted: list[uuid.UUID] = []
        failed: list[str] = []
        for who in owners:
            # Rules read free text: an owner whose turns break one must not stop the others' promotion.
            try:
                pending, stored = self._reevaluate_owner(who, now)
            except (StoreUnavailable, OperationalError):
                raise  # a store (or the embedder) is down for every owner: nothing to isolate
            except Exception:
                logger.exception("re-evaluation of owner %r failed; its turns stay pending", who)
                failed.append(who)
                continue
            scanned += pending
            promoted.extend(stored)
        logger.info("re-evaluation scanned %s pending turns, promoted %s", scanned, len(promoted))
        return MaintenanceReport(
            scanned=scanned, changed=len(promoted), memory_ids=tuple(promoted), failed_owners=tuple(failed)
        )

    def _reevaluate_owner(self, who: str, now: datetime) -> tuple[int, list[uuid.UUID]]:
        """Promote one owner's pending turns; returns how many were pending and the memories stored."""
        requests: list[MemoryWrite] = []
        with self.db.read() as session:
            logged = self.store.log_since(session, who)
            pending = {r.log_id: r for r in logged if r.status is LogStatus.PENDING}
            turns = [
                LoggedTurn(log_id=r.log_id, session_id=r.session_id, speaker=r.speaker, text=r.text, at=r.at)
                for r in logged
            ]
            decisions = [p for p in find_promotions(turns, self.promotion) if p.log_id in pending]
            # The promoted turns' neighbours from the same snapshot of the log.
            for decision in decisions:
                row = pending[decision.log_id]
                write = self._promoted_write(row, decision.reason, decision.referenced_by)
                requests.append(self._in_its_session(session, who, write, row, row.seq))
        texts = [value_text(r.value) for r in requests]
        vectors = self._embed(texts, [r.metadata for r in requests]) if texts else []
        validities = [validity_for(r.ttl, r.scope, now) for r in requests]
        with self.db.transaction() as session:
            results, rows = self._insert_versions(session, who, requests, texts, vectors, validities, now)
            for decision, result in zip(decisions, results, strict=True):
                self.store.mark_log(session, who, decision.log_id, LogStatus.PROMOTED, now, result.memory_id)
            decided = {d.log_id for d in decisions}
            for log_id, row in pending.items():
                if log_id not in decided and now - row.at > self.promotion.horizon:
                    self.store.mark_log(session, who, log_id, LogStatus.KEPT, now, None)
        self._settle(who, rows)
        return len(pending), [r.memory_id for r in results]

    # ------------------------------------------------------------------------------- maintenance

    def _owners(self, owner: str | None) -> list[str]:
        if owner is not None:
            return [check_owner(owner)]
        with self.db.read() as session:
            return self.store.owners(session)

    def decay_and_archive(self, now: datetime | None = None, *, owner: str | None = None) -> MaintenanceReport:
        """Archive current memories whose decayed activity fell below the threshold."""
        now = now or utcnow()
        self.flush_accesses()  # the decision must count the accesses queries recorded
        cutoff = self.activity.archive_candidates_before(now)
        scanned = 0
        archived: list[uuid.UUID] = []
        for who in self._owners(owner):
            with self.db.transaction() as session:
                stale = self.store.stale(session, who, cutoff)
                scanned += len(stale)
                gone = [m for m in stale if self.activity.should_archive(m.activity, m.activity_at, now)]
                if gone:
                    self.store.set_archived(session, who, [m.seq for m in gone], now)
                    self.store.bump_generation(session, who)
            archived.extend(m.record.memory_id for m in gone)
        return MaintenanceReport(scanned=scanned, changed=len(archived), memory_ids=tuple(archived))

    def restore(self, owner: str, memory_id: uuid.UUID, *, now: datetime | None = None) -> MemoryRecord:
        """Bring an archived memory back, with fresh activity. Raises ``NotFound``."""
        check_owner(owner)
        now = now or utcnow()
        with self.db.transaction() as session:
            found = self.store.get(session, owner, memory_id)
            self.store.restore(session, owner, found.seq, self.activity.initial, now)
            self.store.bump_generation(session, owner)
        return found.record.model_copy(update={"archived": False})

    def end_session(self, owner: str, session_id: str, *, now: datetime | None = None) -> SessionEndResult:
        """Expire the memories whose lifetime was bound to this session. Ending it again changes nothing."""
        return self.apply_end_session(owner, _parse(SessionEnd, session_id=session_id), now=now)

    def apply_end_session(self, owner: str, request: SessionEnd, *, now: datetime | None = None) -> SessionEndResult:
        """The ``memory_end_session`` tool."""
        check_owner(owner)
        now = now or utcnow()
        with self.db.transaction() as session:
            versions = self.store.end_session(session, owner, request.session_id, now)
            if versions:
                self.store.bump_generation(session, owner)
        # Superseded versions expire too (history queries must not show them), but only current ones count.
        expired = sum(1 for state in versions if state is MemoryState.CURRENT)
        logger.info("ended session %s: %s memories expired", request.session_id, expired)
        return SessionEndResult(session_id=request.session_id, expired=expired)

    def purge_expired(self, now: datetime | None = None, *, owner: str | None = None) -> MaintenanceReport:
        """Delete expired memories (every version) from SQL and Milvus."""
        now = now or utcnow()
        removed = 0
        for who in self._owners(owner):
            with self.db.transaction() as session:
                seqs = self.store.expired_seqs(session, who, now)
                if seqs:
                    removed += delete_versions(session, self.store, who, seqs, now)
                    self.store.queue_index(session, who, seqs, IndexOp.DELETE)
                    self.store.bump_generation(session, who)
            self._settle(who, deletes=seqs)
        return MaintenanceReport(scanned=removed, changed=removed)

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
        owners = [owner] if owner is not None else sorted(self.index.owners() | set(self._owners(None)))
        for who in owners:
            started = utcnow()
            after = -1
            while True:
                with self.db.read() as session:
                    page = self.store.all_rows(session, who, after, batch_size)
                if not page:
                    break
                vectors = self._embed([m.text for m in page], [m.record.metadata for m in page])
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
                kept = self.store.seqs(session, who)
            self.index.delete(who, sorted(indexed - kept))
            with self.db.transaction() as session:
                # Work queued well before this pass read the rows is done. Younger work may still be
                # in flight in its writer: it stays queued, retried like any other (idempotent).
                self.store.clear_queue(session, who, before=started - self.upkeep.retry_after)
                self.store.bump_generation(session, who)
        if owner is None and self.embedder_name is not None:
            record_vector_build(self.db, self.index.collection, self.embedder_name)
        if owner is None and self.words is not None:
            # Every vector is this embedder's now; words another one embedded are never read again.
            self.words.drop_others()
        logger.info("reindexed %s memory vectors", written)
        return written


def _repeats(previous: StoredMemory, request: MemoryWrite, validity: Validity) -> bool:
    """Whether a write says again exactly what the current version says, for the same lifetime.

    Then it is a repeat (typically a retry after a lost answer), not a new version. A window
    counted from the write (``seconds`` without ``valid_from``) starts anew, so it is a renewal.
    """
    old = previous.record
    return (
        old.state is MemoryState.CURRENT
        and not old.archived
        and old.value == request.value
        and old.metadata == request.metadata
        and old.entity == request.entity
        and old.source_ids == request.source_ids
        and previous.session_bound == validity.session_bound
        and old.expires_at == validity.expires_at
        and (validity.expires_at is None or old.valid_from == validity.valid_from)
    )


def _first_of_key(requests: Sequence[MemoryWrite]) -> list[bool]:
    """Per write, whether it is the batch's first write of its scope and key."""
    seen: set[tuple[str, str]] = set()
    first = []
    for request in requests:
        name = (request.scope.key, request.key)
        first.append(name not in seen)
        seen.add(name)
    return first


def _version(previous: StoredMemory | None) -> int:
    return next_version(previous.record.version if previous else None)


def _parse(model: type[M], **fields: Any) -> M:
    """Build a request model, turning validation errors into ``InvalidInput``."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise InvalidInput(str(exc)) from exc
