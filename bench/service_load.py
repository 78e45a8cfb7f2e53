"""Load benchmark of the deployed service: concurrent simulated agents recording over MCP/HTTP.

Starts `hindsight serve` (deploy/serve.yaml: HAProxy ingress, two replicas, attribution pool) on a
fresh embedded data directory and measures, for 8, 32 and 128 concurrent agents:
  * single-node `record_trajectory_node` calls: calls/s and p50/p99 latency;
  * batched `record_trajectory_nodes` (50 nodes a call): nodes/s;
  * long-term memory: each agent alternates `memory_write` and `memory_query` (calls/s, p50/p95 of each),
    measured beside capture in the same run;
  * finalize -> experience queryable lag (p50/p95), polling `query_experience`.
Each agent speaks MCP's Streamable HTTP wire format itself (JSON-RPC `tools/call` POSTs, stateless
JSON responses) so that the load generator, on the same two cores, leaves the CPU to the server;
``--sdk-client`` measures with the official MCP client instead (the lag phase always uses it).
Baselines in the same run: `GET /health` at the same concurrency (the transport ceiling), and the
same deployment behind Serve's Python proxy (``ingress: proxy``). ``--direct`` adds the app in a
single uvicorn process (no Ray Serve, analysis off) and ``--in-process`` the official client
connected in process (no HTTP: the floor of the SDK + store path).
``--milvus server`` serves the same deployment with its vectors on a Milvus standalone server started
for the run (bench/milvus_server.py; ``--time-tick-ms`` is its ``proxy.timeTickInterval``, which a
strong-consistency read waits for) instead of the embedded Milvus Lite; ``both`` measures Lite, then
the server, in the same run.

    .venv/bin/python bench/service_load.py [--agents 8 32 128] [--calls 100] [--direct] [--in-process]
        [--milvus lite|server|both] [--time-tick-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import httpx
import ray
from mcp import Client
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from ray import serve

from bench.milvus_server import milvus_server
from cluster.client import http_client
from cluster.net import free_port
from cluster.runner import RunningService, start_service
from cluster.serve_config import ServeConfig, load_serve_config
from cluster.settings import Settings

TOKEN = "bench-token"


def node(parent: str | None, row_count: int, action: str, ok: bool) -> dict[str, Any]:
    return {
        "node_id": str(uuid.uuid4()),
        "parent_id": parent,
        "context_snapshot": {"goal": "import products", "row_count": row_count},
        "available_actions": ["add_item", "bulk_import"],
        "chosen_action": action,
        "action_params": {"file": "/data/in.csv"} if action == "bulk_import" else {"sku": "A-1"},
        "execution_result": {"status": "success" if ok else "failure"},
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


class Agent(Protocol):
    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]: ...


class SdkAgent:
    """An agent on the official MCP client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result.content}")
        return result.structured_content or {}


class WireAgent:
    """An agent that writes MCP's Streamable HTTP messages itself: one JSON-RPC POST a tool call,
    answered with a JSON body by the stateless endpoint. The wire format of the official client,
    without its per-call session machinery."""

    _ids = itertools.count(1)

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        message = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "tools/call",
            "params": {"name": tool, "arguments": args},
        }
        async with self.http.post(self.url, data=json.dumps(message)) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{tool}: HTTP {response.status} {body[:200]!r}")
        reply = json.loads(body)
        if "error" in reply:
            raise RuntimeError(f"{tool}: {reply['error']}")
        result = reply["result"]
        if result.get("isError"):
            raise RuntimeError(f"{tool}: {result.get('content')}")
        return result.get("structuredContent") or {}


@asynccontextmanager
async def wire_agents(mcp_url: str, n: int) -> AsyncIterator[list[Agent]]:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_HANDSHAKE_VERSION,
    }
    connector = aiohttp.TCPConnector(limit=n)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout) as http:
        yield [WireAgent(http, mcp_url) for _ in range(n)]


@asynccontextmanager
async def sdk_agents(mcp_url: str, n: int) -> AsyncIterator[list[Agent]]:
    async with AsyncExitStack() as stack:
        # Entered and left in nesting order: each client owns a task group.
        yield [SdkAgent(await stack.enter_async_context(http_client(mcp_url, TOKEN, timeout=120))) for _ in range(n)]


