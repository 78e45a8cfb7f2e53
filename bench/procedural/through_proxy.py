"""The procedural benchmark through ``hindsight proxy``: does an agent with no recording code learn
as well as one that records through hindsight's tools?

Two runs of the hindsight condition on the same families, instances and rounds, in one process:

* **direct**: the existing harness (:mod:`bench.procedural.run_local`): the agent records every
  call with ``record_trajectory_node``, finalizes, asks ``query_experience`` and reports outcomes.
* **proxy**: the environment is an MCP server (:mod:`bench.procedural.env_server`, its tools the
  current stage's actions) and the agent reaches it only through ``hindsight proxy``, started over
  stdio by the official MCP client as an agent's MCP config starts it, one proxy per role (each
  agent of a multi-agent run has its own config, with its ``role``). The agent calls its tools and
  the proxy's three: ``hindsight_begin`` with the task, ``hindsight_advice`` before a decision,
  ``hindsight_finalize`` with the outcome. It records nothing and reports nothing: the proxy
  records each call (the stage's tools as listed, the view's features sent as
  ``_meta["hindsight/context"]``, the tool's cost from its structured result) into a hindsight
  service over HTTP in this process, and reports the served templates at finalize, and which of
  them the agent followed (its next call was the tool one recommends) with how that went.

Both follow served templates with the same policy (:class:`cluster.demo.agents.HindsightPolicy`),
and both services learn at round ends (the proxy path once the proxy has delivered every record).
The report compares success and steps ÷ oracle per family and overall on each round's unseen
instances. What the paths cannot record alike: MCP has no ``partial`` result, so a call the
environment judges ``partial`` reaches the proxy as an error, and advice is asked without the
decision's name.

Usage: ``python -m bench.procedural.through_proxy [--families a,b] [--train 10 --eval 10 --rounds 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import uvicorn
from mcp import Client, StdioServerParameters
from mcp_types import RequestParamsMeta
from rich.console import Console
from rich.table import Table
from starlette.types import ASGIApp

from bench.procedural.env_server import EnvironmentServer
from bench.procedural.families import make_episode
from bench.procedural.run_local import run_local
from cluster.auth import OwnerResolver
from cluster.core.ports import Embedder
from cluster.demo.agents import EpisodeResult, HindsightPolicy, Policy, episode_result
from cluster.demo.env_base import Episode
from cluster.demo.harness import ALL, BenchConfig, BenchResults, Condition, run_bench
from cluster.demo.recording import ToolClient, error_text
from cluster.http import build_http_app
from cluster.net import free_port
from cluster.services import Services, analysis_for, build_services
from cluster.settings import Settings
from cluster.trajectories.repository import SqlTrajectoryStore

OWNER = "bench-proxy"
_DELIVERY_S = 120.0
"""How long the proxies may take to deliver a round's records before the run gives up."""


