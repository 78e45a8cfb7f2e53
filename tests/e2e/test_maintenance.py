"""Memory maintenance as the service schedules it: one pass promotes, archives and purges."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from cluster.core.errors import NotFound
from cluster.core.types import utcnow
from cluster.memory.maintenance import MaintenanceIncomplete, run_maintenance
from cluster.memory.models import MemoryObserve, MemoryQuery, MemoryWrite, Turn
from cluster.memory.policy import Ttl
from cluster.services import Services

pytestmark = pytest.mark.milvus


def test_one_pass_purges_what_expired_and_keeps_the_rest(services: Services) -> None:
    memory = services.memory
    now = utcnow()
    brief = memory.apply_write("me", MemoryWrite(key="otp", value="one-time code 4821", ttl=Ttl.window(60)), now=now)
    kept = memory.apply_write("me", MemoryWrite(key="city", value="lives in Lisbon"), now=now)
    summary = run_maintenance(memory, now=now + timedelta(minutes=5))
    assert summary.purged == 1
    remaining = {
        h.memory.memory_id for h in memory.run_query("me", MemoryQuery(query="code Lisbon", top_k=10), now=now).hits
    }
    assert brief.memory_id not in remaining
    assert kept.memory_id in remaining


def test_one_pass_promotes_a_turn_that_later_turns_refer_to(services: Services) -> None:
    memory = services.memory
    start = utcnow() - timedelta(days=2)
    memory.apply_observe(
        "me",
        MemoryObserve(
            session_id="s1", turn=Turn(speaker="user", text="My daughter Alma starts violin lessons in Porto", at=start)
        ),
    )
    memory.apply_observe(
        "me",
        MemoryObserve(
            session_id="s2",
            turn=Turn(speaker="user", text="Alma loved her violin lessons in Porto", at=start + timedelta(days=1)),
        ),
    )
    summary = run_maintenance(memory)
    assert summary.promoted >= 1
    hits = memory.run_query("me", MemoryQuery(query="Alma violin lessons")).hits
    assert any("daughter" in str(h.memory.value) for h in hits)


def test_an_owner_whose_reevaluation_fails_stops_no_one_else(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fault is injected: no known input breaks re-evaluation any more (a turn referred to by more
    # turns than a memory's provenance holds did, and failed the whole pass for every owner).
    memory = services.memory
    start = utcnow() - timedelta(days=2)
    for owner in ("broken", "fine"):
        memory.apply_observe(
            owner,
            MemoryObserve(session_id="s1", turn=Turn(text="My daughter Alma starts violin lessons in Porto", at=start)),
        )
        memory.apply_observe(
            owner,
            MemoryObserve(
                session_id="s2", turn=Turn(text="Alma loved her violin lessons in Porto", at=start + timedelta(days=1))
            ),
        )
    brief = memory.apply_write("fine", MemoryWrite(key="otp", value="code 4821", ttl=Ttl.window(60)), now=start)
    one_owner = memory.promotions._reevaluate_owner

    def failing(who: str, now: datetime) -> tuple[int, list[uuid.UUID]]:
        if who == "broken":
            raise RuntimeError("a rule broke on this owner's turns")
        return one_owner(who, now)

    monkeypatch.setattr(memory.promotions, "_reevaluate_owner", failing)
    with pytest.raises(MaintenanceIncomplete, match="'broken'"):
        run_maintenance(memory)
    # The other owner's turn was promoted and the rest of the pass ran.
    assert any(
        "daughter" in str(h.memory.value)
        for h in memory.run_query("fine", MemoryQuery(query="Alma violin lessons")).hits
    )
    with pytest.raises(NotFound):
        memory.get("fine", brief.memory_id)
    # The failed owner's turns stayed pending: the next pass promotes them.
    assert memory.run_query("broken", MemoryQuery(query="Alma violin lessons")).hits == ()
    monkeypatch.undo()
    assert run_maintenance(memory).promoted >= 1
    assert any(
        "daughter" in str(h.memory.value)
        for h in memory.run_query("broken", MemoryQuery(query="Alma violin lessons")).hits
    )
