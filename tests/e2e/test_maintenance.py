"""Memory maintenance as the service schedules it: one pass promotes, archives and purges."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.core.types import utcnow
from cluster.memory.maintenance import run_maintenance
from cluster.memory.models import MemoryWrite, Turn
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
    remaining = {h.memory.memory_id for h in memory.query("me", "code Lisbon", top_k=10, now=now).hits}
    assert brief.memory_id not in remaining
    assert kept.memory_id in remaining


def test_one_pass_promotes_a_turn_that_later_turns_refer_to(services: Services) -> None:
    memory = services.memory
    start = utcnow() - timedelta(days=2)
    memory.observe("me", "s1", Turn(speaker="user", text="My daughter Alma starts violin lessons in Porto", at=start))
    memory.observe(
        "me", "s2", Turn(speaker="user", text="Alma loved her violin lessons in Porto", at=start + timedelta(days=1))
    )
    summary = run_maintenance(memory)
    assert summary.promoted >= 1
    hits = memory.query("me", "Alma violin lessons").hits
    assert any("daughter" in str(h.memory.value) for h in hits)
