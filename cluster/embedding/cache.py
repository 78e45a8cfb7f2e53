"""A small LRU cache in front of any embedder: agents repeat the same query contexts a lot."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from cluster.core.ports import Embedder


class CachedEmbedder:
    """Wraps an ``Embedder``; texts seen recently are answered from memory. Thread-safe.

    Only the misses of a call go to the wrapped embedder, in one batch. ``hits`` and ``misses``
    count texts, for the cache-hit-rate metric.
    """

    def __init__(self, inner: Embedder, maxsize: int = 1024) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be positive")
        self.inner = inner
        self._maxsize = maxsize
        self._entries: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        found: dict[str, tuple[float, ...]] = {}
        with self._lock:
            for text in texts:
                cached = self._entries.get(text)
                if cached is not None:
                    self._entries.move_to_end(text)
                    found[text] = cached
            missing = list(dict.fromkeys(t for t in texts if t not in found))
            misses = sum(1 for t in texts if t not in found)
            self.misses += misses
            self.hits += len(texts) - misses
        if missing:
            computed = self.inner.embed(missing)
            with self._lock:
                for text, vector in zip(missing, computed, strict=True):
                    found[text] = tuple(vector)
                    self._entries[text] = found[text]
                    self._entries.move_to_end(text)
                while len(self._entries) > self._maxsize:
                    self._entries.popitem(last=False)
        return [list(found[t]) for t in texts]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def uncached(embedder: Embedder) -> Embedder:
    """The embedder behind this cache, if it is one: for a caller that keeps its own cache of what it
    embeds (its texts would only push others' out of this one, and count in its hit rate)."""
    return embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
