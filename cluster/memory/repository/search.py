"""What a memory query reads of one owner's memories: which versions it may see, the full-text
ranking (FTS5 on SQLite, ``tsvector`` on Postgres), the names and words its ranking stages need, and
the candidates' facts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import func, literal_column, select, text
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Session

from cluster.core.types import Frozen
from cluster.memory import statements
from cluster.memory.entities import SQUASHED_ENTITY_KEYS, is_entity_key
from cluster.memory.policy.words import terms
from cluster.memory.repository.rows import StoredMemory, run, stored
from cluster.memory.statements import CONTEXT_WEIGHT, KEY_WEIGHT, TEXT_WEIGHT
from cluster.memory.tables import FTS_TABLE, PG_SEARCH_DOC, MemoryRow


class Visibility(Frozen):
    """Which versions a read may see: the entity and temporal filters plus version and archive state."""

    valid_at: datetime
    entity: str | None = None
    scope_key: str | None = None
    include_history: bool = False
    as_of: datetime | None = None


class CandidateRow(NamedTuple):
    """The fields of a ranking candidate that the entity, temporal and session stages read.

    A tuple, not a model: a query reads about a hundred of them.
    """

    seq: int
    entity: str | None
    metadata: dict[str, Any]
    text: str
    session_id: str | None
    valid_from: datetime
    data: dict[str, Any] | None  # the value, when it is a JSON object (its fields count as metadata)


class LexicalHit(NamedTuple):
    seq: int
    score: float  # higher is more relevant


class Search:
    """One owner's memories as one query reads them, in one read-only unit of work."""

    def __init__(self, session: Session, owner: str, dialect: str) -> None:
        self.session = session
        self.owner = owner
        self.dialect = dialect

    def generation(self) -> int:
        """The owner's current generation (0 before the first change): a primary-key lookup."""
        found = run(self.session, statements.generation(), {"owner": self.owner}).scalar()
        return int(found or 0)

    def _bound(self, vis: Visibility) -> tuple[statements.Shape, dict[str, Any]]:
        return statements.shape_and_params(
            self.owner,
            valid_at=vis.valid_at,
            entity=vis.entity,
            scope_key=vis.scope_key,
            as_of=vis.as_of,
            include_history=vis.include_history,
        )

    def visible(self, seqs: Iterable[int], vis: Visibility) -> dict[int, StoredMemory]:
        """Those of ``seqs`` that pass the filters, by seq."""
        wanted = list(dict.fromkeys(seqs))
        shape, params = self._bound(vis)
        stmt = statements.visible_rows(shape)
        out: dict[int, StoredMemory] = {}
        for start in range(0, len(wanted), 500):
            rows = run(self.session, stmt, params | {"seqs": wanted[start : start + 500]})
            out.update((row.seq, stored(row)) for row in rows)
        return out

    def visible_seqs(self, seqs: Sequence[int], vis: Visibility) -> set[int]:
        """Those of ``seqs`` that pass the filters (ids only: cheap enough for every candidate)."""
        shape, params = self._bound(vis)
        stmt = statements.visible_seqs(shape)
        out: set[int] = set()
        for start in range(0, len(seqs), 500):
            out.update(run(self.session, stmt, params | {"seqs": list(seqs[start : start + 500])}).scalars())
        return out

    def lexical(
        self,
        query: str,
        vis: Visibility,
        limit: int,
        *,
        common_term_docs: int = 2000,
    ) -> list[LexicalHit]:
        """Full-text ranking of the visible memories: FTS5 BM25 on SQLite, ``ts_rank`` on Postgres.

        The query is reduced to its content words (stopwords dropped) OR-ed together; the index
        stems both sides, so "painting" finds "painted". Words found in more than
        ``common_term_docs`` of the owner's memories are dropped first: their weight in the ranking
        is small and ranking every memory that contains them is what makes full-text search slow
        on a large memory. If nothing is left, the lexical stage has no opinion.
        """
        words = list(dict.fromkeys(terms(query)))
        if not words:
            return []
        if self.dialect == "sqlite":
            words = self._fts5_uncommon(words, common_term_docs)
            return self._fts5(words, vis, limit) if words else []
        if self.dialect == "postgresql":
            counts = self._pg_docs(words, common_term_docs)
            words = [w for w, n in zip(words, counts, strict=True) if n <= common_term_docs]
            return self._tsvector(words, vis, limit) if words else []
        return []

    def held_words(self, words: Sequence[str]) -> set[str]:
        """Which of ``words`` some memory of the owner still has in its text (not its key or
        context: a word only a neighbour's copied context holds may belong to a forgotten memory),
        in one statement."""
        if not words:
            return set()
        if self.dialect == "sqlite":
            matches = [self._fts5_owner() + f'text : "{w}"' for w in words]
            return {w for w, n in zip(words, self._fts5_counts(matches, 0), strict=True) if n}
        if self.dialect == "postgresql":
            counts = self._pg_docs(words, 0, text_only=True)
            return {w for w, n in zip(words, counts, strict=True) if n}
        return set(words)

    def _fts5_owner(self) -> str:
        """FTS5 clause confining a search to the owner's documents (indexed as the hex of the owner)."""
        return f'owner : "{self.owner.encode().hex().upper()}" AND '

    def _fts5_counts(self, matches: Sequence[str], cap: int) -> list[int]:
        """How many documents each FTS5 match finds, counting stops at ``cap + 1``: one statement."""
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH :m{i} LIMIT :cap))"
            for i in range(len(matches))
        )
        params: dict[str, Any] = {f"m{i}": m for i, m in enumerate(matches)} | {"cap": cap + 1}
        row = self.session.execute(text(f"SELECT {counts}"), params).one()
        return [int(c) for c in row]

    def _fts5_uncommon(self, words: list[str], cap: int) -> list[str]:
        """The words found in at most ``cap`` of the owner's memories.

        The count over everyone's memories is the cheap upper bound; only a word common overall is
        counted again within the owner's memories.
        """
        matches = [f'{{key text context}} : "{w}"' for w in words]
        overall = self._fts5_counts(matches, cap)
        suspects = [i for i, n in enumerate(overall) if n > cap]
        if not suspects:
            return words
        owned = self._fts5_counts([self._fts5_owner() + matches[i] for i in suspects], cap)
        common = {words[i] for i, n in zip(suspects, owned, strict=True) if n > cap}
        return [w for w in words if w not in common]

    def _fts5(self, words: list[str], vis: Visibility, limit: int) -> list[LexicalHit]:
        """BM25 inside FTS5, then the exact owner, entity, temporal and version filters on the best few.

        The first pass ranks everyone's memories (fast) and keeps this owner's; when other owners'
        memories may have crowded this owner's out of it, a second pass confines the full-text
        search to the owner (exact, slower on a large owner).
        """
        match = "{key text context} : (" + " OR ".join(f'"{w}"' for w in words) + ")"
        inner = limit * 4
        hits, ranked = self._fts5_ranked(match, vis, limit, inner)
        if len(hits) < limit and (not hits or ranked >= inner):
            hits, _ = self._fts5_ranked(self._fts5_owner() + match, vis, limit, inner)
        return hits

    def _fts5_ranked(self, match: str, vis: Visibility, limit: int, inner: int) -> tuple[list[LexicalHit], int]:
        """The owner's visible hits among the ``inner`` best full-text matches, and how many matches were ranked."""
        shape, params = self._bound(vis)
        rows = run(
            self.session, statements.fts5_ranked(shape), params | {"match": match, "inner": inner, "limit": limit}
        ).all()
        # FTS5's bm25() is negative, lower is better; flip it so every score reads "higher is better".
        hits = [LexicalHit(seq, -float(rank)) for seq, rank, _ in rows]
        return hits, int(rows[0][2]) if rows else 0

    def _pg_docs(self, words: Sequence[str], cap: int, *, text_only: bool = False) -> list[int]:
        """How many of the owner's documents hold each word, counting stops at ``cap + 1``: one statement.

        ``text_only``: count a document only when its text holds the word (the document's
        A-weighted part); the index still finds the documents, this only re-checks them.
        """
        document = literal_column(PG_SEARCH_DOC, type_=TSVECTOR)

        def count(word: str) -> Any:
            query = func.plainto_tsquery(text("'english'::regconfig"), word)
            where = [MemoryRow.owner == self.owner, document.op("@@")(query)]
            if text_only:
                text_part = func.ts_filter(document, literal_column("'{a}'::\"char\"[]"), type_=TSVECTOR)
                where.append(text_part.op("@@")(query))
            inner = select(MemoryRow.seq).where(*where).limit(cap + 1)
            return select(func.count()).select_from(inner.subquery()).scalar_subquery()

        return [int(n) for n in self.session.execute(select(*(count(w) for w in words))).one()]

    def _tsvector(self, words: list[str], vis: Visibility, limit: int) -> list[LexicalHit]:
        document = literal_column(PG_SEARCH_DOC, type_=TSVECTOR)
        query = func.to_tsquery(text("'english'::regconfig"), " | ".join(words))
        # Weights are {D, C, B, A}: context, key, (unused), text. Normalisation 1 divides by log length.
        weights = f"'{{{CONTEXT_WEIGHT}, {KEY_WEIGHT}, {KEY_WEIGHT}, {TEXT_WEIGHT}}}'::float4[]"
        rank = func.ts_rank(literal_column(weights), document, query, 1)
        shape, params = self._bound(vis)
        stmt = (
            select(MemoryRow.seq, rank.label("rank"))
            .where(document.op("@@")(query), *statements.visible_conditions(shape, by_seq=False))
            # Equal ranks (the same words) keep the older memory first, as the fused ranking does;
            # without it their order is the plan's and changes from run to run.
            .order_by(rank.desc(), MemoryRow.seq)
            .limit(limit)
        )
        return [LexicalHit(seq, float(score)) for seq, score in self.session.execute(stmt, params)]

    def entity_names(self, after_seq: int) -> tuple[set[str], int]:
        """Entity names of the owner's memories newer than ``after_seq``, and the newest seq seen.

        Names are the ``entity`` column and the string values of entity keys of the metadata or of
        a JSON object value (:func:`~cluster.memory.entities.is_entity_key`,
        :func:`~cluster.memory.policy.described`), made distinct in SQL, so the documents are not
        decoded here.
        """
        stmt = statements.entity_names(SQUASHED_ENTITY_KEYS, first=after_seq <= 0, dialect=self.dialect)
        names: set[str] = set()
        newest = after_seq
        for seq, key, name in run(self.session, stmt, {"owner": self.owner, "after": after_seq}):
            if seq is not None:
                newest = max(newest, int(seq))
            elif isinstance(name, str) and name and (key is None or is_entity_key(key)):
                names.add(name)
        return names, newest

    def unindexed(self, after_seq: int = 0) -> tuple[int, int | None]:
        """How many of the owner's memories wait for their vectors, and the first of them after ``after_seq``."""
        count, first = run(self.session, statements.unindexed(), {"owner": self.owner, "after": after_seq}).one()
        return int(count), (int(first) if first is not None else None)

    def texts_after(self, after_seq: int) -> tuple[list[str], int]:
        """The texts of the owner's memories newer than ``after_seq`` up to the first one still
        waiting for its vector, and the newest seq seen.

        The expansion's words come from these: the vectors of a memory's words are stored with its
        own (:meth:`MemoryService.apply_writes`), so no query embeds the words of a burst of writes.
        """
        texts: list[str] = []
        newest = after_seq
        _, waiting = self.unindexed(after_seq)
        params = {"owner": self.owner, "after": after_seq, "before": waiting if waiting is not None else 2**62}
        for seq, value in run(self.session, statements.texts_after(first=after_seq <= 0), params):
            newest = max(newest, int(seq))
            texts.append(value)
        return texts, newest

    def candidate_facts(self, seqs: Sequence[int]) -> list[CandidateRow]:
        """What the entity, temporal and session ranking stages read of the candidates."""
        out: list[CandidateRow] = []
        for start in range(0, len(seqs), 500):
            params = {"owner": self.owner, "seqs": list(seqs[start : start + 500])}
            out.extend(
                CandidateRow(seq, entity, meta, text, sid, vf, data)
                for seq, entity, meta, text, sid, vf, data in run(self.session, statements.candidate_facts(), params)
            )
        return out
