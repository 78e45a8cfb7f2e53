"""Milvus and embedder fixtures for the experience tests.

Every test that uses ``milvus`` runs twice: on the session's Lite file, served by a
``MilvusLiteServer`` this test process owns, exactly as the embedded deployment runs it; then, with
Postgres, on the session's Milvus server; on both, the collections the tests made are emptied
after each test (both fixtures: tests/milvus_server.py). The ONNX embedder loads once per session.
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
from tests.milvus_server import emptied_after


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    onnx = OnnxMiniLMEmbedder()
    onnx.load()
    return CachedEmbedder(onnx, maxsize=4096)


@pytest.fixture
def milvus_server(tmp_path: Path) -> Iterator[MilvusLiteServer]:
    with MilvusLiteServer(tmp_path / "milvus.db") as server:
        yield server


@pytest.fixture(params=["lite", pytest.param("server", marks=pytest.mark.milvus_server)])
def milvus(request: pytest.FixtureRequest) -> Iterator[MilvusClient]:
    """A client of the session's served Lite file, then of the session's Milvus server."""
    if request.param == "server":
        yield request.getfixturevalue("milvus_server_client")
        return
    served: MilvusLiteServer = request.getfixturevalue("shared_lite")
    client = open_milvus(str(served.path))
    try:
        with emptied_after(client):
            yield client
    finally:
        client.close()


@pytest.fixture
def experience(database: Database, milvus: MilvusClient, embedder: CachedEmbedder) -> ExperienceService:
    """The service on this test's SQL database (SQLite, then Postgres) and the Milvus of ``milvus``."""
    return ExperienceService(database, MilvusExperienceIndex(milvus), embedder)
