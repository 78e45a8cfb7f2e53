"""Per-owner state a process keeps and grows from the owner's memories written since it last looked.

The entity vocabulary and the expansion's term space are both built from an owner's rows, only ever
grow, and are read by every query: each is kept per owner with the newest ``seq`` it has read and
the owner's generation it was grown at, so a query whose snapshot shows the same generation reads
nothing, and any other reads only the rows written since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
A = TypeVar("A")


class PerOwner(Generic[T]):
    """At most ``owners`` values, each made by ``make`` and grown by ``get``; the least recently used
    go first, also while the values' summed ``size`` is above ``max_size`` (the one just used stays)."""

    def __init__(
        self,
        make: Callable[[], T],
        owners: int,
        size: Callable[[T], int] | None = None,
        max_size: int | None = None,
    ) -> None:
        self._make = make
        self._owners = owners
        self._size = size
        self._max_size = max_size
        self._entries: OrderedDict[str, tuple[int, int | None, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        owner: str,
        load: Callable[[T, int], tuple[A, int]],
        add: Callable[[T, A], None],
        generation: int | None = None,
    ) -> T:
        """The owner's value, grown first unless ``generation`` (read in the caller's snapshot) is the
        one it was last grown at. ``load(value, after_seq)`` returns what the rows newer than
        ``after_seq`` add and the newest seq it saw; it runs outside the lock (it reads SQL, perhaps
        embeds), ``add(value, found)`` inside it, so adds to one value never interleave.
        """
        with self._lock:
            entry = self._entries.get(owner)
            seen, grown_at, value = entry if entry is not None else (0, None, self._make())
            if generation is not None and generation == grown_at:
                self._entries.move_to_end(owner)
                return value
        found, newest = load(value, seen)
        with self._lock:
            # Another query may have grown the same value meanwhile: adding is idempotent.
            entry = self._entries.get(owner)
            current = entry[2] if entry is not None else value
            add(current, found)
            self._entries[owner] = (max(newest, seen), generation, current)
            self._entries.move_to_end(owner)
            while len(self._entries) > self._owners or (len(self._entries) > 1 and self._oversized()):
                self._entries.popitem(last=False)
            return current

    def _oversized(self) -> bool:
        if self._size is None or self._max_size is None:
            return False
        size = self._size
        return sum(size(value) for _, _, value in self._entries.values()) > self._max_size
