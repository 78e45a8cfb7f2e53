"""Query caches: results (owner-scoped, valid only at the owner's current generation, bounded in
bytes) and the ranking facts of memory versions (which never change)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta

from cluster.memory.models import MemoryQueryResult
from cluster.memory.ranking.facts import CandidateFacts


class QueryCache:
    """LRU of query results keyed by (owner, query); thread-safe.

    Correct across processes: every change of an owner's memories bumps the owner's generation in
    SQL (in the transaction that makes the change), the caller reads the generation at the start of
    each query, and an entry is served only at the generation it was computed at. A forget or an
    update made through any process is therefore never answered from any process's cache.
    Entries also go stale after ``ttl`` (and no later than the earliest expiry among their hits),
    since time alone changes what a query may return, and are never served to a query "earlier"
    than the one that computed them.

    The bound is ``max_bytes`` of serialised results (an answer's size varies by orders of
    magnitude with ``top_k`` and the values); ``max_bytes=0`` disables the cache. ``hits`` and
    ``misses`` feed the cache-hit-rate metric.
    """

    def __init__(self, max_bytes: int = 32 * 1024 * 1024, ttl: timedelta = timedelta(seconds=30)) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.hits = 0
        self.misses = 0
        self.bytes = 0
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def get(self, owner: str, key: str, generation: int, now: datetime) -> MemoryQueryResult | None:
        if not self.enabled:
            return None
        with self._lock:
            entry = self._entries.get((owner, key))
            if entry is not None:
                if entry.generation == generation and entry.computed_at <= now < entry.fresh_until:
                    self._entries.move_to_end((owner, key))
                    self.hits += 1
                    return entry.result
                self._drop((owner, key))
            self.misses += 1
            return None

    def put(self, owner: str, key: str, generation: int, result: MemoryQueryResult, now: datetime) -> None:
        if not self.enabled:
            return
        size = len(key) + len(result.model_dump_json())
        if size > self.max_bytes:
            return
        fresh_until = now + self.ttl
        for hit in result.hits:
            if hit.memory.expires_at is not None and hit.memory.expires_at < fresh_until:
                fresh_until = hit.memory.expires_at
        with self._lock:
            if (owner, key) in self._entries:
                self._drop((owner, key))
            self._entries[(owner, key)] = _Entry(generation, now, fresh_until, result, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def _drop(self, key: tuple[str, str]) -> None:
        self.bytes -= self._entries.pop(key).size


class _Entry:
    __slots__ = ("computed_at", "fresh_until", "generation", "result", "size")

    def __init__(
        self, generation: int, computed_at: datetime, fresh_until: datetime, result: MemoryQueryResult, size: int
    ) -> None:
        self.generation = generation
        self.computed_at = computed_at
        self.fresh_until = fresh_until
        self.result = result
        self.size = size


class FactsCache:
    """Ranking facts of memory versions, by (owner, seq); an LRU of ``entries`` at most; thread-safe.

    Correct without any invalidation: a version's facts come from fields no statement ever changes
    (entity, metadata, text, session, start of validity) and ``seq`` never repeats, so an entry can
    only be unused, never wrong. Whether a version may be seen is checked in SQL on every query.
    """

    def __init__(self, entries: int = 100_000) -> None:
        self.entries = entries
        self._facts: OrderedDict[tuple[str, int], CandidateFacts] = OrderedDict()
        self._lock = threading.Lock()

    def split(self, owner: str, seqs: Iterable[int]) -> tuple[dict[int, CandidateFacts], list[int]]:
        """The facts known for ``seqs``, and the seqs still to read."""
        known: dict[int, CandidateFacts] = {}
        missing: list[int] = []
        with self._lock:
            for seq in seqs:
                fact = self._facts.get((owner, seq))
                if fact is None:
                    missing.append(seq)
                else:
                    self._facts.move_to_end((owner, seq))
                    known[seq] = fact
        return known, missing

    def add(self, owner: str, facts: Iterable[CandidateFacts]) -> None:
        if self.entries <= 0:
            return
        with self._lock:
            for fact in facts:
                self._facts[(owner, fact.seq)] = fact
            while len(self._facts) > self.entries:
                self._facts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._facts)
