"""Scripted agents record valid trajectories through the official MCP client, in process."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest
from mcp import Client

from actors.engine.model.trajectories import ResultStatus, Trajectory, TrajectoryStatus
from cluster.demo.agents import ExplorePolicy, HindsightPolicy, ReplayPolicy, run_episode
from cluster.demo.envs import make_episode
from cluster.demo.harness import default_embedder
from cluster.demo.replay import RawTrajectory, RecordedStep, ReplayMemory
from cluster.services import Services

pytestmark = pytest.mark.anyio

ClientFor = Callable[[str], AbstractAsyncContextManager[Client]]


def load(services: Services, owner: str, trajectory_id: str) -> Trajectory:
    return services.capture.load(owner, uuid.UUID(trajectory_id))


def assert_siblings_for_retries(trajectory: Trajectory) -> None:
    """Every failed or half-worked node is a leaf, and its retry shares its parent."""
    parents = {n.parent_id for n in trajectory.nodes}
    for node in trajectory.nodes:
        if node.execution_result.status != ResultStatus.SUCCESS and node.parent_id is not None:
            assert node.node_id not in parents


@pytest.mark.parametrize("family", ["form_submit", "csv_export", "table_lookup"])
async def test_the_exploring_agent_records_every_call_and_finalizes(
    family: str, client_for: ClientFor, services: Services
) -> None:
    episode = make_episode(family, 4)
    async with client_for("bench") as client:
        result = await run_episode(client, episode, ExplorePolicy(), agent_id="explorer")
    assert result.succeeded == episode.succeeded
    assert list(result.trajectory_ids) == ["agent"]
    trajectory = load(services, "bench", result.trajectory_ids["agent"])
    assert trajectory.status is TrajectoryStatus.FINALIZED
    assert trajectory.outcome is not None
    assert trajectory.outcome.status is (ResultStatus.SUCCESS if episode.succeeded else ResultStatus.FAILURE)
    assert trajectory.header.task == episode.task
    assert trajectory.header.task_type == episode.task_type
    assert len(trajectory.nodes) == episode.steps == result.steps
    assert [n.chosen_action for n in trajectory.nodes] == [call.action for _, call, _ in episode.history]
    assert any(n.is_decision for n in trajectory.nodes)
    assert_siblings_for_retries(trajectory)


async def test_exploration_is_reproducible_for_a_seed(client_for: ClientFor) -> None:
    async with client_for("bench") as client:
        first = await run_episode(client, make_episode("db_insert", 8), ExplorePolicy(), agent_id="a")
        second = await run_episode(client, make_episode("db_insert", 8), ExplorePolicy(), agent_id="a")
    assert (first.steps, first.succeeded) == (second.steps, second.succeeded)


async def test_a_multi_role_task_records_one_trajectory_per_role(client_for: ClientFor, services: Services) -> None:
    episode = make_episode("data_sync", 3)
    async with client_for("bench") as client:
        result = await run_episode(client, episode, ExplorePolicy(), agent_id="fleet")
    assert set(result.trajectory_ids) == {"planner", "executor", "verifier"}
    total = 0
    for role, trajectory_id in result.trajectory_ids.items():
        trajectory = load(services, "bench", trajectory_id)
        assert trajectory.header.role == role
        assert trajectory.status is TrajectoryStatus.FINALIZED
        assert_siblings_for_retries(trajectory)
        total += len(trajectory.nodes)
    assert total == episode.steps


async def test_raw_replay_reuses_a_stored_trajectory_verbatim(client_for: ClientFor, services: Services) -> None:
    memory = ReplayMemory(default_embedder())
    policy = ReplayPolicy(memory)
    async with client_for("replay") as client:
        first = await run_episode(client, make_episode("product_import", 1), policy, agent_id="replayer")
        assert first.succeeded
        memory.commit()
        assert len(memory) == 1
        episode = make_episode("product_import", 2)
        second = await run_episode(client, episode, policy, agent_id="replayer")
    stored = memory.nearest(episode.task)
    assert stored is not None
    # The first call is the stored one, concrete file name and all — and it fails on a new instance.
    _, call, outcome = episode.history[0]
    assert call == stored.steps[0].call
    assert outcome.status == "failure"
    trajectory = load(services, "replay", second.trajectory_ids["agent"])
    assert trajectory.nodes[0].action_params == stored.steps[0].call.params
    assert "replaying" in (trajectory.nodes[0].llm_reasoning or "")


async def test_replay_memory_returns_the_most_similar_task() -> None:
    memory = ReplayMemory(default_embedder())
    for family in ("form_submit", "product_import", "csv_export"):
        episode = make_episode(family, 0)
        view = episode.view()
        assert view is not None
        memory.add(RawTrajectory(task=episode.task, steps=(RecordedStep(role="agent", call=view.options[0]),)))
    assert memory.nearest("anything") is None
    memory.commit()
    found = memory.nearest(make_episode("csv_export", 5).task)
    assert found is not None
    assert found.task == make_episode("csv_export", 0).task
    assert len(memory) == 3


async def test_the_hindsight_agent_records_and_finalizes_even_with_nothing_served(
    client_for: ClientFor, services: Services
) -> None:
    episode = make_episode("table_lookup", 5)
    async with client_for("hindsight") as client:
        result = await run_episode(client, episode, HindsightPolicy(), agent_id="hs")
    trajectory = load(services, "hindsight", result.trajectory_ids["agent"])
    assert trajectory.status is TrajectoryStatus.FINALIZED
    assert len(trajectory.nodes) == episode.steps
    assert result.applied_template_ids == ()
