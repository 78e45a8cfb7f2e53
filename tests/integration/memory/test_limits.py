"""Size limits: values, metadata and context are bounded (configurably), answers stay lean."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.core.errors import InvalidInput, LimitExceeded
from cluster.memory.models import MAX_TOP_K, MemoryQuery, Turn
from cluster.memory.policy import MemoryLimits
from cluster.memory.service import MemoryService
from cluster.services import build_memory_service
from cluster.settings import load_settings
from cluster.storage.migrate import upgrade
from tests.integration.memory.conftest import T0

pytestmark = pytest.mark.milvus

LIMIT = MemoryLimits().max_value_bytes


def test_a_value_over_the_limit_is_refused_with_the_field_and_the_limit(memory: MemoryService) -> None:
    with pytest.raises(LimitExceeded, match=rf"value is {LIMIT + 1} bytes; the limit is {LIMIT}.*max_value_bytes"):
        memory.write("alice", "big", "x" * (LIMIT + 1), now=T0)
    # Bytes, not characters: three bytes each in UTF-8.
    with pytest.raises(LimitExceeded, match="value"):
        memory.write("alice", "big", "中" * (LIMIT // 3 + 1), now=T0)
    with pytest.raises(LimitExceeded, match="value"):
        memory.write("alice", "big", {"blob": "x" * LIMIT}, now=T0)
    assert memory.write("alice", "fits", "x" * LIMIT, now=T0)


def test_metadata_and_context_have_limits_of_their_own(memory: MemoryService) -> None:
    with pytest.raises(LimitExceeded, match=r"metadata.*max_metadata_bytes"):
        memory.write("alice", "k", "v", metadata={"note": "x" * 5000}, now=T0)
    with pytest.raises(LimitExceeded, match=r"context.*max_context_bytes"):
        memory.write("alice", "k", "v", context="x" * (16 * 1024 + 1), now=T0)


def test_updates_and_logged_turns_are_bounded_too(memory: MemoryService) -> None:
    memory_id = memory.write("alice", "k", "small", now=T0)
    with pytest.raises(LimitExceeded, match="value"):
        memory.update("alice", memory_id, "x" * (LIMIT + 1))
    with pytest.raises(LimitExceeded, match="value"):
        memory.observe("alice", "s1", Turn(text="remember " + "x" * LIMIT), now=T0)
    assert memory.get("alice", memory_id).value == "small"


def test_top_k_is_capped() -> None:
    assert MemoryQuery(query="q", top_k=MAX_TOP_K).top_k == MAX_TOP_K
    with pytest.raises(ValueError, match="less than or equal to 50"):
        MemoryQuery(query="q", top_k=MAX_TOP_K + 1)


def test_the_limits_come_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_MEMORY__MAX_VALUE_BYTES", "100")
    monkeypatch.setenv("HINDSIGHT_MEMORY__CACHE_BYTES", "4096")
    settings = load_settings(data_dir=tmp_path)
    upgrade(settings.sql_url())
    service = build_memory_service(settings)
    try:
        assert service.cache.max_bytes == 4096
        with pytest.raises(LimitExceeded, match="the limit is 100 bytes"):
            service.write("alice", "k", "x" * 101, now=T0)
        service.write("alice", "k", "x" * 100, now=T0)
    finally:
        service.index.client.close()
        service.db.dispose()


def test_an_unfilterable_entity_is_refused_before_anything_is_stored(memory: MemoryService) -> None:
    with pytest.raises(InvalidInput, match="entity"):
        memory.write("alice", "k", "v", entity="bob\nsmith", now=T0)
    with pytest.raises(InvalidInput):
        memory.write("ali\tce", "k", "v", now=T0)
