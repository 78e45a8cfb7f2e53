"""The hot-query cache: per-owner generations, freshness, LRU bound in bytes, counters."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from cluster.memory.cache import QueryCache
from cluster.memory.models import MatchExplanation, MemoryHit, MemoryQueryResult, MemoryRecord
from cluster.memory.policy import MemoryScope, MemoryState

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
EMPTY = MemoryQueryResult(hits=(), candidates=0)


def result_expiring(at: datetime) -> MemoryQueryResult:
    record = MemoryRecord(
        memory_id=uuid.uuid4(),
        key="k",
        value="v",
        scope=MemoryScope.user(),
        entity=None,
        metadata={},
        source_ids=(),
        version=1,
        state=MemoryState.CURRENT,
        archived=False,
        created_at=T0,
        valid_from=T0,
        expires_at=at,
    )
    why = MatchExplanation(
        entity=None,
        valid_at=T0,
        dense_similarity=0.9,
        dense_rank=1,
        lexical_score=None,
        lexical_rank=None,
        fused=0.01,
        activity=1.0,
    )
    return MemoryQueryResult(hits=(MemoryHit(memory=record, score=0.01, why=why),), candidates=1)


def test_a_write_invalidates_only_that_owners_entries() -> None:
    cache = QueryCache()
    cache.put("alice", "q", 0, EMPTY, T0)
    cache.put("bob", "q", 0, EMPTY, T0)
    # A write of alice's bumped her generation (in SQL); bob's is unchanged.
    assert cache.get("alice", "q", 1, T0) is None
    assert cache.get("bob", "q", 0, T0) is EMPTY
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.hit_rate == 0.5


def test_entries_go_stale_with_time_and_with_the_first_expiring_hit() -> None:
    cache = QueryCache(ttl=timedelta(seconds=30))
    cache.put("alice", "q", 0, EMPTY, T0)
    assert cache.get("alice", "q", 0, T0 + timedelta(seconds=29)) is EMPTY
    assert cache.get("alice", "q", 0, T0 + timedelta(seconds=30)) is None
    cache.put("alice", "q2", 0, result_expiring(T0 + timedelta(seconds=5)), T0)
    assert cache.get("alice", "q2", 0, T0 + timedelta(seconds=6)) is None


def entry_bytes(key: str, result: MemoryQueryResult) -> int:
    return len(key) + len(result.model_dump_json())


def test_the_cache_is_bounded_and_can_be_disabled() -> None:
    cache = QueryCache(max_bytes=2 * entry_bytes("a", EMPTY))
    for name in ("a", "b", "c"):
        cache.put("alice", name, 0, EMPTY, T0)
    assert cache.get("alice", "a", 0, T0) is None
    assert cache.get("alice", "c", 0, T0) is EMPTY
    off = QueryCache(max_bytes=0)
    off.put("alice", "a", 0, EMPTY, T0)
    assert off.get("alice", "a", 0, T0) is None


def test_the_bound_counts_bytes_so_one_large_answer_displaces_many_small_ones() -> None:
    large = result_expiring(T0 + timedelta(days=1)).model_copy(update={"candidates": 10**9})
    cache = QueryCache(max_bytes=3 * entry_bytes("a", EMPTY) + entry_bytes("big", large) - 1)
    for name in ("a", "b", "c"):
        cache.put("alice", name, 0, EMPTY, T0)
    assert len(cache) == 3
    cache.put("alice", "big", 0, large, T0)
    assert cache.get("alice", "big", 0, T0) is large
    assert cache.bytes <= cache.max_bytes
    assert len(cache) < 4
    cache.put("alice", "huge", 0, large.model_copy(update={"hits": large.hits * 100}), T0)
    assert cache.get("alice", "huge", 0, T0) is None  # larger than the whole cache: never stored


def test_an_entry_is_not_served_to_a_query_earlier_than_the_one_that_computed_it() -> None:
    cache = QueryCache()
    cache.put("alice", "q", 0, EMPTY, T0)
    assert cache.get("alice", "q", 0, T0 - timedelta(seconds=1)) is None
