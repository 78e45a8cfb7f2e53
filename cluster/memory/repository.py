"""Memory records in SQL (SQLite or Postgres): the source of truth for long-term memory.

Every statement carries ``owner = :owner``; the owner is a function argument taken from the
caller's credential. Methods run inside the caller's unit of work (``Database.transaction()`` for
writes, ``Database.read()`` for queries) and never commit. ORM rows never leave this module:
callers get :class:`StoredMemory` values and give :class:`NewMemory` ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from pydantic import Field
from sqlalchemy import (
    ColumnElement,
    Executable,
    Select,
    and_,
    bindparam,
    delete,
    func,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Session

from cluster.core.errors import NotFound
from cluster.core.types import Frozen, utcnow
from cluster.memory import statements
from cluster.memory.entities import SQUASHED_ENTITY_KEYS, embedded_text, is_entity_key
from cluster.memory.models import MemoryRecord
from cluster.memory.policy.lifetime import Validity
from cluster.memory.policy.promotion import LogStatus, spoken
from cluster.memory.policy.scope import MemoryScope
from cluster.memory.policy.versions import MemoryState, MemoryValue
from cluster.memory.policy.words import terms
from cluster.memory.statements import CONTEXT_WEIGHT, KEY_WEIGHT, TEXT_WEIGHT
from cluster.memory.tables import (
    FTS_TABLE,
    PG_SEARCH_DOC,
    IndexOp,
    MemoryIndexQueueRow,
    MemoryLogRow,
    MemoryRow,
)
from cluster.storage.db import UtcDateTime


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
    owner: str
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


class IndexSource(Frozen):
    """What a memory vector is made from: the text to embed and the fields Milvus filters on."""

    seq: int
    owner: str
    scope_key: str
    entity: str | None
    text: str


class IndexWork(Frozen):
    """A queued vector operation (see ``MemoryIndexQueueRow``)."""

    seq: int
    owner: str
    op: IndexOp


class LoggedTurnRow(Frozen):
    """A raw interaction to log."""

    log_id: uuid.UUID
    owner: str
    session_id: str
    speaker: str
    text: str
    at: datetime
    metadata: dict[str, Any]
    status: LogStatus
    memory_id: uuid.UUID | None = None
    evaluated_at: datetime | None = None


class Neighbour(NamedTuple):
    """A memory of a conversation, as the memories told beside it read it."""

    seq: int
    text: str
    context_derived: bool


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


class Visibility(Frozen):
    """Which versions a read may see: the entity and temporal filters plus version and archive state."""

    valid_at: datetime
    entity: str | None = None
    scope_key: str | None = None
    include_history: bool = False
    as_of: datetime | None = None


class LoggedRow(Frozen):
    seq: int
    log_id: uuid.UUID
    session_id: str
    speaker: str
    text: str
    at: datetime
    metadata: dict[str, Any]
    status: LogStatus


_Rows = TypeVar("_Rows", bound=Select[*tuple[Any, ...]])


def _thread_side(stmt: _Rows, owner: str, thread: str, seq: int | None, *, after: bool) -> _Rows:
    """``stmt`` over the owner's memories of ``thread`` on one side of ``seq`` (all of them when
    ``seq`` is None), nearest first."""
    m = MemoryRow
    stmt = stmt.where(m.owner == owner, m.thread == thread)
    if seq is not None:
        stmt = stmt.where(m.seq > seq if after else m.seq < seq)
    return stmt.order_by(m.seq.asc() if after else m.seq.desc())


def _neighbour_at(now: datetime) -> ColumnElement[bool]:
    """A memory of a conversation that is a neighbour at ``now``: current, unarchived, unexpired."""
    m = MemoryRow
    return and_(
        m.state == MemoryState.CURRENT, m.archived_at.is_(None), or_(m.expires_at.is_(None), m.expires_at > now)
    )


def _owned(owner: str) -> ColumnElement[bool]:
    """The owner constraint for statements that address rows by ``seq``.

    Wrapped in ``coalesce`` on purpose: without statistics, SQLite's planner prefers an equality on
    an indexed ``owner`` over a primary-key ``IN`` list and scans all of the owner's rows.
    """
    return func.coalesce(MemoryRow.owner, "") == owner


def _core(session: Session, stmt: Executable, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Any:
    """A prebuilt Core statement (:mod:`cluster.memory.statements`) on the session's connection,
    inside its transaction: the ORM session has nothing to add to it. A list of parameter sets runs
    it once per set. (Typed ``Any``: the rows' shape is the statement's, which the typing of a
    prebuilt statement does not carry.)"""
    return session.connection().execute(stmt, params)


def _record(row: Any) -> StoredMemory:
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


class SqlMemoryStore:
    """Reads and writes memory rows; one instance serves any number of sessions."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect

    # ------------------------------------------------------------------------------------- writes

    def latest(self, session: Session, owner: str, scope_key: str, key: str) -> StoredMemory | None:
        """The newest version of (owner, scope, key), current or not (row-locked on Postgres)."""
        stmt = statements.latest(lock=self.dialect == "postgresql")
        row = _core(session, stmt, {"owner": owner, "scope_key": scope_key, "key": key}).first()
        return _record(row) if row is not None else None

    def insert(self, session: Session, new: NewMemory) -> int:
        """Insert one version; returns its ``seq`` (the Milvus primary key, never handed out twice)."""
        values = {
            "memory_id": new.memory_id,
            "lineage_id": new.lineage_id,
            "owner": new.owner,
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
        return int(_core(session, statements.insert_version(), values).scalar_one())

    def supersede(self, session: Session, owner: str, seq: int, by: uuid.UUID, at: datetime) -> None:
        session.execute(
            update(MemoryRow)
            .where(MemoryRow.owner == owner, MemoryRow.seq == seq)
            .values(state=MemoryState.SUPERSEDED, superseded_at=at, superseded_by=by)
        )

    def get(self, session: Session, owner: str, memory_id: uuid.UUID) -> StoredMemory:
        row = session.scalars(
            select(MemoryRow).where(MemoryRow.owner == owner, MemoryRow.memory_id == memory_id)
        ).first()
        if row is None:
            raise NotFound(f"memory {memory_id} not found")
        return _record(row)

    def ids_between(self, session: Session, owner: str, first: uuid.UUID, last: uuid.UUID) -> list[uuid.UUID]:
        """At most two of the owner's memory ids from ``first`` to ``last`` (two tell a prefix is ambiguous)."""
        return list(
            session.scalars(
                select(MemoryRow.memory_id)
                .where(MemoryRow.owner == owner, MemoryRow.memory_id.between(first, last))
                .limit(2)
            )
        )

    def lineage_seqs(self, session: Session, owner: str, lineage_id: uuid.UUID) -> list[int]:
        return list(
            session.scalars(select(MemoryRow.seq).where(MemoryRow.owner == owner, MemoryRow.lineage_id == lineage_id))
        )

    def delete_seqs(self, session: Session, owner: str, seqs: Sequence[int]) -> int:
        if not seqs:
            return 0
        result = session.execute(delete(MemoryRow).where(_owned(owner), MemoryRow.seq.in_(list(seqs))))
        return int(getattr(result, "rowcount", 0) or 0)

    def neighbour(
        self, session: Session, owner: str, thread: str, seq: int | None, now: datetime, *, after: bool
    ) -> Neighbour | None:
        """The owner's current memory of ``thread`` (unarchived, unexpired at ``now``) told just
        before ``seq`` (its last when ``seq`` is None), or with ``after`` just after it."""
        m = MemoryRow
        stmt = _thread_side(select(m.seq, m.text, m.context_derived), owner, thread, seq, after=after)
        row = session.execute(stmt.where(_neighbour_at(now)).limit(1)).first()
        return Neighbour(row.seq, row.text, row.context_derived) if row is not None else None

    def thread_rows(
        self, session: Session, owner: str, thread: str, seq: int, now: datetime, *, after: bool, limit: int
    ) -> list[tuple[int, bool, bool]]:
        """The owner's memories of ``thread`` nearest ``seq`` on one side, in any state, nearest
        first: ``(seq, a neighbour at now, context derived)``."""
        m = MemoryRow
        columns = select(m.seq, _neighbour_at(now).label("neighbour"), m.context_derived)
        stmt = _thread_side(columns, owner, thread, seq, after=after).limit(limit)
        return [(row.seq, bool(row.neighbour), row.context_derived) for row in session.execute(stmt)]

    def threads_of(self, session: Session, owner: str, seqs: Sequence[int]) -> dict[int, str]:
        """The conversation of those of ``seqs`` that have one."""
        stmt = select(MemoryRow.seq, MemoryRow.thread).where(
            _owned(owner), MemoryRow.seq.in_(list(seqs)), MemoryRow.thread.is_not(None)
        )
        return {seq: thread for seq, thread in session.execute(stmt) if thread is not None}

    def set_context(self, session: Session, owner: str, seq: int, context: str | None) -> None:
        """Replace one version's derived context (its full-text document follows)."""
        session.execute(
            update(MemoryRow).where(_owned(owner), MemoryRow.seq == seq).values(context=context, context_derived=True)
        )

    def activity_of(self, session: Session, owner: str, seqs: Sequence[int]) -> dict[int, tuple[float, datetime]]:
        """The stored (activity, when it was set) of those of ``seqs`` that still exist."""
        out: dict[int, tuple[float, datetime]] = {}
        for start in range(0, len(seqs), 500):
            chunk = list(seqs[start : start + 500])
            stmt = select(MemoryRow.seq, MemoryRow.activity, MemoryRow.activity_at).where(
                _owned(owner), MemoryRow.seq.in_(chunk)
            )
            out.update((seq, (activity, at)) for seq, activity, at in session.execute(stmt))
        return out

    def set_activity(self, session: Session, owner: str, changes: Mapping[int, tuple[float, datetime, int]]) -> None:
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
        session.execute(
            stmt,
            [
                {"b_owner": owner, "b_seq": seq, "b_activity": activity, "b_at": at, "b_count": count}
                for seq, (activity, at, count) in changes.items()
            ],
        )

    def set_archived(self, session: Session, owner: str, seqs: Sequence[int], at: datetime | None) -> None:
        if seqs:
            session.execute(
                update(MemoryRow).where(_owned(owner), MemoryRow.seq.in_(list(seqs))).values(archived_at=at)
            )

    def restore(self, session: Session, owner: str, seq: int, activity: float, at: datetime) -> None:
        session.execute(
            update(MemoryRow)
            .where(MemoryRow.owner == owner, MemoryRow.seq == seq)
            .values(archived_at=None, activity=activity, activity_at=at)
        )

    def end_session(self, session: Session, owner: str, session_id: str, at: datetime) -> list[MemoryState]:
        """Expire the session's bound memories, superseded versions too; returns the state of each."""
        return list(
            session.scalars(
                update(MemoryRow)
                .where(
                    MemoryRow.owner == owner,
                    MemoryRow.session_id == session_id,
                    MemoryRow.session_bound.is_(True),
                    or_(MemoryRow.expires_at.is_(None), MemoryRow.expires_at > at),
                )
                .values(expires_at=at)
                .returning(MemoryRow.state)
            )
        )

    # -------------------------------------------------------------------------------------- reads

    @staticmethod
    def _bound(owner: str, vis: Visibility) -> tuple[statements.Shape, dict[str, Any]]:
        return statements.shape_and_params(
            owner,
            valid_at=vis.valid_at,
            entity=vis.entity,
            scope_key=vis.scope_key,
            as_of=vis.as_of,
            include_history=vis.include_history,
        )

    def visible(self, session: Session, owner: str, seqs: Iterable[int], vis: Visibility) -> dict[int, StoredMemory]:
        """Those of ``seqs`` that pass the filters, by seq."""
        wanted = list(dict.fromkeys(seqs))
        shape, params = self._bound(owner, vis)
        stmt = statements.visible_rows(shape)
        out: dict[int, StoredMemory] = {}
        for start in range(0, len(wanted), 500):
            rows = _core(session, stmt, params | {"seqs": wanted[start : start + 500]})
            out.update((row.seq, _record(row)) for row in rows)
        return out

    def visible_seqs(self, session: Session, owner: str, seqs: Sequence[int], vis: Visibility) -> set[int]:
        """Those of ``seqs`` that pass the filters (ids only: cheap enough for every candidate)."""
        shape, params = self._bound(owner, vis)
        stmt = statements.visible_seqs(shape)
        out: set[int] = set()
        for start in range(0, len(seqs), 500):
            out.update(_core(session, stmt, params | {"seqs": list(seqs[start : start + 500])}).scalars())
        return out

    def lexical(
        self,
        session: Session,
        owner: str,
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
            words = self._fts5_uncommon(session, owner, words, common_term_docs)
            return self._fts5(session, owner, words, vis, limit) if words else []
        if self.dialect == "postgresql":
            counts = self._pg_docs(session, owner, words, common_term_docs)
            words = [w for w, n in zip(words, counts, strict=True) if n <= common_term_docs]
            return self._tsvector(session, owner, words, vis, limit) if words else []
        return []

    def held_words(self, session: Session, owner: str, words: Sequence[str]) -> set[str]:
        """Which of ``words`` some memory of the owner still has in its text (not its key or
        context: a word only a neighbour's copied context holds may belong to a forgotten memory),
        in one statement."""
        if not words:
            return set()
        if self.dialect == "sqlite":
            matches = [self._fts5_owner(owner) + f'text : "{w}"' for w in words]
            return {w for w, n in zip(words, self._fts5_counts(session, matches, 0), strict=True) if n}
        if self.dialect == "postgresql":
            counts = self._pg_docs(session, owner, words, 0, text_only=True)
            return {w for w, n in zip(words, counts, strict=True) if n}
        return set(words)

    @staticmethod
    def _fts5_owner(owner: str) -> str:
        """FTS5 clause confining a search to the owner's documents (indexed as the hex of the owner)."""
        return f'owner : "{owner.encode().hex().upper()}" AND '

    def _fts5_counts(self, session: Session, matches: Sequence[str], cap: int) -> list[int]:
        """How many documents each FTS5 match finds, counting stops at ``cap + 1``: one statement."""
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH :m{i} LIMIT :cap))"
            for i in range(len(matches))
        )
        params: dict[str, Any] = {f"m{i}": m for i, m in enumerate(matches)} | {"cap": cap + 1}
        row = session.execute(text(f"SELECT {counts}"), params).one()
        return [int(c) for c in row]

    def _fts5_uncommon(self, session: Session, owner: str, words: list[str], cap: int) -> list[str]:
        """The words found in at most ``cap`` of the owner's memories.

        The count over everyone's memories is the cheap upper bound; only a word common overall is
        counted again within the owner's memories.
        """
        matches = [f'{{key text context}} : "{w}"' for w in words]
        overall = self._fts5_counts(session, matches, cap)
        suspects = [i for i, n in enumerate(overall) if n > cap]
        if not suspects:
            return words
        owned = self._fts5_counts(session, [self._fts5_owner(owner) + matches[i] for i in suspects], cap)
        common = {words[i] for i, n in zip(suspects, owned, strict=True) if n > cap}
        return [w for w in words if w not in common]

    def _fts5(self, session: Session, owner: str, words: list[str], vis: Visibility, limit: int) -> list[LexicalHit]:
        """BM25 inside FTS5, then the exact owner, entity, temporal and version filters on the best few.

        The first pass ranks everyone's memories (fast) and keeps this owner's; when other owners'
        memories may have crowded this owner's out of it, a second pass confines the full-text
        search to the owner (exact, slower on a large owner).
        """
        match = "{key text context} : (" + " OR ".join(f'"{w}"' for w in words) + ")"
        inner = limit * 4
        hits, ranked = self._fts5_ranked(session, owner, match, vis, limit, inner)
        if len(hits) < limit and (not hits or ranked >= inner):
            hits, _ = self._fts5_ranked(session, owner, self._fts5_owner(owner) + match, vis, limit, inner)
        return hits

    def _fts5_ranked(
        self, session: Session, owner: str, match: str, vis: Visibility, limit: int, inner: int
    ) -> tuple[list[LexicalHit], int]:
        """The owner's visible hits among the ``inner`` best full-text matches, and how many matches were ranked."""
        shape, params = self._bound(owner, vis)
        rows = _core(
            session, statements.fts5_ranked(shape), params | {"match": match, "inner": inner, "limit": limit}
        ).all()
        # FTS5's bm25() is negative, lower is better; flip it so every score reads "higher is better".
        hits = [LexicalHit(seq, -float(rank)) for seq, rank, _ in rows]
        return hits, int(rows[0][2]) if rows else 0

    def _pg_docs(
        self, session: Session, owner: str, words: Sequence[str], cap: int, *, text_only: bool = False
    ) -> list[int]:
        """How many of the owner's documents hold each word, counting stops at ``cap + 1``: one statement.

        ``text_only``: count a document only when its text holds the word (the document's
        A-weighted part); the index still finds the documents, this only re-checks them.
        """
        document = literal_column(PG_SEARCH_DOC, type_=TSVECTOR)

        def count(word: str) -> Any:
            query = func.plainto_tsquery(text("'english'::regconfig"), word)
            where = [MemoryRow.owner == owner, document.op("@@")(query)]
            if text_only:
                text_part = func.ts_filter(document, literal_column("'{a}'::\"char\"[]"), type_=TSVECTOR)
                where.append(text_part.op("@@")(query))
            inner = select(MemoryRow.seq).where(*where).limit(cap + 1)
            return select(func.count()).select_from(inner.subquery()).scalar_subquery()

        return [int(n) for n in session.execute(select(*(count(w) for w in words))).one()]

    def _tsvector(
        self, session: Session, owner: str, words: list[str], vis: Visibility, limit: int
    ) -> list[LexicalHit]:
        document = literal_column(PG_SEARCH_DOC, type_=TSVECTOR)
        query = func.to_tsquery(text("'english'::regconfig"), " | ".join(words))
        # Weights are {D, C, B, A}: context, key, (unused), text. Normalisation 1 divides by log length.
        weights = f"'{{{CONTEXT_WEIGHT}, {KEY_WEIGHT}, {KEY_WEIGHT}, {TEXT_WEIGHT}}}'::float4[]"
        rank = func.ts_rank(literal_column(weights), document, query, 1)
        shape, params = self._bound(owner, vis)
        stmt = (
            select(MemoryRow.seq, rank.label("rank"))
            .where(document.op("@@")(query), *statements.visible_conditions(shape, by_seq=False))
            .order_by(rank.desc())
            .limit(limit)
        )
        return [LexicalHit(seq, float(score)) for seq, score in session.execute(stmt, params)]

    def entity_names(self, session: Session, owner: str, after_seq: int) -> tuple[set[str], int]:
        """Entity names of the owner's memories newer than ``after_seq``, and the newest seq seen.

        Names are the ``entity`` column and the string values of entity keys of the metadata or of
        a JSON object value (:func:`~cluster.memory.entities.is_entity_key`,
        :func:`~cluster.memory.policy.described`), made distinct in SQL, so the documents are not
        decoded here.
        """
        stmt = statements.entity_names(SQUASHED_ENTITY_KEYS, first=after_seq <= 0, dialect=self.dialect)
        names: set[str] = set()
        newest = after_seq
        for seq, key, name in _core(session, stmt, {"owner": owner, "after": after_seq}):
            if seq is not None:
                newest = max(newest, int(seq))
            elif isinstance(name, str) and name and (key is None or is_entity_key(key)):
                names.add(name)
        return names, newest

    def texts_after(self, session: Session, owner: str, after_seq: int) -> tuple[list[str], int]:
        """The texts of the owner's memories newer than ``after_seq``, and the newest seq seen."""
        texts: list[str] = []
        newest = after_seq
        for seq, value in _core(
            session, statements.texts_after(first=after_seq <= 0), {"owner": owner, "after": after_seq}
        ):
            newest = max(newest, int(seq))
            texts.append(value)
        return texts, newest

    def candidate_facts(self, session: Session, owner: str, seqs: Sequence[int]) -> list[CandidateRow]:
        """What the entity, temporal and session ranking stages read of the candidates."""
        out: list[CandidateRow] = []
        for start in range(0, len(seqs), 500):
            params = {"owner": owner, "seqs": list(seqs[start : start + 500])}
            out.extend(
                CandidateRow(seq, entity, meta, text, sid, vf, data)
                for seq, entity, meta, text, sid, vf, data in _core(session, statements.candidate_facts(), params)
            )
        return out

    # ----------------------------------------------------------------------------------- maintenance

    def owners(self, session: Session) -> list[str]:
        """Every owner with memories (maintenance jobs then work owner by owner)."""
        return list(session.scalars(select(MemoryRow.owner).distinct()))

    def stale(self, session: Session, owner: str, before: datetime) -> list[StoredMemory]:
        """Current, unarchived memories whose activity was last set before ``before``."""
        rows = session.scalars(
            select(MemoryRow).where(
                MemoryRow.owner == owner,
                MemoryRow.archived_at.is_(None),
                MemoryRow.state == MemoryState.CURRENT,
                MemoryRow.activity_at < before,
            )
        )
        return [_record(row) for row in rows]

    def expired_seqs(self, session: Session, owner: str, now: datetime) -> list[int]:
        return list(
            session.scalars(
                select(MemoryRow.seq).where(
                    MemoryRow.owner == owner, MemoryRow.expires_at.is_not(None), MemoryRow.expires_at <= now
                )
            )
        )

    def seqs(self, session: Session, owner: str) -> set[int]:
        """Every version the owner has in SQL, archived and superseded ones included."""
        return set(session.scalars(select(MemoryRow.seq).where(MemoryRow.owner == owner)))

    def all_rows(self, session: Session, owner: str, after_seq: int, limit: int) -> list[StoredMemory]:
        rows = session.scalars(
            select(MemoryRow)
            .where(MemoryRow.owner == owner, MemoryRow.seq > after_seq)
            .order_by(MemoryRow.seq)
            .limit(limit)
        )
        return [_record(row) for row in rows]

    # ------------------------------------------------------------------------------------ raw log

    def log(self, session: Session, turn: LoggedTurnRow) -> None:
        session.add(
            MemoryLogRow(
                log_id=turn.log_id,
                owner=turn.owner,
                session_id=turn.session_id,
                speaker=turn.speaker,
                text=turn.text,
                at=turn.at,
                meta=turn.metadata,
                status=turn.status,
                memory_id=turn.memory_id,
                evaluated_at=turn.evaluated_at,
            )
        )
        session.flush()

    def logged(self, session: Session, owner: str, log_id: uuid.UUID) -> LoggedTurnRow | None:
        row = session.scalar(select(MemoryLogRow).where(MemoryLogRow.owner == owner, MemoryLogRow.log_id == log_id))
        if row is None:
            return None
        return LoggedTurnRow(
            log_id=row.log_id,
            owner=row.owner,
            session_id=row.session_id,
            speaker=row.speaker,
            text=row.text,
            at=row.at,
            metadata=row.meta,
            status=row.status,
            memory_id=row.memory_id,
            evaluated_at=row.evaluated_at,
        )

    def log_owners(self, session: Session) -> list[str]:
        return list(
            session.scalars(select(MemoryLogRow.owner).where(MemoryLogRow.status == LogStatus.PENDING).distinct())
        )

    def log_since(self, session: Session, owner: str) -> list[LoggedRow]:
        """The owner's log from its oldest pending turn on, in time order."""
        first = session.scalar(
            select(func.min(MemoryLogRow.at)).where(
                MemoryLogRow.owner == owner, MemoryLogRow.status == LogStatus.PENDING
            )
        )
        if first is None:
            return []
        rows = session.scalars(
            select(MemoryLogRow)
            .where(MemoryLogRow.owner == owner, MemoryLogRow.at >= first)
            .order_by(MemoryLogRow.at, MemoryLogRow.seq)
        )
        return [
            LoggedRow(
                seq=r.seq,
                log_id=r.log_id,
                session_id=r.session_id,
                speaker=r.speaker,
                text=r.text,
                at=r.at,
                metadata=r.meta,
                status=r.status,
            )
            for r in rows
        ]

    def logged_beside(
        self, session: Session, owner: str, session_id: str, at: datetime, seq: int | None, *, after: bool
    ) -> str | None:
        """The session's turn logged just before (or after) the one at ``at`` with ``seq``, as
        :func:`~cluster.memory.policy.spoken` reads it (``seq`` ``None``: a turn not logged yet,
        which follows every turn logged at ``at``)."""
        r = MemoryLogRow
        stmt = select(r.speaker, r.text).where(r.owner == owner, r.session_id == session_id)
        if after:
            side = r.at > at if seq is None else or_(r.at > at, and_(r.at == at, r.seq > seq))
            stmt = stmt.where(side).order_by(r.at, r.seq)
        else:
            side = r.at <= at if seq is None else or_(r.at < at, and_(r.at == at, r.seq < seq))
            stmt = stmt.where(side).order_by(r.at.desc(), r.seq.desc())
        found = session.execute(stmt.limit(1)).first()
        return None if found is None else spoken(found.speaker, found.text)

    def mark_log(
        self,
        session: Session,
        owner: str,
        log_id: uuid.UUID,
        status: LogStatus,
        at: datetime,
        memory_id: uuid.UUID | None,
    ) -> None:
        session.execute(
            update(MemoryLogRow)
            .where(and_(MemoryLogRow.owner == owner, MemoryLogRow.log_id == log_id))
            .values(status=status, evaluated_at=at, memory_id=memory_id)
        )

    # ------------------------------------------------------------------------- index queue, generations

    def queue_index(self, session: Session, owner: str, seqs: Sequence[int], op: IndexOp) -> None:
        """Queue vector work for ``seqs`` in this unit of work; a later operation on a seq replaces an earlier one.

        Stamped with the wall clock, not the write's (possibly simulated) time: the age of queued
        work tells whether the process that queued it may still be doing it.
        """
        if not seqs:
            return
        at = utcnow()
        rows = [{"seq": seq, "owner": owner, "op": op, "queued_at": at} for seq in dict.fromkeys(seqs)]
        _core(session, statements.queue_index(self.dialect), rows)

    def queued(self, session: Session, owner: str | None, before: datetime, limit: int) -> list[IndexWork]:
        """Vector work queued up to ``before`` (of one owner, or of all), oldest first."""
        params: dict[str, Any] = {"before": before, "limit": limit}
        if owner is not None:
            params["owner"] = owner
        found = _core(session, statements.queued(of_owner=owner is not None), params)
        return [IndexWork(seq=seq, owner=who, op=op) for seq, who, op in found]

    def index_done(self, session: Session, owner: str, done: Sequence[IndexWork]) -> None:
        """Remove finished work; an entry whose operation changed meanwhile (upsert → delete) stays."""
        for op in IndexOp:
            seqs = [w.seq for w in done if w.op is op]
            for start in range(0, len(seqs), 500):
                _core(session, statements.index_done(), {"owner": owner, "op": op, "seqs": seqs[start : start + 500]})

    def index_sources(self, session: Session, owner: str, seqs: Sequence[int]) -> list[IndexSource]:
        """What the vectors of those of ``seqs`` that still exist are made from."""
        out: list[IndexSource] = []
        for start in range(0, len(seqs), 500):
            stmt = select(MemoryRow.seq, MemoryRow.scope_key, MemoryRow.entity, MemoryRow.text, MemoryRow.meta).where(
                _owned(owner), MemoryRow.seq.in_(list(seqs[start : start + 500]))
            )
            out.extend(
                IndexSource(seq=seq, owner=owner, scope_key=scope_key, entity=entity, text=embedded_text(text, meta))
                for seq, scope_key, entity, text, meta in session.execute(stmt)
            )
        return out

    def clear_queue(self, session: Session, owner: str, before: datetime) -> None:
        """Forget the owner's work queued before ``before`` (a rebuild from SQL read afterwards did it)."""
        queue = MemoryIndexQueueRow
        session.execute(delete(queue).where(queue.owner == owner, queue.queued_at < before))

    def bump_generation(self, session: Session, owner: str) -> None:
        """Mark a change of the owner's memories, in the transaction that makes it.

        On Postgres the row lock also queues concurrent writers of one owner behind each other.
        """
        _core(session, statements.bump_generation(self.dialect), {"owner": owner})

    def generation(self, session: Session, owner: str) -> int:
        """The owner's current generation (0 before the first change): a primary-key lookup."""
        found = _core(session, statements.generation(), {"owner": owner}).scalar()
        return int(found or 0)
