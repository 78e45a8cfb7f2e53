"""The candidates' facts cache: by owner and seq, LRU-bounded, never invalidated (facts never change)."""

from __future__ import annotations

from datetime import date

from cluster.memory.cache import FactsCache
from cluster.memory.ranking import CandidateFacts


def fact(seq: int) -> CandidateFacts:
    return CandidateFacts(seq=seq, day=date(2026, 1, 5), entities=frozenset({"Gina"}), text=f"memory {seq}")


def test_known_facts_are_split_from_the_ones_to_read() -> None:
    cache = FactsCache()
    cache.add("a", [fact(1), fact(2)])
    known, missing = cache.split("a", [1, 3, 2])
    assert set(known) == {1, 2}
    assert known[1] == fact(1)
    assert missing == [3]


def test_facts_are_kept_per_owner() -> None:
    cache = FactsCache()
    cache.add("a", [fact(1)])
    known, missing = cache.split("b", [1])
    assert known == {}
    assert missing == [1]


def test_the_least_recently_used_facts_go_first_and_zero_entries_keeps_none() -> None:
    cache = FactsCache(entries=2)
    cache.add("a", [fact(1), fact(2)])
    cache.split("a", [1])  # 1 is used again: 2 is now the oldest
    cache.add("a", [fact(3)])
    assert len(cache) == 2
    assert cache.split("a", [1, 2, 3])[1] == [2]
    off = FactsCache(entries=0)
    off.add("a", [fact(1)])
    assert len(off) == 0
