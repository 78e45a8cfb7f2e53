"""Lifetimes and ``as_of`` given with UTC offsets mean the same instants on SQLite and Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cluster.memory.models import MemoryQuery, MemoryWrite
from cluster.memory.policy import Ttl
from cluster.memory.service import MemoryService
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

PLUS_14 = timezone(timedelta(hours=14))
MINUS_10 = timezone(timedelta(hours=-10))


def ids(memory: MemoryService, query: str, *, now: datetime, as_of: datetime | None = None) -> list[object]:
    return [h.memory.memory_id for h in memory.run_query("alice", MemoryQuery(query=query, as_of=as_of), now=now).hits]


def test_a_window_ending_at_a_plus_14_offset_expires_at_that_instant(memory: MemoryService) -> None:
    until = (T0 + timedelta(hours=1)).astimezone(PLUS_14)
    meeting = memory.apply_write(
        "alice",
        MemoryWrite(key="meeting", value="Alice meets the design team", ttl=Ttl(kind="window", valid_until=until)),
        now=T0,
    ).memory_id
    assert memory.get("alice", meeting).expires_at == T0 + timedelta(hours=1)
    assert ids(memory, "design team meeting", now=T0 + timedelta(minutes=59)) == [meeting]
    assert ids(memory, "design team meeting", now=T0 + timedelta(minutes=61)) == []
    assert memory.purge_expired(T0 + timedelta(minutes=61)).changed == 1


def test_a_window_starting_at_a_minus_10_offset_is_visible_from_that_instant(memory: MemoryService) -> None:
    start = T0.astimezone(MINUS_10)
    trip = memory.apply_write(
        "alice",
        MemoryWrite(
            key="trip", value="Alice is travelling in Hangzhou", ttl=Ttl(kind="window", valid_from=start, seconds=3600)
        ),
        now=T0,
    ).memory_id
    record = memory.get("alice", trip)
    assert record.valid_from == T0
    assert record.valid_from.utcoffset() == timedelta(0)
    assert ids(memory, "where is Alice travelling", now=T0 - timedelta(minutes=1)) == []
    assert ids(memory, "where is Alice travelling", now=T0 + timedelta(minutes=1)) == [trip]


def test_as_of_with_an_offset_answers_at_that_instant(memory: MemoryService) -> None:
    first = memory.apply_write("alice", MemoryWrite(key="city", value="Alice lives in Lisbon"), now=T0).memory_id
    second = memory.apply_write(
        "alice", MemoryWrite(key="city", value="Alice moved to Porto"), now=T0 + timedelta(hours=2)
    ).memory_id
    later = T0 + timedelta(days=1)
    # One hour after the first write, in two spellings far from UTC.
    for zone in (PLUS_14, MINUS_10):
        as_of = (T0 + timedelta(hours=1)).astimezone(zone)
        assert ids(memory, "where does Alice live", as_of=as_of, now=later) == [first]
    assert ids(memory, "where does Alice live", as_of=(T0 + timedelta(hours=3)).astimezone(PLUS_14), now=later) == [
        second
    ]
