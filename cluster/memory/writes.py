"""Writing long-term memory: new versions (one caller's, or concurrent callers' in one unit of work per
owner), updates, forgetting, the end of a session, and one memory read by id.

Write order: embed first (slow, outside any transaction); then one write transaction inserts the
SQL rows, queues their vectors (``memory_index_queue``) and bumps the owner's generation; after the
commit the vectors go to Milvus and a short second transaction clears the queue entries. If Milvus
fails, the write still stands (it is durable and found lexically) and the queued work is done by
the next write of the owner or by maintenance (:mod:`cluster.memory.derived`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cluster.core.errors import Conflict, HindsightError, InvalidInput, NotFound
from cluster.core.owner import check_owner
from cluster.core.ports import Embedder
from cluster.core.types import JsonObject, utcnow
from cluster.memory.derived import DerivedState
from cluster.memory.entities import embedded_text
from cluster.memory.index import MilvusMemoryIndex, VectorRow
from cluster.memory.models import (
    MemoryForget,
    MemoryForgetResult,
    MemoryRecord,
    MemoryUpdate,
    MemoryWrite,
    MemoryWriteResult,
    SessionEnd,
    SessionEndResult,
    id_range,
    value_text,
)
from cluster.memory.neighbours import ThreadWrites, delete_versions
from cluster.memory.policy.activity import ActivityPolicy
from cluster.memory.policy.lifetime import Validity, validity_for
from cluster.memory.policy.limits import MemoryLimits
from cluster.memory.policy.versions import MemoryState, next_version
from cluster.memory.policy.words import described
from cluster.memory.ranking.facts import conversation_of
from cluster.memory.repository.queue import IndexQueue
from cluster.memory.repository.rows import NewMemory, StoredMemory
from cluster.memory.repository.versions import Versions
from cluster.memory.tables import IndexOp
from cluster.storage.db import Database

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A write ready for its transaction: the request, its searchable text, its vector and its lifetime."""

    request: MemoryWrite
    text: str
    vector: list[float] | None
    """None: embedded later, from the queued vector work (see ``Writes.write``'s ``index_later``)."""
    validity: Validity


@dataclass(frozen=True, slots=True)
class Inserted:
    """What one transaction's inserts made: each write's result, in order, and the vectors to settle
    after the commit."""

    results: list[MemoryWriteResult]
    vectors: list[VectorRow]
    queued: list[int]
    """The seqs of the new versions, whose vector work is queued (their vectors above, or none yet)."""