class AdviceClient:
    """``query_experience`` as an agent behind the proxy has it: ``hindsight_advice``, asked with
    the situation in words and the view's features as the call's context."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        if name != "query_experience":
            raise ValueError(f"behind the proxy the agent has no {name} tool")
        args = arguments or {}
        snapshot = args.get("context_snapshot")
        meta = cast(RequestParamsMeta, {"hindsight/context": snapshot}) if isinstance(snapshot, dict) else None
        return await self._client.call_tool("hindsight_advice", {"situation": args.get("context", "")}, meta=meta)


class ProxiedPolicy(HindsightPolicy):
    """The hindsight agent behind the proxy: it follows served templates as the direct agent does
    and reports nothing itself (the proxy reports what was served and followed at finalize)."""

    async def report(self, client: ToolClient, verdicts: dict[tuple[str, str], bool], result: EpisodeResult) -> None:
        return None


class ProxiedAgents:
    """One ``hindsight proxy`` per role, started on first use, each in front of the environment."""

    def __init__(self, stack: AsyncExitStack, workdir: Path, env: EnvironmentServer, env_url: str, hindsight_url: str):
        self._stack = stack
        self._workdir = workdir
        self.env = env
        self._env_url = env_url
        self._hindsight_url = hindsight_url
        self._clients: dict[str, Client] = {}
        self.advice: dict[str, AdviceClient] = {}
        self.trajectories = 0
        """Trajectories begun so far (each records at least one call, so each is finalized)."""

    async def client(self, role: str) -> Client:
        if role not in self._clients:
            config = self._workdir / f"proxy-{role}.json"
            config.write_text(
                json.dumps(
                    {
                        "mcpServers": {"environment": {"url": self._env_url}},
                        "hindsight": {"url": self._hindsight_url, "agent_id": OWNER, "role": role, "task": "task"},
                    }
                )
            )
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "cluster.cli", "proxy", "--config", str(config)],
                env={**os.environ, "HINDSIGHT_DATA_DIR": str(self._workdir / f"proxy-{role}")},
            )
            self._clients[role] = await self._stack.enter_async_context(Client(params))
            self.advice[role] = AdviceClient(self._clients[role])
        return self._clients[role]

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """A tool call of the agent whose turn it is (the running episode's acting role)."""
        view = self.env.episode.view() if self.env.episode is not None else None
        if view is None:
            raise RuntimeError("no episode is waiting for a call")
        return await (await self.client(view.role)).call_tool(name, arguments)


async def run_through_proxy(client: ToolClient, episode: Episode, policy: Policy, *, agent_id: str) -> EpisodeResult:
    """One episode by agents that only call tools through their proxies (see the module docstring)."""
    if not isinstance(client, ProxiedAgents):
        raise TypeError("run_through_proxy runs with ProxiedAgents")
    agents = client
    agents.env.episode = episode
    await policy.begin(agents, episode)
    begun: list[str] = []
    tried: list[Any] = []
    while (view := episode.view()) is not None:
        tools = await agents.client(view.role)
        if view.role not in begun:
            await _checked(tools, "hindsight_begin", {"task": episode.task, "task_type": episode.task_type})
            begun.append(view.role)
        # The agent reads its tools (the stage's actions), as it would before choosing; so does the proxy.
        listed = {t.name for t in (await tools.list_tools()).tools}
        if not set(view.available_actions) <= listed:
            raise RuntimeError(f"the proxy lists {sorted(listed)}, the stage has {view.available_actions}")
        decision = await policy.choose(agents.advice[view.role], episode, view, tried)
        steps = len(episode.history)
        answer = await tools.call_tool(
            decision.call.action,
            dict(decision.call.params),
            meta=cast(RequestParamsMeta, {"hindsight/context": dict(view.context)}),
        )
        if len(episode.history) != steps + 1:
            raise RuntimeError(f"the environment did not get the call of {decision.call.action}: {error_text(answer)}")
        step = episode.history[-1][2]
        policy.observe(view, decision, step)
        tried = [] if step.status == "success" else [*tried, decision.call]
    outcome = "success" if episode.succeeded else "failure"
    for role in begun:
        summary = f"{outcome} in {episode.steps} steps"
        await _checked(await agents.client(role), "hindsight_finalize", {"outcome": outcome, "summary": summary})
    agents.trajectories += len(begun)
    agents.env.episode = None
    served = {role: policy.served_for(role) for role in begun}
    return await policy.finish(agents, episode, episode_result(episode, served))


async def _checked(client: Client, name: str, arguments: dict[str, Any]) -> None:
    result = await client.call_tool(name, arguments)
    if result.is_error:
        raise RuntimeError(f"{name}: {error_text(result)}")


def finalized_count(services: Services) -> int:
    with services.db.read() as session:
        return sum(len(ids) for ids in SqlTrajectoryStore(session).finalized_groups(OWNER).values())


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, tg: anyio.abc.TaskGroup) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port, on this event loop; yields its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="error"))
    tg.start_soon(server.serve)
    while not server.started:
        await anyio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True