async def run_agents(n: int, work: Callable[[int], Awaitable[list[float]]]) -> tuple[float, list[float]]:
    start = time.perf_counter()
    latencies = [x for chunk in await asyncio.gather(*(work(i) for i in range(n))) for x in chunk]
    return time.perf_counter() - start, latencies


async def health_ceiling(url: str, agents: int, calls: int) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=agents)) as http:

        async def agent(_: int) -> list[float]:
            out = []
            for _ in range(calls):
                t = time.perf_counter()
                async with http.get(f"{url}/health") as response:
                    await response.read()
                    response.raise_for_status()
                out.append(time.perf_counter() - t)
            return out

        elapsed, lat = await run_agents(agents, agent)
    return len(lat) / elapsed


async def single_node_calls(agents: list[Agent], calls: int) -> tuple[float, float, float]:
    async def agent(i: int) -> list[float]:
        tid = str(uuid.uuid4())
        parent = None
        out = []
        for k in range(calls):
            n = node(parent, 10, "add_item", True)
            args: dict[str, Any] = {"trajectory_id": tid, "node": n}
            if k == 0:
                args |= {"task": "bench", "agent_id": f"agent-{i}"}
            t = time.perf_counter()
            await agents[i].call("record_trajectory_node", args)
            out.append(time.perf_counter() - t)
            parent = n["node_id"]
        return out

    elapsed, lat = await run_agents(len(agents), agent)
    return len(lat) / elapsed, percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000


async def batched_calls(agents: list[Agent], batches: int, size: int = 50) -> float:
    async def agent(i: int) -> list[float]:
        out = []
        for b in range(batches):
            nodes = [node(None, 10, "add_item", True)]
            for _ in range(size - 1):
                nodes.append(node(nodes[-1]["node_id"], 10, "add_item", True))
            t = time.perf_counter()
            await agents[i].call(
                "record_trajectory_nodes",
                {"trajectory_id": str(uuid.uuid4()), "nodes": nodes, "task": "bench", "agent_id": f"a{i}-{b}"},
            )
            out.append(time.perf_counter() - t)
        return out

    elapsed, lat = await run_agents(len(agents), agent)
    return len(lat) * size / elapsed


async def learning_lag(agents: list[Agent], timeout_s: float = 60) -> list[float]:
    """Each agent teaches one lesson under its own task type and times until it is served."""

    async def agent(i: int) -> list[float]:
        client = agents[i]
        task_type = f"import-{uuid.uuid4().hex[:8]}"
        runs = [(10, "add_item", True), (20, "add_item", True), (150, "add_item", False), (200, "add_item", False)]
        runs += [(100, "bulk_import", True), (500, "bulk_import", True)]
        for rows, action, ok in runs:
            tid = str(uuid.uuid4())
            await client.call(
                "record_trajectory_node",
                {
                    "trajectory_id": tid,
                    "node": node(None, rows, action, ok),
                    "task": f"import {rows} products",
                    "agent_id": f"agent-{i}",
                    "role": "executor",
                    "task_type": task_type,
                },
            )
            await client.call("finalize_trajectory", {"trajectory_id": tid, "outcome": "success" if ok else "failure"})
        finalized = time.perf_counter()
        query = {"context": "import 300 products", "role": "executor", "task_type": task_type, "min_confidence": 0}
        while time.perf_counter() - finalized < timeout_s:
            if (await client.call("query_experience", query))["experiences"]:
                return [time.perf_counter() - finalized]
            await asyncio.sleep(0.05)
        return [float("inf")]

    _, lags = await run_agents(len(agents), agent)
    return lags


THINGS = ("deploy target", "database", "on-call contact", "release branch", "API quota", "region", "owner")
PROJECTS = ("billing", "search", "checkout", "ingest", "reports", "auth", "mobile", "warehouse")


