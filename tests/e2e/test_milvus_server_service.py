"""The deployed service on a Milvus server and Postgres, the production stores, driven over MCP.

The session's Milvus server (tests/milvus_server.py) stands in for the production one; Ray is the
session's shared instance. Settings pick the server by its URI (``milvus_uri``), as
``HINDSIGHT_MILVUS_URI`` does in a deployment, so no Lite file is opened or served.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ray import serve

from cluster.client import http_client
from cluster.net import free_port
from cluster.runner import RunningService, start_service, wait_until_analysed
from cluster.serve_config import AttributionConfig, HttpConfig, ServeConfig
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.storage.milvus import open_milvus
from tests.e2e.loop import call, check_served_and_feedback, query, record_lessons
from tests.milvus_server import emptied_after

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.slow, pytest.mark.milvus_server, pytest.mark.postgres]

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


@pytest.fixture
def settings(tmp_path: Path, postgres_emptied_after: str, milvus_server_uri: str) -> Iterator[Settings]:
    client = open_milvus(milvus_server_uri, dedicated=True)
    try:
        with emptied_after(client):
            yield Settings(
                data_dir=tmp_path, database_url=postgres_emptied_after, milvus_uri=milvus_server_uri, auth_tokens=TOKENS
            )
    finally:
        client.close()


@pytest.fixture
def running(ray_session: None, settings: Settings) -> Iterator[RunningService]:
    serve.shutdown()  # a Serve instance keeps its first port; this test takes a free one
    config = ServeConfig(
        http=HttpConfig(port=free_port()), attribution=AttributionConfig(workers=1, poll_interval_s=0.05)
    )
    service = start_service(settings, config)
    try:
        yield service
    finally:
        service.stop()
        serve.shutdown()


async def test_agents_learn_and_remember_through_a_milvus_server(running: RunningService, settings: Settings) -> None:
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{running.url}/health")
    assert health.json()["checks"] == {"sql": True, "milvus": True}
    assert running.milvus_server is None  # nothing embedded: the URI is the server's
    assert not (settings.data_dir / "milvus.db").exists()
    async with http_client(running.mcp_url, "token-alice") as alice:
        await record_lessons(alice)
        db = Database(settings.sql_url())
        try:
            await wait_until_analysed(db, 120)
        finally:
            db.dispose()
        await check_served_and_feedback(alice)
        written = await call(alice, "memory_write", {"key": "city", "value": "The customer lives in Lisbon"})
        found = (await call(alice, "memory_query", {"query": "where does the customer live"}))["memories"]
        assert [m["memory_id"] for m in found] == [written["memory_id"]]
    async with http_client(running.mcp_url, "token-bob") as bob:
        assert (await query(bob, min_confidence=0.0))["templates"] == []
        assert (await call(bob, "memory_query", {"query": "where does the customer live"}))["memories"] == []
