"""Milvus Lite and embedder fixtures for the experience tests.

Every test gets its own Lite file in ``tmp_path``, served by a ``MilvusLiteServer`` this test
process owns, exactly as the deployment runs it. The ONNX embedder loads once per session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pymilvus import MilvusClient

from cluster.embedding import CachedEmbedder, OnnxMiniLMEmbedder
from cluster.experience.index import MilvusExperienceIndex
from cluster.experience.service import ExperienceService
from cluster.storage.db import Database
from cluster.storage.milvus import MilvusLiteServer, open_milvus


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    onnx = OnnxMiniLMEmbedder()
    onnx.load()
    return CachedEmbedder(onnx, maxsize=4096)


@pytest.fixture
def milvus_server(tmp_path: Path) -> Iterator[MilvusLiteServer]:
    with MilvusLiteServer(tmp_path / "milvus.db") as server:
        yield server


@pytest.fixture
def milvus(milvus_server: MilvusLiteServer) -> Iterator[MilvusClient]:
    client = open_milvus(str(milvus_server.path))
    yield client
    client.close()


@pytest.fixture
def experience(database: Database, milvus: MilvusClient, embedder: CachedEmbedder) -> ExperienceService:
    """The service on this test's SQL database (SQLite, then Postgres) and its own Lite file."""
    return ExperienceService(database, MilvusExperienceIndex(milvus), embedder)