async def memory_calls(agents: list[Agent], calls: int) -> dict[str, float]:
    """Each agent writes a fact, then asks about one: half writes, half queries over one owner's memories."""

    async def agent(i: int) -> list[tuple[str, float]]:
        out = []
        for k in range(calls // 2):
            thing, project = THINGS[(i + k) % len(THINGS)], PROJECTS[(i * 7 + k) % len(PROJECTS)]
            write = {
                "key": f"{project}/{thing}/{i}-{k}",
                "value": f"The {thing} of {project} is {i * 100 + k} (noted by agent {i}).",
                "entity": project,
            }
            t = time.perf_counter()
            await agents[i].call("memory_write", write)
            out.append(("write", time.perf_counter() - t))
            t = time.perf_counter()
            await agents[i].call("memory_query", {"query": f"what is the {thing} of {project}?", "top_k": 5})
            out.append(("query", time.perf_counter() - t))
        return out

    start = time.perf_counter()
    timed = [x for chunk in await asyncio.gather(*(agent(i) for i in range(len(agents)))) for x in chunk]
    elapsed = time.perf_counter() - start
    writes = [t for kind, t in timed if kind == "write"]
    queries = [t for kind, t in timed if kind == "query"]
    return {
        "memory_calls_per_s": round(len(timed) / elapsed, 1),
        "write_p50_ms": round(percentile(writes, 0.5) * 1000, 1),
        "write_p95_ms": round(percentile(writes, 0.95) * 1000, 1),
        "query_p50_ms": round(percentile(queries, 0.5) * 1000, 1),
        "query_p95_ms": round(percentile(queries, 0.95) * 1000, 1),
    }


@dataclass
class Target:
    name: str
    url: str


def serve_direct(data_dir: str, port: int) -> None:
    """The HTTP app in this process under uvicorn: the reference without Ray Serve."""
    import uvicorn

    from cluster.auth import OwnerResolver
    from cluster.http import build_http_app
    from cluster.services import build_services

    settings = Settings(data_dir=Path(data_dir), auth_tokens={TOKEN: "bench"})
    app = build_http_app(build_services(settings), OwnerResolver(settings.auth_tokens, settings.local_owner))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


@contextmanager
def direct_target(data_dir: Path) -> Iterator[Target]:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve-direct", str(data_dir), str(port)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield Target("uvicorn", f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=30)


async def drive(name: str, url: str, n: int, calls: int, sdk_client: bool, lag: bool) -> dict[str, Any]:
    """One row: ``n`` agents against ``url``. Runs in a process of its own (see :func:`bench`)."""
    mcp_url = f"{url}/mcp/"
    make_agents = sdk_agents if sdk_client else wire_agents
    ceiling = await health_ceiling(url, n, calls)
    async with make_agents(mcp_url, n) as fleet:
        await single_node_calls(fleet, 5)  # warm-up: connections, replicas' first requests
        rate, p50, p99 = await single_node_calls(fleet, calls)
        nodes_per_s = await batched_calls(fleet, max(1, calls // 10))
        await memory_calls(fleet, 4)  # warm-up: each replica's embedder and Milvus connection
        memory = await memory_calls(fleet, calls // 2)
    row = {
        "transport": name,
        "client": "sdk" if sdk_client else "wire",
        "agents": n,
        "health_req_per_s": round(ceiling, 1),
        "single_calls_per_s": round(rate, 1),
        "single_p50_ms": round(p50, 1),
        "single_p99_ms": round(p99, 1),
        "batched_nodes_per_s": round(nodes_per_s, 1),
    } | memory
    if lag:
        async with sdk_agents(mcp_url, min(n, 8)) as teachers:
            lags = await learning_lag(teachers)
        row |= {"lag_p50_s": round(statistics.median(lags), 2), "lag_p95_s": round(percentile(lags, 0.95), 2)}
    return row


def bench(
    target: Target, agents: list[int], calls: int, *, sdk_client: bool = False, lag: bool = True
) -> list[dict[str, Any]]:
    """Drive ``target`` with each fleet size. The agents run in a fresh process, like any external
    load generator: in this one they would share the GIL with the Ray driver's threads."""
    rows = []
    for n in agents:
        job = {"name": target.name, "url": target.url, "n": n, "calls": calls, "sdk_client": sdk_client, "lag": lag}
        out = subprocess.run(
            [sys.executable, __file__, "--drive", json.dumps(job)], check=True, capture_output=True, text=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


async def in_process(agents: list[int], calls: int, data_dir: Path) -> list[dict[str, Any]]:
    """The floor of the MCP + store path: the official client connected in process, no HTTP at all."""
    from cluster.auth import OwnerResolver
    from cluster.services import build_services
    from cluster.tools import build_server

    services = build_services(Settings(data_dir=data_dir))
    rows = []
    try:
        for n in agents:
            async with AsyncExitStack() as stack:
                server = build_server(services, OwnerResolver({}, "bench"))
                fleet: list[Agent] = [SdkAgent(await stack.enter_async_context(Client(server))) for _ in range(n)]
                rate, p50, p99 = await single_node_calls(fleet, calls)
                nodes_per_s = await batched_calls(fleet, max(1, calls // 10))
            rows.append(
                {
                    "transport": "in-process",
                    "client": "sdk",
                    "agents": n,
                    "single_calls_per_s": round(rate, 1),
                    "single_p50_ms": round(p50, 1),
                    "single_p99_ms": round(p99, 1),
                    "batched_nodes_per_s": round(nodes_per_s, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        services.close()
    return rows


def on_serve(
    settings: Settings, config: ServeConfig, name: str, run: Callable[[Target], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Start the service with ``config``, run the measurements, stop it (and Serve with it, since
    the ingress mode is fixed when Serve starts)."""
    service: RunningService = start_service(settings, config, quiet=True)
    try:
        return run(Target(name, service.url))
    finally:
        service.stop()
        serve.shutdown()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-direct":
        serve_direct(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--drive":
        print(json.dumps(asyncio.run(drive(**json.loads(sys.argv[2])))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--calls", type=int, default=100, help="single-node calls per agent")
    parser.add_argument("--config", type=Path, default=Path("deploy/serve.yaml"))
    parser.add_argument("--sdk-client", action="store_true", help="also measure with the official MCP client")
    parser.add_argument("--no-proxy-baseline", action="store_true", help="skip the Serve Python proxy baseline")
    parser.add_argument("--direct", action="store_true", help="also measure the app on plain uvicorn")
    parser.add_argument("--in-process", action="store_true", help="also measure the MCP client in process")
    parser.add_argument("--fp32", action="store_true", help="run the embedding model in fp32, not int8")
    parser.add_argument("--milvus", default="lite", choices=["lite", "server", "both"], help="the vector store(s)")
    parser.add_argument("--time-tick-ms", type=int, default=50, help="the Milvus server's proxy.timeTickInterval")
    args = parser.parse_args()
    if args.fp32:
        # Every Settings reads it, the --direct server's subprocess included.
        os.environ["HINDSIGHT_EMBEDDING__QUANTIZED"] = "false"
    config = load_serve_config(args.config)
    config = config.model_copy(update={"http": config.http.model_copy(update={"port": free_port()})})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        milvus_uri = None
        if args.milvus != "lite":
            milvus_uri = stack.enter_context(milvus_server(time_tick_ms=args.time_tick_ms))

        def settings(name: str, uri: str | None = None) -> Settings:
            return Settings(data_dir=Path(tmp) / name, auth_tokens={TOKEN: "bench"}, milvus_uri=uri)

        label = f"serve/{config.http.ingress} x{config.ingress.num_replicas}"
        server_label = f"{label}, Milvus server (tick {args.time_tick_ms} ms)"
        try:
            if args.milvus != "server":
                rows += on_serve(settings("serve"), config, label, lambda t: bench(t, args.agents, args.calls))
            if milvus_uri is not None:
                rows += on_serve(
                    settings("serve-milvus-server", milvus_uri),
                    config,
                    server_label,
                    lambda t: bench(t, args.agents, args.calls),
                )
            if args.sdk_client:
                rows += on_serve(
                    settings("serve-sdk"),
                    config,
                    label,
                    lambda t: bench(t, args.agents, args.calls, sdk_client=True, lag=False),
                )
            if not args.no_proxy_baseline and config.http.ingress != "proxy":
                proxy = config.model_copy(update={"http": config.http.model_copy(update={"ingress": "proxy"})})
                rows += on_serve(
                    settings("serve-proxy"),
                    proxy,
                    f"serve/proxy x{config.ingress.num_replicas}",
                    lambda t: bench(t, args.agents, args.calls, lag=False),
                )
        finally:
            ray.shutdown()
        if args.direct:
            # No attribution workers here: the lag columns would measure nothing and are left out.
            with direct_target(Path(tmp) / "direct") as target:
                rows += bench(target, args.agents, args.calls, lag=False)
        if args.in_process:
            rows += asyncio.run(in_process(args.agents, args.calls, Path(tmp) / "in-process"))
    header = list(rows[0])
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row.get(h, "-")) for h in header) + " |")


if __name__ == "__main__":
    main()
