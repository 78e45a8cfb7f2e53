"""The record of which embedder built each vector collection, and the warning when it changes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cluster.embedding import embedder_identity
from cluster.services import build_services
from cluster.settings import EmbeddingSettings, Settings
from cluster.storage.db import Database
from cluster.storage.vector_builds import check_vector_builds, record_vector_build, vector_builds


def test_first_check_records_and_a_different_embedder_is_reported(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    assert check_vector_builds(database, ["memory_vectors"], "model-a int8") == {}
    assert vector_builds(database) == {"memory_vectors": "model-a int8"}
    assert check_vector_builds(database, ["memory_vectors"], "model-a int8") == {}
    with caplog.at_level(logging.WARNING):
        assert check_vector_builds(database, ["memory_vectors"], "model-a fp32") == {"memory_vectors": "model-a int8"}
    assert "hindsight reindex --what all" in caplog.text
    # Checking never overwrites: only a rebuild records a new embedder.
    assert vector_builds(database) == {"memory_vectors": "model-a int8"}
    record_vector_build(database, "memory_vectors", "model-a fp32")
    assert check_vector_builds(database, ["memory_vectors"], "model-a fp32") == {}
    assert vector_builds(database) == {"memory_vectors": "model-a fp32"}
    # A collection without a record is recorded beside one that has it; only the differing one is reported.
    assert check_vector_builds(database, ["memory_vectors", "experience_library"], "model-b") == {
        "memory_vectors": "model-a fp32"
    }
    assert vector_builds(database) == {"memory_vectors": "model-a fp32", "experience_library": "model-b"}


def test_identity_names_what_changes_the_vectors() -> None:
    int8, fp32 = EmbeddingSettings(quantized=True), EmbeddingSettings(quantized=False)
    assert embedder_identity(int8) != embedder_identity(fp32)
    assert embedder_identity(int8) == embedder_identity(EmbeddingSettings(quantized=True, threads=2))
    remote = EmbeddingSettings(provider="openai", url="http://127.0.0.1:1", model="m", dimension=8)
    assert embedder_identity(remote) == embedder_identity(remote.model_copy(update={"url": "http://other:2"}))
    assert embedder_identity(remote) != embedder_identity(remote.model_copy(update={"model": "n"}))


def test_services_started_with_another_embedder_report_stale_vectors_until_rebuilt(tmp_path: Path) -> None:
    def start(quantized: bool) -> dict[str, str]:
        services = build_services(Settings(data_dir=tmp_path, embedding=EmbeddingSettings(quantized=quantized)))
        try:
            found = services.stale_vectors()
            scrape = services.metrics.render().decode()
            for collection in ("memory_vectors", "experience_library"):
                flag = 1.0 if collection in found else 0.0
                assert f'hindsight_vectors_stale{{collection="{collection}"}} {flag}' in scrape
            if not quantized and "memory_vectors" in found:
                services.memory.reindex("someone")  # one owner's rebuild says nothing of the others'
                assert "memory_vectors" in services.stale_vectors()
                services.memory.reindex()  # as `hindsight reindex --what memories` does
                assert set(services.stale_vectors()) == {"experience_library"}
                assert 'hindsight_vectors_stale{collection="memory_vectors"} 0.0' in services.metrics.render().decode()
            return found
        finally:
            services.close()

    int8 = embedder_identity(EmbeddingSettings(quantized=True))
    assert start(quantized=True) == {}
    assert start(quantized=False) == {"memory_vectors": int8, "experience_library": int8}
    assert start(quantized=False) == {"experience_library": int8}
    assert start(quantized=True) == {"memory_vectors": embedder_identity(EmbeddingSettings(quantized=False))}
