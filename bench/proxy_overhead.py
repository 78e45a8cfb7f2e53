"""What ``hindsight proxy`` adds to a tool call: latency per call through the proxy against the same
upstream called directly, in the same run, and against the proxy with its relay off (every call
through the SDK's server and client models; ``"relay": false``).

The upstream is the reference ``@modelcontextprotocol/server-memory`` (node, installed by ``make test``
into tests/e2e/proxy/servers). Three official MCP clients run side by side over stdio: one starts the
server directly, two start ``hindsight proxy`` in front of a copy of it each (recording in process
on SQLite + Milvus Lite in a temporary directory, as a local agent would run it). Calls go round the
three, so all see the same machine load; each client warms up first.

Latency on a shared machine moves with its load (every extra process hop waits for a CPU), so the
proxy's own CPU time per call is printed too: what the proxy costs whatever the load.

Usage: ``python -m bench.proxy_overhead [--calls 500 --tool read_graph]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import psutil
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

SERVER = Path(__file__).resolve().parent.parent / "tests/e2e/proxy/servers/node_modules/.bin/mcp-server-memory"
PROXIES = {"proxy": True, "proxy, relay off": False}
"""The proxy as configured by default (plain calls relayed as JSON-RPC), and with ``relay`` off."""
ENTITIES = {"entities": [{"name": f"e{i}", "entityType": "thing", "observations": ["seen"]} for i in range(5)]}


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _proxy_cpu_s(config: Path) -> float:
    """CPU seconds the proxy process started with ``config`` (a child of this process) has used."""
    for child in psutil.Process().children():
        if str(config) in child.cmdline():
            times = child.cpu_times()
            return float(times.user + times.system)
    raise RuntimeError("the proxy process is not running")


def _proxy(workdir: Path, name: str, hindsight_url: str | None, relay: bool) -> tuple[StdioServerParameters, Path]:
    """``hindsight proxy`` in front of its own copy of server-memory, as an agent's MCP config starts it."""
    config = workdir / f"{name}.json"
    memory = {"command": str(SERVER), "env": {"MEMORY_FILE_PATH": str(workdir / f"{name}.jsonl")}}
    recording = {"task": "proxy overhead benchmark", "idle_finalize_s": 3600, "url": hindsight_url, "relay": relay}
    config.write_text(json.dumps({"mcpServers": {"memory": memory}, "hindsight": recording}))
    hindsight = str(Path(sys.executable).parent / "hindsight")
    params = StdioServerParameters(
        command=hindsight,
        args=["proxy", "--config", str(config)],
        env={**os.environ, "HINDSIGHT_DATA_DIR": str(workdir / f"{name}-data")},
    )
    return params, config


async def _measure(
    calls: int, tool: str, workdir: Path, hindsight_url: str | None
) -> tuple[dict[str, list[float]], dict[str, float]]:
    direct_params = StdioServerParameters(
        command=str(SERVER), env={**os.environ, "MEMORY_FILE_PATH": str(workdir / "direct.jsonl")}
    )
    proxies = {name: _proxy(workdir, name, hindsight_url, relay) for name, relay in PROXIES.items()}
    samples: dict[str, list[float]] = {"direct": [], **{name: [] for name in proxies}}
    async with AsyncExitStack() as stack:
        clients = {"direct": await stack.enter_async_context(Client(direct_params))}
        for name, (params, _) in proxies.items():
            clients[name] = await stack.enter_async_context(Client(params))
        for client in clients.values():
            await client.list_tools()
            await client.call_tool("create_entities", ENTITIES)
            for _ in range(30):
                await client.call_tool(tool, {})
        cpu_before = {name: _proxy_cpu_s(config) for name, (_, config) in proxies.items()}
        for _ in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                result = await client.call_tool(tool, {})
                samples[name].append((time.perf_counter() - start) * 1000)
                assert not result.is_error, result.content
        cpu_ms = {
            name: (_proxy_cpu_s(config) - cpu_before[name]) * 1000 / calls for name, (_, config) in proxies.items()
        }
    return samples, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--tool", default="read_graph", help="A server-memory tool that takes no arguments.")
    parser.add_argument("--hindsight-url", help="Record to this service instead of in process.")
    args = parser.parse_args()
    if not SERVER.exists():
        raise SystemExit(f"{SERVER} is missing: run `make tests/e2e/proxy/servers/node_modules/.installed`")
    with tempfile.TemporaryDirectory() as tmp:
        samples, cpu_ms = anyio.run(_measure, args.calls, args.tool, Path(tmp), args.hindsight_url)
    table = Table(title=f"{args.tool} over stdio, {args.calls} calls each, alternating (ms)")
    for column in ("path", "p50", "p95", "mean", "added p50", "added p95", "proxy CPU/call"):
        table.add_column(column, justify="right" if column != "path" else "left", no_wrap=column == "path")
    direct = samples["direct"]
    for name, values in samples.items():
        added = (
            ("", "")
            if name == "direct"
            else (
                f"{statistics.median(values) - statistics.median(direct):.2f}",
                f"{_percentile(values, 0.95) - _percentile(direct, 0.95):.2f}",
            )
        )
        table.add_row(
            name,
            f"{statistics.median(values):.2f}",
            f"{_percentile(values, 0.95):.2f}",
            f"{statistics.fmean(values):.2f}",
            *added,
            f"{cpu_ms[name]:.2f}" if name in cpu_ms else "",
        )
    Console().print(table)
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
