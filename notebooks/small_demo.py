"""A small version of `hindsight demo`'s data, made in this process (no Ray): for a machine where the
demo never ran (CI), so the notebook has the demo's data to read.

It writes what the demo writes, where the demo writes it: the store under ``<data_dir>/demo``
(SQLite + Milvus Lite), one owner per condition named as the demo names them (``demo-<condition>``),
and ``results.json``. Agents are the demo's scripted ones on the same simulated tool-use families,
through the real MCP tools (in-process client) and the real attribution; the queue is drained
here between rounds, which the service's attribution workers do in the demo.
"""

from __future__ import annotations

import logging
import shutil
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
from mcp import Client

from cluster.auth import OwnerResolver
from cluster.demo.harness import BenchConfig, BenchResults, Condition, run_bench
from cluster.demo.recording import ToolClient
from cluster.demo.report import write_json
from cluster.services import analysis_for, build_services
from cluster.settings import Settings
from cluster.tools import build_server

#: Two episodes of each kind per family and round, with and without memory: the demo's shape, a tenth of its size.
SMALL = BenchConfig(train_episodes=2, eval_episodes=2, rounds=3, seed=0, conditions=("none", "hindsight"))


def make_small_demo(data_dir: Path, config: BenchConfig = SMALL) -> Path:
    """Fill ``<data_dir>/demo`` as `hindsight demo` does (emptied first); returns that folder."""
    for noisy in ("cluster", "mcp", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    demo = data_dir / "demo"
    shutil.rmtree(demo, ignore_errors=True)
    services = build_services(Settings(data_dir=demo))
    analysis = analysis_for(services)

    def clients(condition: Condition) -> AbstractAsyncContextManager[ToolClient]:
        return Client(build_server(services, OwnerResolver({}, f"demo-{condition}")))

    async def drain() -> None:
        while analysis.run_once().trajectories:
            pass

    async def run() -> BenchResults:
        return await run_bench(clients, drain, config)

    try:
        results = anyio.run(run)
    finally:
        services.close()
    write_json(results, demo / "results.json")
    return demo
