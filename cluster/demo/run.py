"""`hindsight demo`: the closed loop on the embedded service, showing agents improve over three rounds.

It starts the real service (local Ray, Serve with the MCP endpoint, the attribution pool, SQLite and
Milvus Lite under ``<data_dir>/demo``), then runs scripted agents through the eleven simulated
tool-use families in :mod:`cluster.demo.envs` (six the service was developed on, five held out) in four
conditions on the same seeds — no memory, replay of raw successful trajectories, a naive one-feature
rule learner, hindsight experiences — each condition as its own owner over HTTP:

* round 1: nobody has experience yet;
* round 2: hindsight agents follow the templates learned from round 1;
* round 3: edge cases found in round 2 add supplementary templates and confidence rises.

The report adds, per family, the oracle (fewest possible steps) and each condition's steps/oracle
ratio, and a generalization table: the held-out families against the ones agent choices were made on.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from cluster.client import http_client
from cluster.demo.harness import BenchConfig, BenchResults, Condition, run_bench
from cluster.demo.recording import ToolClient
from cluster.demo.report import print_report, write_json
from cluster.net import free_port
from cluster.runner import RunningService, start_service, wait_until_analysed
from cluster.serve_config import AttributionConfig, HttpConfig, ServeConfig
from cluster.settings import Settings
from cluster.storage.db import Database


def _token(condition: Condition) -> str:
    return f"demo-{condition}"


async def _run(service: RunningService, config: BenchConfig, console: Console) -> BenchResults:
    db = Database(service.settings.sql_url())

    @asynccontextmanager
    async def client(condition: Condition) -> AsyncIterator[ToolClient]:
        async with http_client(service.mcp_url, _token(condition)) as connected:
            yield connected

    def factory(condition: Condition) -> AbstractAsyncContextManager[ToolClient]:
        return client(condition)

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task(f"round 1 of {config.rounds}: agents at work", total=config.rounds)

        async def wait_for_analysis() -> None:
            done = int(progress.tasks[task].completed) + 1
            progress.update(task, description=f"round {done} of {config.rounds}: attributing what happened")
            await wait_until_analysed(db)
            progress.update(task, advance=1, description=f"round {done + 1} of {config.rounds}: agents at work")
            console.log(f"round {done} done")

        try:
            return await run_bench(factory, wait_for_analysis, config)
        finally:
            db.dispose()


def run_demo(settings: Settings, config: BenchConfig, out: Path | None = None) -> BenchResults:
    """Run the three-round comparison on a fresh embedded service and print the tables."""
    console = Console()
    # The demo prints each round itself: the benchmark harness's own "round N done" would say it twice.
    for noisy in ("httpx", "httpx2", "mcp", "cluster", "ray", "ray.serve", "bench"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    data_dir = settings.data_dir / "demo"
    shutil.rmtree(data_dir, ignore_errors=True)  # every demo starts with an empty memory
    demo_settings = settings.model_copy(
        update={
            "data_dir": data_dir,
            "database_url": None,
            "milvus_uri": None,
            "auth_tokens": {_token(c): f"demo-{c}" for c in config.conditions},
        }
    )
    serve_config = ServeConfig(
        http=HttpConfig(port=free_port()), attribution=AttributionConfig(workers=1, poll_interval_s=0.05)
    )
    started = time.perf_counter()
    with console.status("starting the embedded service (Ray, Serve, SQLite, Milvus Lite)…"):
        service = start_service(demo_settings, serve_config, quiet=True)
    console.log(f"service up at {service.mcp_url} in {time.perf_counter() - started:.0f} s")
    try:
        results = anyio.run(_run, service, config, console)
    finally:
        service.stop()
    print_report(results, console)
    target = out or data_dir / "results.json"
    write_json(results, target)
    console.log(f"results written to {target} ({time.perf_counter() - started:.0f} s in all)")
    return results