@contextlib.asynccontextmanager
async def proxied_run(workdir: Path) -> AsyncIterator[tuple[ProxiedAgents, Services, Callable[[], Awaitable[None]]]]:
    """The environment and a hindsight service over HTTP on this event loop, the agents' proxies,
    and the round-end wait: every record delivered, then the analysis drained."""
    services = build_services(Settings(data_dir=workdir / "service"))
    env = EnvironmentServer()
    try:
        async with anyio.create_task_group() as tg:
            async with (
                serving(build_http_app(services, OwnerResolver({}, OWNER)), tg) as hindsight_url,
                serving(env.app(), tg) as env_url,
                AsyncExitStack() as stack,
            ):
                agents = ProxiedAgents(stack, workdir, env, f"{env_url}/mcp", f"{hindsight_url}/mcp/")

                async def wait_for_analysis() -> None:
                    deadline = time.monotonic() + _DELIVERY_S
                    while finalized_count(services) < agents.trajectories:
                        if time.monotonic() > deadline:
                            raise RuntimeError("the proxies did not deliver the round's trajectories")
                        await anyio.sleep(0.2)
                    analysis = analysis_for(services)
                    while analysis.run_once().trajectories:
                        pass

                yield agents, services, wait_for_analysis
    finally:
        services.close()


async def run_proxied(config: BenchConfig, workdir: Path) -> BenchResults:
    """The hindsight condition of ``config`` through the proxy."""
    async with proxied_run(workdir) as (agents, _, wait):

        @contextlib.asynccontextmanager
        async def factory(condition: Condition) -> AsyncIterator[ToolClient]:
            yield agents

        def agent(condition: Condition, config: BenchConfig, embedder: Callable[[], Embedder]) -> Policy:
            return ProxiedPolicy(top_k=config.top_k, min_confidence=config.min_confidence)

        return await run_bench(factory, wait, config, make=make_episode, run=run_through_proxy, agent=agent)


def print_comparison(direct: BenchResults, proxied: BenchResults, seconds: Sequence[float]) -> None:
    config = direct.config
    table = Table(
        title=f"hindsight, direct vs through the proxy: unseen instances (round {config.rounds} unless noted)"
    )
    for column in ("family", "direct success", "proxy success", "direct steps/oracle", "proxy steps/oracle"):
        table.add_column(column, justify="left" if column == "family" else "right", no_wrap=column == "family")
    rows = [(f"all, round {r}", r, ALL) for r in range(1, config.rounds + 1)]
    rows += [(family, config.rounds, family) for family in config.families]
    for label, round_, family in rows:
        a, b = direct.cell("hindsight", round_, family), proxied.cell("hindsight", round_, family)
        if a is None or b is None:
            continue
        table.add_row(
            label,
            f"{a.success_rate:.0%}",
            f"{b.success_rate:.0%}",
            f"{a.oracle_ratio or 0:.3f}",
            f"{b.oracle_ratio or 0:.3f}",
        )
    Console().print(table)
    print(f"wall time: direct {seconds[0]:.0f} s, through the proxy {seconds[1]:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=None, help="comma-separated (default: the eleven hand-written)")
    parser.add_argument("--train", type=int, default=10, help="training episodes per family and round")
    parser.add_argument("--eval", type=int, default=10, help="evaluation episodes per family and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = BenchConfig.model_validate(
        {
            "train_episodes": args.train,
            "eval_episodes": args.eval,
            "rounds": args.rounds,
            "seed": args.seed,
            "conditions": ("hindsight",),
        }
        | ({"families": tuple(args.families.split(","))} if args.families else {})
    )
    with tempfile.TemporaryDirectory(prefix="hindsight-through-proxy-") as tmp:
        start = time.monotonic()
        direct = anyio.run(run_local, config, Path(tmp) / "direct")
        middle = time.monotonic()
        proxied = anyio.run(run_proxied, config, Path(tmp) / "proxy")
        seconds = (middle - start, time.monotonic() - middle)
    print_comparison(direct, proxied, seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
