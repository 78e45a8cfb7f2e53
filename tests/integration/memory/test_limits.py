"""Size limits: values, metadata and context are bounded (configurably), answers stay lean."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.core.errors import InvalidInput, LimitExceeded
from cluster.memory.models import MAX_TOP_K, MemoryObserve, MemoryQuery, MemoryUpdate, MemoryWrite, Turn
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
        memory.apply_write("alice", MemoryWrite(key="big", value="x" * (LIMIT + 1)), now=T0)
    # Bytes, not characters: three bytes each in UTF-8.
    with pytest.raises(LimitExceeded, match="value"):
        memory.apply_write("alice", MemoryWrite(key="big", value="中" * (LIMIT // 3 + 1)), now=T0)
    with pytest.raises(LimitExceeded, match="value"):
        memory.apply_write("alice", MemoryWrite(key="big", value={"blob": "x" * LIMIT}), now=T0)
    assert memory.apply_write("alice", MemoryWrite(key="fits", value="x" * LIMIT), now=T0).memory_id


def test_metadata_and_context_have_limits_of_their_own(memory: MemoryService) -> None:
    with pytest.raises(LimitExceeded, match=r"metadata.*max_metadata_bytes"):
        memory.apply_write("alice", MemoryWrite(key="k", value="v", metadata={"note": "x" * 5000}), now=T0)
    with pytest.raises(LimitExceeded, match=r"context.*max_context_bytes"):
        memory.apply_write("alice", MemoryWrite(key="k", value="v", context="x" * (16 * 1024 + 1)), now=T0)


def test_updates_and_logged_turns_are_bounded_too(memory: MemoryService) -> None:
    memory_id = memory.apply_write("alice", MemoryWrite(key="k", value="small"), now=T0).memory_id
    with pytest.raises(LimitExceeded, match="value"):
        memory.apply_update("alice", MemoryUpdate(memory_id=memory_id, value="x" * (LIMIT + 1)))
    with pytest.raises(LimitExceeded, match="value"):
        memory.apply_observe("alice", MemoryObserve(session_id="s1", turn=Turn(text="remember " + "x" * LIMIT)), now=T0)
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
            service.apply_write("alice", MemoryWrite(key="k", value="x" * 101), now=T0)
        service.apply_write("alice", MemoryWrite(key="k", value="x" * 100), now=T0)
    finally:
        service.index.client.close()
        service.db.dispose()


def test_an_unfilterable_entity_is_refused_before_anything_is_stored(memory: MemoryService) -> None:
    with pytest.raises(InvalidInput, match="entity"):
        memory.apply_write("alice", MemoryWrite(key="k", value="v", entity="bob\nsmith"), now=T0)
    with pytest.raises(InvalidInput):
        memory.apply_write("ali\tce", MemoryWrite(key="k", value="v"), now=T0)
