"""Hot-query cache: owner-scoped, dropped for an owner whenever that owner's memories change."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime, timedelta

from cluster.memory.models import MemoryQueryResult


class QueryCache:
    """LRU of query results keyed by (owner, query); thread-safe.

    Invalidation is per owner and O(1): each owner has a generation number that every write bumps,
    and an entry from an older generation is a miss. Entries also go stale after ``ttl`` (and no
    later than the earliest expiry among their hits), since time alone changes what a query may
    return. ``hits`` and ``misses`` feed the cache-hit-rate metric.
    """

    def __init__(self, maxsize: int = 1024, ttl: timedelta = timedelta(seconds=30)) -> None:
        self.maxsize = maxsize
        self.ttl = ttl
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, str], tuple[int, datetime, MemoryQueryResult]] = OrderedDict()
        self._generations: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, owner: str, key: str, now: datetime) -> MemoryQueryResult | None:
        if self.maxsize <= 0:
            return None
        with self._lock:
            entry = self._entries.get((owner, key))
            if entry is not None:
                generation, fresh_until, result = entry
                if generation == self._generations.get(owner, 0) and now < fresh_until:
                    self._entries.move_to_end((owner, key))
                    self.hits += 1
                    return result
                del self._entries[(owner, key)]
            self.misses += 1
            return None

    def put(self, owner: str, key: str, result: MemoryQueryResult, now: datetime) -> None:
        if self.maxsize <= 0:
            return
        fresh_until = now + self.ttl
        for hit in result.hits:
            if hit.memory.expires_at is not None and hit.memory.expires_at < fresh_until:
                fresh_until = hit.memory.expires_at
        with self._lock:
            self._entries[(owner, key)] = (self._generations.get(owner, 0), fresh_until, result)
            self._entries.move_to_end((owner, key))
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def invalidate(self, owner: str) -> None:
        with self._lock:
            self._generations[owner] = self._generations.get(owner, 0) + 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
