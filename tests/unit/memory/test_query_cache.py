"""The hot-query cache: per-owner invalidation, freshness, LRU bound, counters."""

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
    cache.put("alice", "q", EMPTY, T0)
    cache.put("bob", "q", EMPTY, T0)
    cache.invalidate("alice")
    assert cache.get("alice", "q", T0) is None
    assert cache.get("bob", "q", T0) is EMPTY
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.hit_rate == 0.5


def test_entries_go_stale_with_time_and_with_the_first_expiring_hit() -> None:
    cache = QueryCache(ttl=timedelta(seconds=30))
    cache.put("alice", "q", EMPTY, T0)
    assert cache.get("alice", "q", T0 + timedelta(seconds=29)) is EMPTY
    assert cache.get("alice", "q", T0 + timedelta(seconds=30)) is None
    cache.put("alice", "q2", result_expiring(T0 + timedelta(seconds=5)), T0)
    assert cache.get("alice", "q2", T0 + timedelta(seconds=6)) is None


def test_the_cache_is_bounded_and_can_be_disabled() -> None:
    cache = QueryCache(maxsize=2)
    for name in ("a", "b", "c"):
        cache.put("alice", name, EMPTY, T0)
    assert cache.get("alice", "a", T0) is None
    assert cache.get("alice", "c", T0) is EMPTY
    off = QueryCache(maxsize=0)
    off.put("alice", "a", EMPTY, T0)
    assert off.get("alice", "a", T0) is None
