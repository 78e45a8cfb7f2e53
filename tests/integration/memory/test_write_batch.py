"""Concurrent writes served as one batch: each caller gets its own result or its own error."""

from __future__ import annotations

import pytest

from cluster.core.errors import HindsightError, LimitExceeded
from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.memory.policy import MemoryState
from cluster.memory.service import MemoryService


def test_a_batch_of_several_owners_lands_like_single_writes(memory: MemoryService) -> None:
    items = [
        ("alice", MemoryWrite(key="tz", value="Alice works in Berlin time")),
        ("bob", MemoryWrite(key="tz", value="Bob works in Tokyo time")),
        ("alice", MemoryWrite(key="editor", value="Alice edits with vim")),
        ("alice", MemoryWrite(key="tz", value="Alice works in Lisbon time now")),
    ]
    results = memory.apply_write_batch(items)
    assert not any(isinstance(r, HindsightError) for r in results)
    first, _bob, _editor, second = results
    assert not isinstance(first, HindsightError)
    assert not isinstance(second, HindsightError)
    # Two writes of one key in one batch chain like two calls: the second supersedes the first.
    assert (first.version, second.version, second.superseded_id) == (1, 2, first.memory_id)
    assert memory.get("alice", first.memory_id).state is MemoryState.SUPERSEDED
    hits = memory.run_query("alice", MemoryQuery(query="which time zone does Alice work in", top_k=5)).hits
    values = [h.memory.value for h in hits]
    assert "Alice works in Lisbon time now" in values
    assert "Alice works in Berlin time" not in values
    assert "Bob works in Tokyo time" not in values
    assert memory.index.seqs("bob")
    assert len(memory.index.seqs("alice")) == 3


def test_a_refused_write_fails_only_itself(memory: MemoryService) -> None:
    too_big = "x" * (memory.limits.max_value_bytes + 1)
    items = [
        ("alice", MemoryWrite(key="a", value="Alice likes green tea")),
        ("alice", MemoryWrite(key="b", value=too_big)),
        ("bad owner\n", MemoryWrite(key="c", value="nobody")),
        ("alice", MemoryWrite(key="d", value="Alice runs on Sundays")),
    ]
    ok_a, big, bad_owner, ok_d = memory.apply_write_batch(items)
    assert isinstance(big, LimitExceeded)
    assert isinstance(bad_owner, HindsightError)
    assert not isinstance(ok_a, HindsightError)
    assert not isinstance(ok_d, HindsightError)
    assert memory.get("alice", ok_a.memory_id).value == "Alice likes green tea"
    assert memory.get("alice", ok_d.memory_id).value == "Alice runs on Sundays"


def test_an_empty_batch_writes_nothing(memory: MemoryService) -> None:
    assert memory.apply_write_batch([]) == []


@pytest.mark.parametrize("count", [1, 12])
def test_batched_vectors_are_searchable(memory: MemoryService, count: int) -> None:
    items = [
        ("carol", MemoryWrite(key=f"k{i}", value=f"Carol's project number {i} ships in spring")) for i in range(count)
    ]
    results = memory.apply_write_batch(items)
    assert len(memory.index.seqs("carol")) == count
    assert len({r.memory_id for r in results if not isinstance(r, HindsightError)}) == count
