"""The query pipeline of long-term memory: gather the candidates, rank them, explain the best.

A query is a read-only unit of work (``Database.read()``): it never waits for SQLite's writer. It
reads the owner's generation first, in the same snapshot, so the result cache (keyed by it) never
serves an answer staler than its tag. Then:

1. plan: the entities, times and "when" the query names (:func:`~cluster.memory.ranking.plan_query`),
   and the owner's words that stand in for its words (:mod:`cluster.memory.expansion`);
2. gather: the dense candidates (embedding and Milvus, on another thread) beside the lexical ones
   (SQL full-text), both filtered by owner, entity, scope, validity and version; and, when a
   ranking stage will read them, the candidates' facts (:class:`~cluster.memory.ranking.CandidateFacts`);
3. rank: the registered stages in order (:mod:`cluster.memory.ranking`, pure), and read the best few whole;
4. explain each from what every stage says of it, and note the accesses (written later, in
   batches: :mod:`cluster.memory.access`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial

from cluster.core.owner import check_owner
from cluster.core.ports import Embedder
from cluster.core.types import utcnow
from cluster.memory.cache import FactsCache, QueryCache
from cluster.memory.derived import DerivedState
from cluster.memory.entities import Vocabulary, VocabularyCache, without_names
from cluster.memory.expansion import TermSpaces, expand, words_of
from cluster.memory.index import MilvusMemoryIndex, VectorHit
from cluster.memory.models import MatchExplanation, MemoryHit, MemoryQuery, MemoryQueryResult, ServedMemory
from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.policy.ranking import RankingPolicy
from cluster.memory.policy.words import described
from cluster.memory.ranking.facts import CandidateFacts, facts_of
from cluster.memory.ranking.pipeline import Candidates, Ranked, Ranking, needs_facts, rank, read_ahead
from cluster.memory.ranking.plan import plan_query
from cluster.memory.repository.rows import StoredMemory
from cluster.memory.repository.search import Search, Visibility
from cluster.memory.word_store import SharedWordVectors
from cluster.storage.db import Database

logger = logging.getLogger(__name__)

#: Milvus is asked for at most this many neighbours when SQL's filters drop too many of the first ones.
MAX_DENSE_CANDIDATES = 4096


class Queries:
    """The query part of the memory service (see :class:`~cluster.memory.service.MemoryService`).

    It keeps what a process may keep between queries, each checked against SQL before use: the
    results (:class:`~cluster.memory.cache.QueryCache`), the owners' entity vocabularies and
    expansion term spaces (grown when the owner's generation moved), and candidates' facts (which
    never change).
    """

    def __init__(
        self,
        database: Database,
        embedder: Embedder,
        index: MilvusMemoryIndex,
        derived: DerivedState,
        *,
        ranking: RankingPolicy,
        activity: ActivityPolicy,
        cache: QueryCache,
        terms: TermSpaces,
        words: SharedWordVectors | None,
    ) -> None:
        self.db = database
        self.embedder = embedder
        self.index = index
        self.derived = derived
        self.ranking = ranking
        self.activity = activity
        self.cache = cache
        self.terms = terms
        self.words = words
        self.vocabularies = VocabularyCache()
        self.facts = FactsCache()
        self._flushing = threading.Lock()
        # Each query's embedding and vector search, beside its lexical stage (see _gather). Threads
        # cost nothing idle; enough that concurrent queries of a replica do not queue here.
        self._searches = ThreadPoolExecutor(max_workers=32, thread_name_prefix="memory-search")

    def run(
        self, owner: str, request: MemoryQuery, *, now: datetime | None = None, record_access: bool = True
    ) -> MemoryQueryResult:
        """Entity filter → temporal filter → dense + lexical ranking, fused → the later stages → top-k.

        ``record_access`` False: a look that is no use of the memories (the console) leaves their activity as it was.
        """
        check_owner(owner)
        now = now or utcnow()
        cache_key = request.model_dump_json()
        vis = _visibility(request, now)
        with self.db.read() as session:
            search = Search(session, owner, self.db.dialect)
            # The generation and the query read one snapshot, so an entry is never staler than its tag.
            generation = search.generation()
            cached = self.cache.get(owner, cache_key, generation, now)
            if cached is not None:
                return cached.model_copy(update={"cached": True})
            found = self._gather(search, request, vis, now, generation=generation, all_facts=False)
            ranking = rank(found, self.ranking, request.top_k)
            # Full records only for what is returned: building them is the costly part.
            rows = search.visible([r.seq for r in ranking.top], vis)
            # What the dense stage could not see yet (bulk writes still being indexed), in the same snapshot.
            unindexed, _ = search.unindexed()
        top = [r for r in ranking.top if r.seq in rows]
        hits = self._explain(owner, ranking, top, rows, vis, now)
        result = MemoryQueryResult(
            memories=tuple(ServedMemory.of(h) for h in hits),
            hits=tuple(hits),
            candidates=found.count(),
            expansions=tuple(w for w, _ in found.plan.expansions),
            unindexed=unindexed,
        )
        self.cache.put(owner, cache_key, generation, result, now)
        if not record_access:
            return result
        accesses = self.derived.accesses
        accesses.add(owner, [r.seq for r in top], now)
        if accesses.due(now) and self._flushing.acquire(blocking=False):
            # Off the query path: writing 1000 accesses takes ~70 ms, and may queue behind a writer.
            threading.Thread(target=self._flush_in_background, name="memory-accesses", daemon=True).start()
        return result

    def candidates(self, owner: str, request: MemoryQuery, *, now: datetime | None = None) -> Candidates:
        """What the ranking stages of :meth:`run` start from, every candidate's facts included.

        For tuning a ``RankingPolicy`` offline: :func:`~cluster.memory.ranking.rank` over these gives the order
        :meth:`run` would return under that policy (the lexical query depends on
        ``entity_terms_lexical`` and the lists on ``candidates``: those two are this service's).
        """
        check_owner(owner)
        now = now or utcnow()
        vis = _visibility(request, now)
        with self.db.read() as session:
            return self._gather(
                Search(session, owner, self.db.dialect), request, vis, now, generation=None, all_facts=True
            )

    def prepare(self, owner: str) -> None:
        """Bring what the owner's next query reads of this process up to its latest writes: its entity
        vocabulary and its expansion term space, with the vectors of the words it has not seen yet.

        Called once writes are acknowledged, so the first query after a burst of writes does not
        embed their thousands of new words itself (seconds for a few hundred chat turns). The words'
        vectors go to the shared word store too, for the other processes' first queries. The writes
        are stored already: a failure here is logged, and the next query does the same work itself.
        """
        try:
            self._prepare(owner)
        except Exception:
            logger.exception("could not prepare the next query of owner %r; it will do so itself", owner)

    def _prepare(self, owner: str) -> None:
        with self.db.read() as session:
            search = Search(session, owner, self.db.dialect)
            generation = search.generation()
            self.vocabularies.vocabulary(owner, search.entity_names, generation)
            if self.ranking.expansion_weight > 0:
                read = partial(self.words.read, session) if self.words else None
                self.terms.space(owner, search.texts_after, generation, read=read)

    def store_words(self, texts: Sequence[str]) -> None:
        """Store the vectors of the words of ``texts`` that no process has stored yet (embedded here),
        and wait until they are written: a term space takes a memory's words once its vector is made,
        and reads their vectors instead of embedding them."""
        if self.words is None or self.ranking.expansion_weight <= 0:
            return
        with self.db.read() as session:
            self.terms.vectors.get(words_of(texts), partial(self.words.read, session))
        self.words.wait()

    def _flush_in_background(self) -> None:
        try:
            self.derived.flush_accesses()
        finally:
            self._flushing.release()

    # ------------------------------------------------------------------------------------ gather

    def _gather(
        self,
        search: Search,
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
        owner = search.owner
        searching = self._searches.submit(self._search, owner, request.query, vis)
        vocabulary = self.vocabularies.vocabulary(owner, search.entity_names, generation)
        plan = plan_query(request.query, vocabulary, (request.now or request.as_of or now).date())
        if policy.expansion_weight > 0:
            plan = plan.model_copy(
                update={"expansions": self._expansions(search, request.query, vocabulary, generation)}
            )
        words = request.query if policy.entity_terms_lexical else without_names(request.query, plan.entities)
        hits = search.lexical(words, vis, policy.candidates, common_term_docs=policy.common_term_docs)
        lexical = {h.seq: h.score for h in hits}
        wanted = all_facts or needs_facts(plan, policy)
        facts: dict[int, CandidateFacts] = {}
        if wanted:
            facts = self._facts(search, list(lexical))
            read_ahead(facts.values(), plan)
        dense = self._dense(search, *searching.result(), vis)
        if wanted:
            facts.update(self._facts(search, [s for s in dense if s not in facts]))
        return Candidates(found={"dense": dense, "lexical": lexical}, facts=facts, plan=plan)

    def _search(self, owner: str, query: str, vis: Visibility) -> tuple[Sequence[float], list[VectorHit]]:
        """The query's vector and its first ``candidates`` neighbours."""
        vector = self.embedder.embed([query])[0]
        found = self.index.search(owner, vector, self.ranking.candidates, entity=vis.entity, scope_key=vis.scope_key)
        return vector, found

    def _dense(
        self, search: Search, vector: Sequence[float], found: list[VectorHit], vis: Visibility
    ) -> dict[int, float]:
        """Vector candidates that pass the SQL filters, best first (seq -> cosine similarity).

        ``found`` is the first search's answer. Milvus filters by owner, entity and scope; version,
        archive and validity live in SQL, so ask for more when too many candidates were filtered out.
        """
        want = self.ranking.candidates
        limit = want
        while True:
            keep = search.visible_seqs([h.seq for h in found], vis)
            dense = [(h.seq, h.similarity) for h in found if h.seq in keep]
            if len(dense) >= want or len(found) < limit or limit >= MAX_DENSE_CANDIDATES:
                return dict(dense[:want])
            limit = min(limit * 4, MAX_DENSE_CANDIDATES)
            found = self.index.search(search.owner, vector, limit, entity=vis.entity, scope_key=vis.scope_key)

    def _expansions(
        self, search: Search, query: str, vocabulary: Vocabulary, generation: int | None
    ) -> tuple[tuple[str, float], ...]:
        """The owner's words that stand in for the query's (see :mod:`cluster.memory.expansion`)."""
        policy = self.ranking
        read = partial(self.words.read, search.session) if self.words else None
        space = self.terms.space(search.owner, search.texts_after, generation, read=read)
        return expand(
            query,
            space,
            self.terms.vectors,
            per_word=policy.expansion_per_word,
            min_similarity=policy.expansion_similarity,
            names=vocabulary.words,
            present=search.held_words,
            read=read,
        )

    def _facts(self, search: Search, seqs: list[int]) -> dict[int, CandidateFacts]:
        """The candidates' ranking facts: from the process's facts cache, the rest read (and kept)."""
        facts, missing = self.facts.split(search.owner, seqs)
        if missing:
            read = [
                facts_of(
                    row.seq, row.entity, described(row.metadata, row.data), row.text, row.session_id, row.valid_from
                )
                for row in search.candidate_facts(missing)
            ]
            self.facts.add(search.owner, read)
            facts.update((f.seq, f) for f in read)
        return facts

    # ----------------------------------------------------------------------------------- explain

    def _explain(
        self,
        owner: str,
        ranking: Ranking,
        top: list[Ranked],
        rows: dict[int, StoredMemory],
        vis: Visibility,
        now: datetime,
    ) -> list[MemoryHit]:
        """Each returned memory with why it matched: the filters it passed, what every ranking stage
        said of it, and its activity now."""
        accesses = self.derived.accesses
        hits = []
        for ranked in top:
            stored = rows[ranked.seq]
            activity = accesses.activity(self.activity, owner, ranked.seq, stored.activity, stored.activity_at, now)
            why = MatchExplanation.model_validate(
                {"entity": vis.entity, "valid_at": vis.valid_at, "activity": activity, **ranking.explain(ranked.seq)}
            )
            hits.append(MemoryHit(memory=stored.record, score=ranked.score, why=why))
        return hits


def _visibility(request: MemoryQuery, now: datetime) -> Visibility:
    return Visibility(
        valid_at=request.valid_at or request.as_of or now,
        entity=request.entity,
        scope_key=request.scope.key if request.scope else None,
        include_history=request.include_history,
        as_of=request.as_of,
    )
