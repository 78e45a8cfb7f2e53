"""The service on a Ray cluster of four nodes on this machine, run as a process of its own.

``python -m tests.e2e.multinode_cluster DATABASE_URL MILVUS_URI DATA_DIR`` starts a head node and
three worker nodes (``ray.cluster_utils.Cluster``): two declare the custom resource ``serve`` and
hold one Serve replica each, one declares ``attribution`` and holds the attribution worker; Postgres
and the Milvus server are behind them. It then drives the loop with the official MCP client,
removes one replica's node while agents write, and prints one JSON report on its last line for
tests/e2e/test_multinode.py to check. A process of its own because a driver joins one Ray instance
for its life, and the test session's is a single local node shared by every Ray test.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import ray
from ray.cluster_utils import Cluster
from sqlalchemy import text

from cluster.client import http_client
from cluster.net import free_port
from cluster.runner import RunningService, start_service, wait_until_analysed
from cluster.serve_config import AttributionConfig, HttpConfig, IngressConfig, ServeConfig
from cluster.settings import Settings
from cluster.storage.db import Database
from tests.e2e.loop import call, check_served_and_feedback, record_lessons
from tests.e2e.test_metrics import sample

TOKEN, OWNER = "token-alice", "alice"
AGENTS = 4
LOAD_BEFORE_S = 3.0  # writes before the node goes...
LOAD_AFTER_S = 5.0  # ...and after, on the replica left
REPLICA_PREFIX = "ServeReplica:hindsight:"  # then the deployment's name
WORKER_CLASS = "AttributionWorker"


def start_cluster(temp_dir: str) -> tuple[Cluster, dict[str, Any]]:
    """A head (the driver, Serve's controller and proxy) and three nodes with separate resources."""
    common = {"node_ip_address": "127.0.0.1", "object_store_memory": 100 * 1024 * 1024}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**common, "num_cpus": 1, "include_dashboard": False, "temp_dir": temp_dir},
    )
    nodes = {
        "serve-1": cluster.add_node(**common, num_cpus=1, resources={"serve": 1}),
        "serve-2": cluster.add_node(**common, num_cpus=1, resources={"serve": 1}),
        "attribution": cluster.add_node(**common, num_cpus=1, resources={"attribution": 1}),
    }
    cluster.wait_for_nodes()
    return cluster, nodes


def placement(cluster: Cluster, nodes: dict[str, Any]) -> dict[str, list[str]]:
    """The node names the live replicas and attribution workers run on (from the GCS's actor table)."""
    names = {node.node_id: name for name, node in nodes.items()}
    placed: dict[str, list[str]] = {"replicas": [], "workers": []}
    for actor in cluster.global_state.actor_table(None).values():
        if actor["State"] != "ALIVE":
            continue
        where = names.get(actor["Address"]["NodeID"], "head")
        if actor["ActorClassName"].startswith(REPLICA_PREFIX):
            placed["replicas"].append(where)
        elif actor["ActorClassName"] == WORKER_CLASS:
            placed["workers"].append(where)
    return {kind: sorted(found) for kind, found in placed.items()}


async def agent(url: str, index: int, stop: anyio.Event, acknowledged: list[str], failed: list[str]) -> None:
    """One agent writing memories until told to stop; each acknowledged id is recorded."""
    written = 0
    while not stop.is_set():
        try:
            async with http_client(url, TOKEN, timeout=20.0) as client:
                while not stop.is_set():
                    value = f"agent {index} note {written} {uuid.uuid4().hex[:8]}"
                    reply = await call(client, "memory_write", {"key": f"a{index}-{written}", "value": value})
                    acknowledged.append(reply["memory_id"])
                    written += 1
        except Exception as exc:  # a call the removed node was serving: not acknowledged, so nothing owed
            causes = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
            failed.append("; ".join(f"{type(c).__name__}: {str(c)[:200]}" for c in causes))
            await anyio.sleep(0.2)


async def write_through_a_node_removal(
    service: RunningService, cluster: Cluster, node: Any
) -> tuple[list[str], list[str], float]:
    """Agents write; one replica's node is removed meanwhile. Returns acknowledged ids, failures, removal time."""
    acknowledged: list[str] = []
    failed: list[str] = []
    stop = anyio.Event()
    removed_after = 0.0
    async with anyio.create_task_group() as group:
        for index in range(AGENTS):
            group.start_soon(agent, service.mcp_url, index, stop, acknowledged, failed)
        await anyio.sleep(LOAD_BEFORE_S)
        removed_after = float(len(acknowledged))
        # Kills the node's raylet and every process on it, the replica among them, mid-request.
        await anyio.to_thread.run_sync(lambda: cluster.remove_node(node, allow_graceful=False))
        await anyio.sleep(LOAD_AFTER_S)
        stop.set()
    return acknowledged, failed, removed_after