class Writes:
    """The writing part of the memory service (see :class:`~cluster.memory.service.MemoryService`)."""

    def __init__(
        self,
        database: Database,
        embedder: Embedder,
        index: MilvusMemoryIndex,
        derived: DerivedState,
        *,
        activity: ActivityPolicy,
        limits: MemoryLimits,
    ) -> None:
        self.db = database
        self.embedder = embedder
        self.index = index
        self.derived = derived
        self.activity = activity
        self.limits = limits

    # ---------------------------------------------------------------------------------- new versions

    def write(
        self, owner: str, requests: Sequence[MemoryWrite], *, now: datetime | None = None
    ) -> list[MemoryWriteResult]:
        """Write many memories in one unit of work with one embedding batch.

        A write to an existing key in the same scope makes a new version, unless it repeats the
        current version (same value, metadata, entity, sources and lifetime): then it is done once
        and the current version's id comes back. Raises ``InvalidInput`` for malformed fields and
        ``LimitExceeded`` for a value, metadata or context over its size limit.
        """
        check_owner(owner)
        for request in requests:
            self.check(owner, request)
        return self._write_checked(owner, requests, now).results

    def write_unindexed(
        self, owner: str, requests: Sequence[MemoryWrite], *, now: datetime | None = None
    ) -> tuple[list[MemoryWriteResult], list[int]]:
        """:meth:`write` without embedding: the rows commit with their vector work queued, found by
        their words at once and by meaning once that work is done (:meth:`DerivedState.make_vectors`).
        Returns the results and the seqs whose vectors are still to be made."""
        check_owner(owner)
        for request in requests:
            self.check(owner, request)
        inserted = self._write_checked(owner, requests, now, index_later=True)
        return inserted.results, inserted.queued

    def write_batch(
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
                self.check(owner, request)
            except HindsightError as exc:
                results[i] = exc
                continue
            groups.setdefault(owner, []).append(i)
        for owner, members in groups.items():
            try:
                written = self._write_checked(owner, [items[i][1] for i in members], now).results
            except HindsightError as exc:
                if len(members) == 1:
                    results[members[0]] = exc
                    continue
                # One write the store refuses (e.g. a concurrent write of its key) must not fail the
                # rest of its group: each is written on its own.
                for i in members:
                    try:
                        results[i] = self._write_checked(owner, [items[i][1]], now).results[0]
                    except HindsightError as one:
                        results[i] = one
                continue
            for i, result in zip(members, written, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _write_checked(
        self, owner: str, requests: Sequence[MemoryWrite], now: datetime | None, *, index_later: bool = False
    ) -> Inserted:
        if not requests:
            return Inserted(results=[], vectors=[], queued=[])
        now = now or utcnow()
        validities = [validity_for(r.ttl, r.scope, now) for r in requests]
        prepared = self.prepare(requests, validities, embed=not index_later)
        with self.db.transaction() as session:
            inserted = self.insert(session, owner, prepared, now)
        self.settle(owner, inserted.vectors)
        return inserted

    def check(self, owner: str, request: MemoryWrite) -> None:
        """Refuse a write over a size limit, or with values no vector filter could name."""
        self.limits.check(request.value, request.metadata, request.context)
        self.index.check(owner, request.scope.key, request.entity)

    def embed(self, texts: Sequence[str], metadata: Sequence[JsonObject]) -> list[list[float]]:
        """The vectors of memories with these texts and metadata (:func:`embedded_text`)."""
        return self.embedder.embed([embedded_text(t, m) for t, m in zip(texts, metadata, strict=True)])

    def prepare(
        self, requests: Sequence[MemoryWrite], validities: Sequence[Validity], *, embed: bool = True
    ) -> list[Prepared]:
        """The writes with their texts and vectors (one embedding batch; none unless ``embed``), outside
        any transaction."""
        texts = [value_text(r.value) for r in requests]
        vectors: Sequence[list[float] | None] = (
            self.embed(texts, [r.metadata for r in requests]) if requests and embed else [None] * len(requests)
        )
        return [
            Prepared(request=r, text=t, vector=v, validity=d)
            for r, t, v, d in zip(requests, texts, vectors, validities, strict=True)
        ]

    def insert(self, session: Session, owner: str, writes: Sequence[Prepared], now: datetime) -> Inserted:
        """Insert the versions, supersede what they replace, queue their vectors, bump the generation."""
        versions = Versions(session, owner, self.db.dialect)
        # First, so concurrent writers of one owner queue on its row (Postgres) instead of racing.
        versions.bump_generation()
        results: list[MemoryWriteResult] = []
        vectors: list[VectorRow] = []
        queued: list[int] = []
        # What each write replaces, read up front: a key's first write in the batch replaces what is
        # stored, a later one the version written just before it.
        first = _first_of_key([w.request for w in writes])
        stored = [
            versions.latest(w.request.scope.key, w.request.key) if first[i] else None for i, w in enumerate(writes)
        ]
        # A later version says what changed, not what was said next: only a first joins its conversation.
        threads = [
            conversation_of(w.request.scope.session_id, described(w.request.metadata, w.request.value))
            if stored[i] is None and first[i]
            else None
            for i, w in enumerate(writes)
        ]
        neighbours = ThreadWrites(versions, now, threads, [w.text for w in writes])
        for i, write in enumerate(writes):
            request = write.request
            previous = stored[i] if first[i] else versions.latest(request.scope.key, request.key)
            if previous is not None and _repeats(previous, request, write.validity):
                # A retried write whose answer was lost: done once, answered with what it made.
                results.append(MemoryWriteResult(memory_id=previous.record.memory_id, version=previous.record.version))
                continue
            thread = threads[i]
            derived = neighbours.context(i)
            memory_id = uuid.uuid4()
            new = NewMemory(
                memory_id=memory_id,
                lineage_id=previous.lineage_id if previous else uuid.uuid4(),
                scope=request.scope,
                key=request.key,
                version=next_version(previous.record.version if previous else None),
                text=write.text,
                value=request.value,
                metadata=request.metadata,
                entity=request.entity,
                source_ids=request.source_ids,
                context=request.context if request.context is not None else derived,
                thread=thread,
                context_derived=request.context is None and thread is not None,
                created_at=now,
                validity=write.validity,
                activity=self.activity.initial,
            )
            try:
                seq = versions.insert(new)
            except IntegrityError as exc:
                raise Conflict(f"memory key {request.key!r} was written concurrently; retry the write") from exc
            superseded = None
            if previous is not None and previous.record.state is MemoryState.CURRENT:
                versions.supersede(previous.seq, memory_id, now)
                superseded = previous.record.memory_id
            results.append(MemoryWriteResult(memory_id=memory_id, version=new.version, superseded_id=superseded))
            queued.append(seq)
            if write.vector is not None:
                vector = VectorRow(
                    seq=seq, owner=owner, scope_key=request.scope.key, entity=request.entity, vector=write.vector
                )
                vectors.append(vector)
        neighbours.link()
        if queued:
            IndexQueue(session, owner, self.db.dialect).add(queued, IndexOp.UPSERT)
        return Inserted(results=results, vectors=vectors, queued=queued)

    def settle(self, owner: str, upserts: Sequence[VectorRow] = (), deletes: Sequence[int] = ()) -> None:
        """After the commit: the vectors to Milvus, the queue entries cleared (see :mod:`cluster.memory.derived`)."""
        # Upserts here are always new versions from ``insert``: seqs drawn in the commit just made.
        self.derived.settle(owner, upserts, deletes, fresh=True)

    # --------------------------------------------------------------------------- changes by id

    def update(self, owner: str, request: MemoryUpdate, *, now: datetime | None = None) -> MemoryWriteResult:
        """A new version of a current memory, keeping its key, scope, entity, sources and lifetime.

        Raises ``NotFound`` (unknown for this owner) or ``Conflict`` (superseded).
        """
        check_owner(owner)
        now = now or utcnow()
        with self.db.read() as session:
            versions = Versions(session, owner, self.db.dialect)
            current = versions.get(request.memory_id)
            if current.record.state is not MemoryState.CURRENT:
                newest = versions.latest(current.record.scope.key, current.record.key, lock=False)
                raise _superseded(current.record, newest.record if newest is not None else None)
        old = current.record
        write = MemoryWrite(
            key=old.key,
            value=request.value,
            scope=old.scope,
            metadata=request.metadata if request.metadata is not None else old.metadata,
            entity=old.entity,
            source_ids=old.source_ids,
        )
        self.check(owner, write)
        validity = Validity(valid_from=old.valid_from, expires_at=old.expires_at, session_bound=current.session_bound)
        prepared = self.prepare([write], [validity])
        with self.db.transaction() as session:
            versions = Versions(session, owner, self.db.dialect)
            # The owner's row lock first, then the check: concurrent updates of one version queue
            # here, and each reads the newest version only once the one before it has committed.
            # A row lock on the version alone is not enough on Postgres: a waiter re-reads that row,
            # not the newer version committed beside it, and would supersede the winner's version.
            versions.bump_generation()
            latest = versions.latest(old.scope.key, old.key)
            if (
                latest is None
                or latest.record.memory_id != old.memory_id
                or latest.record.state is not MemoryState.CURRENT
            ):
                raise _superseded(old, latest.record if latest is not None else None)
            inserted = self.insert(session, owner, prepared, now)
        self.settle(owner, inserted.vectors)
        return inserted.results[0]

    def forget(self, owner: str, request: MemoryForget) -> MemoryForgetResult:
        """Remove the memory and every version of its key, from SQL and from Milvus.

        Raises ``NotFound`` if this owner has no such memory.
        """
        check_owner(owner)
        with self.db.transaction() as session:
            versions = Versions(session, owner, self.db.dialect)
            found = versions.get(request.memory_id)
            seqs = versions.lineage_seqs(found.lineage_id)
            removed = delete_versions(versions, seqs, utcnow())
            IndexQueue(session, owner, self.db.dialect).add(seqs, IndexOp.DELETE)
            versions.bump_generation()
        self.settle(owner, deletes=seqs)
        logger.info("forgot memory %s (%s versions)", request.memory_id, removed)
        return MemoryForgetResult(memory_id=request.memory_id, removed_versions=removed)

    def end_session(self, owner: str, request: SessionEnd, *, now: datetime | None = None) -> SessionEndResult:
        """Expire the memories whose lifetime was bound to this session. Ending it again changes nothing."""
        check_owner(owner)
        now = now or utcnow()
        with self.db.transaction() as session:
            versions = Versions(session, owner, self.db.dialect)
            states = versions.end_session(request.session_id, now)
            if states:
                versions.bump_generation()
        # Superseded versions expire too (history queries must not show them), but only current ones count.
        expired = sum(1 for state in states if state is MemoryState.CURRENT)
        logger.info("ended session %s: %s memories expired", request.session_id, expired)
        return SessionEndResult(session_id=request.session_id, expired=expired)

    # -------------------------------------------------------------------------------- reads by id

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
            found = Versions(session, owner, self.db.dialect).ids_between(first, last)
        if not found:
            raise NotFound(f"no memory has an id starting {ref!r}")
        if len(found) > 1:
            raise InvalidInput(f"more than one memory has an id starting {ref!r}: send more digits, or the whole id")
        return found[0]

    def get(self, owner: str, memory_id: uuid.UUID) -> MemoryRecord:
        """One version by id, whatever its state. Raises ``NotFound``."""
        check_owner(owner)
        with self.db.read() as session:
            return Versions(session, owner, self.db.dialect).get(memory_id).record


def _superseded(old: MemoryRecord, latest: MemoryRecord | None) -> Conflict:
    """The refusal of an update of a version that is no longer current, naming both versions."""
    now_current = f"; the current version is {latest.version} (id {latest.memory_id})" if latest else ""
    return Conflict(
        f"memory {old.memory_id} (key {old.key!r}, version {old.version}) is no longer current{now_current}; "
        "read it and update that version"
    )


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
