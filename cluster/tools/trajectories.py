"""Trajectory tools: record decision points, finalize a task."""

# Annotations stay eager here: the SDK reads them.
import json
import uuid
from collections.abc import Sequence
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field, WithJsonSchema

from actors.engine.model.trajectories import (
    FinalizeResult,
    NodeIn,
    Outcome,
    RecordResult,
    ResultStatus,
    TrajectoryHeader,
)
from cluster.tools.common import ToolContext, tool_errors, toolbox
from cluster.tools.ids import TrajectoryName, trajectory_uuid
from cluster.tools.registry import AtMost
from cluster.trajectories.capture import RecordCall

_TASK = "The task in words; with the first call."
_AGENT = "Who you are; with the first call."
_ROLE = "planner, executor, ...; first call."
_TASK_TYPE = "A short label, e.g. 'import'; first call."
_RUN = "The multi-agent run this is one role of (a later role's failure also teaches it)."
_SAME = "As in record_trajectory_node."


async def record_trajectory_node(
    trajectory_id: TrajectoryName,
    node: Annotated[NodeIn, Field(description="The decision point.")],
    ctx: ToolContext,
    task: Annotated[str | None, Field(description=_TASK)] = None,
    agent_id: Annotated[str | None, Field(description=_AGENT)] = None,
    role: Annotated[str, Field(description=_ROLE)] = "agent",
    task_type: Annotated[str | None, Field(description=_TASK_TYPE)] = None,
    run_id: Annotated[str | None, Field(description=_RUN)] = None,
) -> Annotated[CallToolResult, RecordResult]:
    """Record one decision point: what you saw, the actions you could take, the one you chose and what
    happened (execution_result: status plus any keys of your own; steps, latency_ms, tokens make cheaper
    actions preferred). The first call opens the trajectory and must send task and agent_id (and run_id
    in a multi-agent run). Re-sending a node is harmless. At most {max_trajectory_nodes} nodes per
    trajectory; a context_snapshot at most {max_context_bytes} bytes."""
    return await _record(ctx, trajectory_id, [node], task, agent_id, role, task_type, run_id)


async def record_trajectory_nodes(
    trajectory_id: Annotated[TrajectoryName, Field(description=_SAME)],
    nodes: Annotated[
        list[NodeIn],
        Field(min_length=1, description="Nodes, each as record_trajectory_node's node; parents before children."),
        AtMost("max_trajectory_nodes"),
        # The node's schema is published once, with record_trajectory_node: every tool list carries it.
        WithJsonSchema({"type": "array", "items": {"type": "object"}}),
    ],
    ctx: ToolContext,
    task: Annotated[str | None, Field(description=_SAME)] = None,
    agent_id: Annotated[str | None, Field(description=_SAME)] = None,
    role: Annotated[str, Field(description=_SAME)] = "agent",
    task_type: Annotated[str | None, Field(description=_SAME)] = None,
    run_id: Annotated[str | None, Field(description=_SAME)] = None,
) -> Annotated[CallToolResult, RecordResult]:
    """record_trajectory_node for several nodes at once: all are stored or none."""
    return await _record(ctx, trajectory_id, nodes, task, agent_id, role, task_type, run_id)


async def finalize_trajectory(
    trajectory_id: Annotated[TrajectoryName, Field(description=_SAME)],
    outcome: Annotated[ResultStatus, Field(description="How the whole task ended.")],
    ctx: ToolContext,
    summary: Annotated[str | None, Field(max_length=2000, description="One line on how it ended.")] = None,
    served_template_ids: Annotated[
        list[uuid.UUID], Field(description="The id of every experience you were served for this task.")
    ] = [],  # noqa: B006  (the SDK reads defaults from the signature; never mutated)
) -> Annotated[CallToolResult, FinalizeResult]:
    """Close a trajectory with its outcome; hindsight learns from it in the background and reports the
    outcome to the experiences you were served. Sending it again changes nothing."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    with tool_errors():
        result = Outcome(status=outcome, summary=summary, served_template_ids=served_template_ids)
    stored_id = trajectory_uuid(owner, trajectory_id)
    trajectory = await box.capture(box.services.capture.finalize, owner, stored_id, result)
    finalized = FinalizeResult(
        trajectory_id=stored_id, status=trajectory.status, outcome=outcome, queued_for_analysis=True
    )
    return _named(finalized, trajectory_id)


TOOLS = (record_trajectory_node, record_trajectory_nodes, finalize_trajectory)
"""This module's tools, in the order the server lists them."""


def _named(result: RecordResult | FinalizeResult, name: str) -> CallToolResult:
    """``result`` as the caller reads it: its trajectory under the name the caller gave it."""
    body = {**result.model_dump(mode="json"), "trajectory_id": name}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body, separators=(",", ":")))], structured_content=body
    )


async def _record(
    ctx: ToolContext,
    trajectory_id: str,
    nodes: Sequence[NodeIn],
    task: str | None,
    agent_id: str | None,
    role: str,
    task_type: str | None,
    run_id: str | None,
) -> CallToolResult:
    """Both record tools: the first call of a trajectory opens it (``task`` and ``agent_id``)."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    stored_id = trajectory_uuid(owner, trajectory_id)
    header = None
    if task is not None or agent_id is not None:
        if task is None or agent_id is None:
            raise ToolError("InvalidInput: send both task and agent_id to start a trajectory")
        with tool_errors():
            header = TrajectoryHeader(
                trajectory_id=stored_id,
                agent_id=agent_id,
                role=role,
                task=task,
                task_type=task_type,
                run_id=run_id,
            )
    with tool_errors():
        result = await box.records.submit(RecordCall(owner, stored_id, nodes, header))
    box.services.metrics.nodes_written.inc(len(nodes))
    return _named(result, trajectory_id)