def stored(database_url: str, memory_ids: list[str]) -> set[str]:
    db = Database(database_url)
    try:
        with db.read() as session:
            rows = session.execute(text("SELECT memory_id FROM memories")).scalars().all()
    finally:
        db.dispose()
    return {str(uuid.UUID(str(row))) for row in rows} & set(memory_ids)


async def scrape(url: str) -> str:
    async with httpx.AsyncClient(timeout=10.0) as http:
        return (await http.get(f"{url}/metrics")).text


async def drive(service: RunningService, cluster: Cluster, nodes: dict[str, Any], settings: Settings) -> dict[str, Any]:
    report: dict[str, Any] = {"placement": placement(cluster, nodes)}
    # The loop: trajectories over MCP, finalized, attributed on the attribution node, served back.
    async with http_client(service.mcp_url, TOKEN) as client:
        trajectories = await record_lessons(client)
        db = Database(settings.sql_url())
        try:
            await wait_until_analysed(db, 120)
        finally:
            db.dispose()
        await check_served_and_feedback(client)
        for i in range(6):  # writes through the proxy reach both replicas
            await call(client, "memory_write", {"key": f"warm-{i}", "value": f"warm-up note {i}"})
    # The worker counts after its batch commits: wait for its count to arrive.
    with anyio.fail_after(60):
        while sample(text_before := await scrape(service.url), "hindsight_trajectories_analysed_total") < 6:
            await anyio.sleep(0.2)
    report["metrics_before"] = {
        "memory_writes": sample(text_before, "hindsight_memory_writes_total"),
        "finalized": sample(text_before, "hindsight_tool_calls_total", tool="finalize_trajectory", outcome="ok"),
        "analysed": sample(text_before, "hindsight_trajectories_analysed_total"),
    }
    report["trajectories"] = len(trajectories)
    acknowledged, failed, removed_after = await write_through_a_node_removal(service, cluster, nodes["serve-2"])
    report["acknowledged"] = len(acknowledged)
    report["acknowledged_before_removal"] = removed_after
    report["failed_calls"] = len(failed)
    report["failures"] = failed[:5]
    report["lost"] = sorted(set(acknowledged) - stored(settings.sql_url(), acknowledged))
    # The GCS marks the node's actors dead once it misses the node's health checks (seconds).
    waited = time.monotonic()
    while "serve-2" in placement(cluster, nodes)["replicas"] and time.monotonic() - waited < 60:
        await anyio.sleep(0.5)
    report["placement_after"] = placement(cluster, nodes)
    # What every node counted, read from one scrape of the endpoint (see docs/deploy for several hosts).
    text_after = await scrape(service.url)
    report["metrics_after"] = {"memory_writes": sample(text_after, "hindsight_memory_writes_total")}
    return report


def main(database_url: str, milvus_uri: str, data_dir: str) -> dict[str, Any]:
    started = time.monotonic()
    # Ray writes the cluster's address under RAY_TMPDIR/ray: the test's own directory, not the session's.
    temp_dir = os.path.join(os.environ.get("RAY_TMPDIR", "/tmp/ray-multinode"), "ray")
    os.makedirs(temp_dir, exist_ok=True)
    cluster, nodes = start_cluster(temp_dir)
    try:
        settings = Settings(
            data_dir=Path(data_dir),
            database_url=database_url,
            milvus_uri=milvus_uri,
            ray_address=cluster.address,
            auth_tokens={TOKEN: OWNER},
        )
        config = ServeConfig(
            # Serve's proxy on the head; HAProxy would want one port per node, and these share one host.
            http=HttpConfig(port=free_port(), ingress="proxy"),
            ingress=IngressConfig(num_replicas=2, num_cpus=0.5, resources={"serve": 1}),
            attribution=AttributionConfig(workers=1, num_cpus=0.5, resources={"attribution": 1}, poll_interval_s=0.1),
        )
        service = start_service(settings, config, quiet=True, start_timeout_s=150.0)
        report: dict[str, Any] = {"started_s": round(time.monotonic() - started, 1)}
        try:
            report |= anyio.run(drive, service, cluster, nodes, settings)
        finally:
            service.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()
    report["total_s"] = round(time.monotonic() - started, 1)
    return report


if __name__ == "__main__":
    result = main(*sys.argv[1:4])
    sys.stdout.write(json.dumps(result) + "\n")
