"""Concurrent updates of one version: exactly one wins, the others are refused naming the version
(docs/reliability.md, "Concurrent writes of one thing")."""

from __future__ import annotations

import functools

from cluster.core.errors import Conflict
from cluster.memory.models import MemoryQuery, MemoryUpdate, MemoryWrite, MemoryWriteResult
from cluster.memory.policy import MemoryState
from cluster.memory.service import MemoryService
from tests.concurrent import at_once

CALLERS = 8
ROUNDS = 3


def test_concurrent_updates_of_one_version_make_one_winner(memory: MemoryService) -> None:
    current = memory.apply_write("alice", MemoryWrite(key="city", value="Alice lives in Lisbon"))
    for round_ in range(ROUNDS):
        values = [f"Alice lives in city {round_}-{i}" for i in range(CALLERS)]
        # Embedded up front, so the updates reach their transactions together rather than one by one.
        memory.writes.embed(values, [{}] * CALLERS)
        target = current.memory_id
        outcomes = at_once(
            [
                functools.partial(memory.apply_update, "alice", MemoryUpdate(memory_id=target, value=value))
                for value in values
            ]
        )
        won = [o for o in outcomes if isinstance(o, MemoryWriteResult)]
        refused = [o for o in outcomes if isinstance(o, Conflict)]
        assert (len(won), len(refused)) == (1, CALLERS - 1), outcomes
        winner = won[0]
        assert (winner.version, winner.superseded_id) == (current.version + 1, current.memory_id)
        for conflict in refused:
            assert f"version {current.version}" in str(conflict)
            assert str(current.memory_id) in str(conflict)
        current = winner
    # One chain of versions, each superseding the one before: nothing was silently replaced.
    history = memory.run_query("alice", MemoryQuery(query="where does Alice live", include_history=True, top_k=20))
    versions = sorted((h.memory.version, h.memory.state) for h in history.hits)
    assert versions == [(v, MemoryState.SUPERSEDED) for v in range(1, ROUNDS + 1)] + [(ROUNDS + 1, MemoryState.CURRENT)]
