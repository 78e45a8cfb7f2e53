"""Reporting an episode to hindsight over MCP: one trajectory per role, a node per call.

Retry convention: a call that failed (or half-worked) is a leaf; the retry is its *sibling*
(same parent as the failed node), so a decision point's alternatives hang side by side under
the step before it. Every role's trajectory starts with an execution step, so a failed first
decision still has a parent. The one exception is a failed *root* (a trajectory has exactly one
root): the retry then hangs under it.

An episode whose steps stand alone (``Episode.steps_stand_alone``: each step's result is what
it scored, as in a game) hangs every node under the first one, and is closed by an execution
step that carries how it ended (``finish``: won, or out of steps). Chained, every step would
have the rest of the game in its subtree, and the outcome would land on whatever step came
last: a right move near the end of a lost game, or a look around, would be charged with the loss.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cluster.demo.env_base import Call, Episode, StepResult, StepView

logger = logging.getLogger(__name__)

FINISH = "finish"
"""The closing execution step of an episode whose steps stand alone."""


class ToolClient(Protocol):
    """What the bench needs from an MCP client (``mcp.Client`` satisfies it)."""

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any: ...


class ToolCallFailed(RuntimeError):
    """A recording tool returned an error; the bench cannot go on without the record."""


def error_text(result: Any) -> str:
    content = getattr(result, "content", None) or []
    return " ".join(getattr(c, "text", "") for c in content) or "tool error"


async def call_checked(client: ToolClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool and return its structured content.

    Raises:
        ToolCallFailed: The tool reported an error.
    """
    result = await client.call_tool(name, arguments)
    if getattr(result, "is_error", False):
        raise ToolCallFailed(f"{name}: {error_text(result)}")
    structured = getattr(result, "structured_content", None)
    return dict(structured) if isinstance(structured, Mapping) else {}


class Recorder:
    """Records an episode's calls as trajectories, one per role, and finalizes them.

    Args:
        client: The MCP client.
        episode: The episode being run.
        agent_id: Who the agent is (sent with each trajectory's first node).
    """

    def __init__(self, client: ToolClient, episode: Episode, agent_id: str) -> None:
        self._client = client
        self._episode = episode
        self._agent_id = agent_id
        self.trajectories: dict[str, uuid.UUID] = {}
        self._parents: dict[str, str | None] = {}
        self._roots: dict[str, str] = {}
        self._last: dict[str, StepView] = {}

    async def record(
        self, view: StepView, call: Call, result: StepResult, reasoning: str, *, actions: Sequence[str] | None = None
    ) -> str:
        """Record one call as a node; returns its node id (``actions``: instead of the view's)."""
        role = view.role
        node_id = str(uuid.uuid4())
        self._roots.setdefault(role, node_id)
        self._last[role] = view
        node: dict[str, Any] = {
            "node_id": node_id,
            "parent_id": self._parents.get(role),
            "context_snapshot": view.context,
            "available_actions": list(view.available_actions if actions is None else actions),
            "chosen_action": call.action,
            "action_params": call.params,
            "execution_result": {
                "status": result.status,
                "summary": result.summary,
                # Cost under the names the engine reads: steps always, latency_ms where simulated.
                "data": {"stage": view.stage, **result.cost()},
            },
            "llm_reasoning": reasoning,
        }
        arguments: dict[str, Any] = {"node": node}
        if role not in self.trajectories:
            self.trajectories[role] = uuid.uuid4()
            arguments |= {
                "task": self._episode.task,
                "agent_id": self._agent_id,
                "role": role,
                "task_type": self._episode.task_type,
            }
        arguments["trajectory_id"] = str(self.trajectories[role])
        await call_checked(self._client, "record_trajectory_node", arguments)
        if self._parents.get(role) is None or (result.status == "success" and not self._episode.steps_stand_alone):
            self._parents[role] = node_id
        return node_id

    async def close(self) -> None:
        """Close each trajectory of an episode whose steps stand alone with how it ended (module docstring).

        One action available: an execution step, never scored as a decision, so the outcome is
        on it and on the first step (every path's root), not on the step that happened to come last.
        """
        ep = self._episode
        if not ep.steps_stand_alone:
            return
        if ep.succeeded:
            end = StepResult(status="success", summary=f"won in {ep.steps} steps")
        else:
            end = StepResult(status="failure", summary=f"not won in {ep.steps} steps (budget {ep.budget})")
        for role, view in self._last.items():
            self._parents[role] = self._roots[role]
            await self.record(view, Call(action=FINISH), end, "", actions=[FINISH])

    async def finalize(self, served: Mapping[str, Sequence[str]]) -> None:
        """Finalize every role's trajectory with the episode's outcome and its served template ids."""
        ep = self._episode
        await self.close()
        outcome = "success" if ep.succeeded else "failure"
        summary = f"{outcome} in {ep.steps} steps" + ("" if ep.succeeded else f" (budget {ep.budget})")
        for role, trajectory_id in self.trajectories.items():
            await call_checked(
                self._client,
                "finalize_trajectory",
                {
                    "trajectory_id": str(trajectory_id),
                    "outcome": outcome,
                    "summary": summary,
                    "served_template_ids": sorted(set(served.get(role, ()))),
                },
            )
