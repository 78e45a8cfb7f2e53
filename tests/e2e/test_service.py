"""The deployed service: `hindsight serve` on Ray Serve over Streamable HTTP, and `hindsight stdio`.

Both are driven by the official MCP client. Ray is shared by the whole session (see conftest).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import psutil
import pytest
from mcp import Client, StdioServerParameters
from ray import serve
from sqlalchemy import select

from cluster.client import http_client
from cluster.metrics import MULTIPROC_ENV
from cluster.net import free_port
from cluster.runner import RunningService, start_service, wait_until_analysed
from cluster.serve_config import AttributionConfig, HttpConfig, IngressConfig, ServeConfig
from cluster.settings import Settings
from cluster.storage.db import Database
from cluster.trajectories.tables import TrajectoryRow
from tests.cli_process import cli
from tests.e2e.loop import call, check_served_and_feedback, query, record_lessons, send
from tests.e2e.test_metrics import sample
from tests.unit.engine.builders import bulk_vs_single_runs

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.slow]

TOKENS = {"token-alice": "alice", "token-bob": "bob"}


@pytest.fixture(scope="session")
def serve_port() -> int:
    # Serve's HTTP proxy keeps its first port for the life of the Ray instance.
    return free_port()


def config(port: int, workers: int) -> ServeConfig:
    return ServeConfig(http=HttpConfig(port=port), attribution=AttributionConfig(workers=workers, poll_interval_s=0.05))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, auth_tokens=TOKENS)


@pytest.fixture
def running(ray_session: None, settings: Settings, serve_port: int) -> Iterator[RunningService]:
    service = start_service(settings, config(serve_port, workers=1))
    yield service
    service.stop()


async def drained(settings: Settings, timeout: float = 60) -> None:
    """Wait until the attribution queue is empty."""
    db = Database(settings.sql_url())
    try:
        await wait_until_analysed(db, timeout)
    finally:
        db.dispose()


async def test_health_and_metrics(running: RunningService) -> None:
    async with httpx.AsyncClient() as http:
        health = await http.get(f"{running.url}/health")
        assert health.status_code == 200
        assert health.json()["checks"] == {"sql": True, "milvus": True}
        metrics = (await http.get(f"{running.url}/metrics")).text
        # The read-only console is served by the same replicas, the owner from the bearer token.
        assert (await http.get(f"{running.url}/ui/")).status_code == 200
        who = await http.get(f"{running.url}/ui/api/whoami", headers={"Authorization": "Bearer token-bob"})
        assert who.json()["owner"] == "bob"
    for name in ("hindsight_tool_calls_total", "hindsight_attribution_queue_depth", "hindsight_memory_cache_hits"):
        assert name in metrics


async def test_a_bad_or_missing_token_is_refused_with_a_reason(running: RunningService) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient() as http:
        bad = await http.post(running.mcp_url, json=body, headers={"Authorization": "Bearer nope"})
        missing = await http.post(running.mcp_url, json=body)
    assert bad.status_code == 401
    assert bad.json()["detail"] == "unknown bearer token"
    assert missing.status_code == 401
    assert "missing bearer token" in missing.json()["detail"]


async def test_agents_learn_over_http_and_owners_stay_apart(running: RunningService, settings: Settings) -> None:
    async with http_client(running.mcp_url, "token-alice") as alice:
        await record_lessons(alice)
        await drained(settings)
        await check_served_and_feedback(alice)
    async with http_client(running.mcp_url, "token-bob") as bob:
        assert (await query(bob, min_confidence=0.0))["templates"] == []


async def test_memory_vectors_are_rebuilt_while_the_service_serves_the_embedded_files(
    running: RunningService, settings: Settings
) -> None:
    async with http_client(running.mcp_url, "token-alice") as alice:
        for key, value in (("tea", "Alice drinks green tea every morning"), ("car", "The car needs new tyres")):
            await call(alice, "memory_write", {"key": key, "value": value})
        # The command's own process reaches the Milvus Lite file through the server the service runs.
        done = await anyio.to_thread.run_sync(lambda: cli("reindex", "--what", "memories", data_dir=settings.data_dir))
        assert done.returncode == 0, done.stderr
        assert "2 memory vectors written" in done.stdout
        query = {"query": "a hot drink", "top_k": 1, "detail": True}
        hits = (await call(alice, "memory_query", query))["hits"]
        assert hits[0]["memory"]["key"] == "tea"
        assert hits[0]["why"]["dense_rank"] == 1


async def test_pending_analysis_survives_a_restart_and_runs_once(
    ray_session: None, settings: Settings, serve_port: int
) -> None:
    first = start_service(settings, config(serve_port, workers=0))
    try:
        async with http_client(first.mcp_url, "token-alice") as alice:
            ids = await record_lessons(alice)
    finally:
        first.stop()
    second = start_service(settings, config(serve_port, workers=2))
    try:
        await drained(settings)
        async with http_client(second.mcp_url, "token-alice") as alice:
            served = await query(alice, min_confidence=0.0)
    finally:
        second.stop()
    db = Database(settings.sql_url())
    with db.transaction() as session:
        rows = session.execute(
            select(TrajectoryRow.analysis_status, TrajectoryRow.analysis_attempts).where(
                TrajectoryRow.trajectory_id.in_(ids)
            )
        ).all()
    db.dispose()
    assert sorted(rows) == [("done", 1)] * len(ids)
    assert served["templates"]
    # Each run's evidence is counted once even though two workers raced for the batch.
    support = served["templates"][0]["template"]["support"]
    assert support["trajectories"] <= len(ids)


def listener(port: int) -> str:
    """The name of the process listening on ``port``."""
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid is not None:
            return psutil.Process(conn.pid).name()
    raise AssertionError(f"nobody listens on {port}")


@pytest.mark.parametrize("ingress", ["haproxy", "proxy"])
async def test_each_ingress_serves_two_replicas(ray_session: None, settings: Settings, ingress: str) -> None:
    serve.shutdown()  # Serve fixes its ingress when it starts
    port = free_port()
    service = start_service(
        settings,
        ServeConfig(
            http=HttpConfig(port=port, ingress=ingress),  # type: ignore[arg-type]
            ingress=IngressConfig(num_replicas=2),
            attribution=AttributionConfig(workers=0),
        ),
    )
    try:
        assert ("haproxy" in listener(port)) is (ingress == "haproxy")
        async with http_client(service.mcp_url, "token-alice") as alice:
            ids = [await send(alice, run) for run in bulk_vs_single_runs()[:4]]
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{service.url}/health")).status_code == 200
    finally:
        service.stop()
        serve.shutdown()
    db = Database(settings.sql_url())
    with db.read() as session:
        statuses = session.scalars(select(TrajectoryRow.status).where(TrajectoryRow.trajectory_id.in_(ids))).all()
    db.dispose()
    assert statuses == ["finalized"] * 4


def replica_urls(service: RunningService) -> list[str]:
    """The URLs of the replicas' own HTTP servers (Serve's direct ingress, behind HAProxy).

    Replicas are the Serve processes whose environment names this service's metrics directory.
    """
    directory = service.metrics_env[MULTIPROC_ENV]
    urls = []
    for process in psutil.process_iter():
        try:
            if "ServeReplica" not in " ".join(process.cmdline()) or process.environ().get(MULTIPROC_ENV) != directory:
                continue
            ports = [c.laddr.port for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for port in ports:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    urls.append(f"http://127.0.0.1:{port}")
            except httpx.HTTPError:
                continue  # one of the replica's Ray (gRPC) ports
    return sorted(urls)


async def scrape(url: str) -> str:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/metrics")
    assert response.status_code == 200
    return response.text


async def test_any_scrape_counts_every_replica_and_worker(
    ray_session: None, settings: Settings, serve_port: int
) -> None:
    service = start_service(
        settings,
        ServeConfig(
            http=HttpConfig(port=serve_port),
            ingress=IngressConfig(num_replicas=2),
            attribution=AttributionConfig(workers=1, poll_interval_s=0.05),
        ),
    )
    try:
        replicas = replica_urls(service)
        assert len(replicas) == 2
        # Each replica does its share of the work, addressed on its own port so none is left idle.
        writes = 0
        for url in replicas:
            async with http_client(f"{url}/mcp/", "token-alice") as alice:
                for _ in range(3):
                    value = f"note {uuid.uuid4()}"
                    await call(alice, "memory_write", {"key": f"k{writes}", "value": value})
                    writes += 1
        async with http_client(f"{replicas[0]}/mcp/", "token-alice") as alice:
            for _ in range(2):  # the first misses the cache, the second hits it
                await call(alice, "memory_query", {"query": "note"})
        async with http_client(f"{replicas[1]}/mcp/", "token-alice") as alice:
            await send(alice, bulk_vs_single_runs()[0])
        for url in [service.url, *replicas]:
            text = await scrape(url)
            assert sample(text, "hindsight_tool_calls_total", tool="memory_write", outcome="ok") == writes
            assert sample(text, "hindsight_memory_writes_total") == writes
            assert sample(text, "hindsight_tool_calls_total", tool="finalize_trajectory", outcome="ok") == 1
            assert sample(text, "hindsight_memory_cache_misses_total") == 1
            assert sample(text, "hindsight_memory_cache_hits_total") == 1
        # The worker counts after its batch commits: poll until its count arrives.
        with anyio.fail_after(60):
            while sample(text := await scrape(service.url), "hindsight_trajectories_analysed_total") < 1:
                await anyio.sleep(0.1)
        assert sample(text, "hindsight_attribution_batch_seconds_count") >= 1
        assert sample(text, "hindsight_attribution_queue_depth") == 0
        for url in replicas:
            assert sample(await scrape(url), "hindsight_trajectories_analysed_total") >= 1
    finally:
        service.stop()


async def test_a_change_through_one_replica_is_what_the_other_serves(
    ray_session: None, settings: Settings, serve_port: int
) -> None:
    service = start_service(
        settings,
        ServeConfig(
            http=HttpConfig(port=serve_port),
            ingress=IngressConfig(num_replicas=2),
            attribution=AttributionConfig(workers=0),
        ),
    )
    try:
        first, second = replica_urls(service)
        question = {"query": "which city does the customer live in"}

        async def values() -> list[str]:
            # Asked twice: the second answer may come from the replica's query cache.
            async with http_client(f"{second}/mcp/", "token-alice") as reader:
                answers = [await call(reader, "memory_query", question) for _ in range(2)]
            assert answers[0]["memories"] == answers[1]["memories"]
            return [m["value"] for m in answers[1]["memories"]]

        async with http_client(f"{first}/mcp/", "token-alice") as writer:
            written = await call(writer, "memory_write", {"key": "city", "value": "The customer lives in Lisbon"})
            assert await values() == ["The customer lives in Lisbon"]
            updated = await call(
                writer, "memory_update", {"memory_id": written["memory_id"], "value": "Lives in Porto"}
            )
            assert await values() == ["Lives in Porto"]
            superseding = await call(writer, "memory_write", {"key": "city", "value": "The customer moved to Faro"})
            assert superseding["superseded_id"] == updated["memory_id"]
            assert await values() == ["The customer moved to Faro"]
            await call(writer, "memory_forget", {"memory_id": superseding["memory_id"]})
            assert await values() == []
    finally:
        service.stop()


async def test_stdio_serves_the_same_tools_and_learns(tmp_path: Path) -> None:
    env = {**os.environ, "HINDSIGHT_DATA_DIR": str(tmp_path), "HINDSIGHT_LOCAL_OWNER": "me"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "cluster.cli", "stdio"], env=env)
    async with Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"record_trajectory_node", "finalize_trajectory", "query_experience", "memory_write"} <= tools
        await record_lessons(client)
        await drained(Settings(data_dir=tmp_path))
        await check_served_and_feedback(client)
