"""What ``hindsight proxy`` adds to a tool call: latency per call through the proxy against the same
upstream called directly, in the same run.

The upstream is the reference ``@modelcontextprotocol/server-memory`` (node, installed by ``make test``
into tests/e2e/proxy/servers). Two official MCP clients run side by side over stdio: one starts the
server directly, one starts ``hindsight proxy`` in front of its own copy of it (recording in process
on SQLite + Milvus Lite in a temporary directory, as a local agent would run it). Calls alternate
between the two, so both see the same machine load; each client warms up first.

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
from pathlib import Path

import anyio
import psutil
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

SERVER = Path(__file__).resolve().parent.parent / "tests/e2e/proxy/servers/node_modules/.bin/mcp-server-memory"
ENTITIES = {"entities": [{"name": f"e{i}", "entityType": "thing", "observations": ["seen"]} for i in range(5)]}


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _proxy_cpu_s() -> float:
    """CPU seconds the proxy process (this process's child running ``hindsight proxy``) has used."""
    for child in psutil.Process().children():
        if "proxy" in child.cmdline():
            times = child.cpu_times()
            return float(times.user + times.system)
    raise RuntimeError("the proxy process is not running")


async def _measure(
    calls: int, tool: str, workdir: Path, hindsight_url: str | None
) -> tuple[dict[str, list[float]], float]:
    env = {**os.environ, "PATH": os.environ["PATH"]}
    direct_params = StdioServerParameters(
        command=str(SERVER), env={**env, "MEMORY_FILE_PATH": str(workdir / "direct.jsonl")}
    )
    config = workdir / "proxy.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "memory": {"command": str(SERVER), "env": {"MEMORY_FILE_PATH": str(workdir / "proxied.jsonl")}}
                },
                "hindsight": {"task": "proxy overhead benchmark", "idle_finalize_s": 3600, "url": hindsight_url},
            }
        )
    )
    hindsight = str(Path(sys.executable).parent / "hindsight")
    proxy_params = StdioServerParameters(
        command=hindsight,
        args=["proxy", "--config", str(config)],
        env={**env, "HINDSIGHT_DATA_DIR": str(workdir / "data")},
    )
    samples: dict[str, list[float]] = {"direct": [], "proxy": []}
    async with Client(direct_params) as direct, Client(proxy_params) as proxied:
        clients = {"direct": direct, "proxy": proxied}
        for client in clients.values():
            await client.list_tools()
            await client.call_tool("create_entities", ENTITIES)
            for _ in range(30):
                await client.call_tool(tool, {})
        cpu_before = _proxy_cpu_s()
        for _ in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                result = await client.call_tool(tool, {})
                samples[name].append((time.perf_counter() - start) * 1000)
                assert not result.is_error, result.content
        cpu_ms = (_proxy_cpu_s() - cpu_before) * 1000 / calls
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
    for column in ("path", "p50", "p95", "mean"):
        table.add_column(column, justify="right" if column != "path" else "left")
    for name, values in samples.items():
        table.add_row(
            name,
            f"{statistics.median(values):.2f}",
            f"{_percentile(values, 0.95):.2f}",
            f"{statistics.fmean(values):.2f}",
        )
    direct, proxied = samples["direct"], samples["proxy"]
    table.add_row(
        "added by the proxy",
        f"{statistics.median(proxied) - statistics.median(direct):.2f}",
        f"{_percentile(proxied, 0.95) - _percentile(direct, 0.95):.2f}",
        f"{statistics.fmean(proxied) - statistics.fmean(direct):.2f}",
    )
    Console().print(table)
    Console().print(f"proxy process CPU per call (forwarding and recording): {cpu_ms:.2f} ms")


if __name__ == "__main__":
    main()
