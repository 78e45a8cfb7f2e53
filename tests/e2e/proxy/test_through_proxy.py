"""An agent that only calls its tools through ``hindsight proxy`` learns: the procedural benchmark's
environment as an MCP server, the proxy started by the official client over stdio, recording into
a real hindsight service over HTTP (bench/procedural/through_proxy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.procedural.families import make_episode
from bench.procedural.through_proxy import ProxiedPolicy, proxied_run, run_through_proxy
from cluster.demo.agents import EpisodeResult
from cluster.trajectories.repository import SqlTrajectoryStore

pytestmark = pytest.mark.anyio

FAMILY = "asset_preview"
"""One role; the right tool depends on a categorical feature (five MIME types onto two tools)."""
EVAL_SEEDS = range(5000, 5006)


async def test_served_advice_changes_what_the_agent_behind_the_proxy_chooses(tmp_path: Path) -> None:
    async with proxied_run(tmp_path) as (agents, services, wait_for_analysis):

        async def evaluate() -> list[EpisodeResult]:
            policy = ProxiedPolicy()
            return [
                await run_through_proxy(agents, make_episode(FAMILY, seed), policy, agent_id="test")
                for seed in EVAL_SEEDS
            ]

        before = await evaluate()
        trainer = ProxiedPolicy()
        for seed in range(10):
            await run_through_proxy(agents, make_episode(FAMILY, seed), trainer, agent_id="test")
        await wait_for_analysis()
        after = await evaluate()

        await wait_for_analysis()  # every record delivered
        with services.db.read() as session:
            store = SqlTrajectoryStore(session)
            [ids] = store.finalized_groups("bench-proxy").values()
            first = store.load_many("bench-proxy", ids[:1])[0]

    # Nothing learned before: the agent explores, and some first guesses are wrong.
    assert not any(r.applied_template_ids for r in before)
    assert sum(r.steps for r in before) > sum(r.oracle_steps for r in before)
    # After: it follows what the proxy recorded and served, and needs no more steps than the oracle.
    assert all(r.applied_template_ids and r.succeeded for r in after)
    assert [r.steps for r in after] == [r.oracle_steps for r in after]
    # The proxy recorded what the agent saw: the stage's tools, the features it sent, the tool's cost.
    decision = next(n for n in first.nodes if len(n.available_actions) > 1)
    assert "mime_type" in decision.context_snapshot
    assert decision.execution_result.data["cost"]["steps"] == 1
    assert len(ids) == len(EVAL_SEEDS) * 2 + 10
