"""The MCP tool surface. Each tool parses its input, makes one service call and returns a model.

Errors raise: a hindsight error becomes a ``ToolError`` whose message the model reads (``is_error``);
anything else is a crash the SDK reports without leaking internals.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from cluster.auth import OwnerResolver
from cluster.core.api import FinalizeResult, RecordResult
from cluster.core.errors import HindsightError
from cluster.core.trajectory import NodeIn, Outcome, ResultStatus, TrajectoryHeader
from cluster.services import Services

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = """\
hindsight remembers what worked. Before a task, call query_experience with your situation and put the
returned prompt_block in your context. While working, record each decision with record_trajectory_node
(the first call also sends task and agent_id). When done, call finalize_trajectory with the outcome and
the template ids you were served; hindsight learns from it in the background."""


@contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except HindsightError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
    except ValidationError as exc:
        raise ToolError(f"InvalidInput: {exc}") from exc


async def _call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run blocking store work off the event loop, mapping errors for the model."""
    with _tool_errors():
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def build_server(services: Services, owners: OwnerResolver) -> MCPServer:
    """An MCP server exposing ``services``; ``owners`` turns each request's credential into an owner."""
    server: MCPServer = MCPServer(name="hindsight", instructions=INSTRUCTIONS)
    metrics = services.metrics

    def timed(name: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            @functools.wraps(fn)
            async def inner(*args: P.args, **kwargs: P.kwargs) -> R:
                start = time.perf_counter()
                ok = False
                try:
                    result = await fn(*args, **kwargs)
                    ok = True
                    return result
                finally:
                    metrics.observe_tool(name, time.perf_counter() - start, ok)

            return inner

        return wrap

    def owner_of(ctx: Context) -> str:
        with _tool_errors():
            return owners.owner_for(ctx.request_context.request)

    @server.tool()
    @timed("record_trajectory_node")
    async def record_trajectory_node(
        trajectory_id: Annotated[uuid.UUID, Field(description="Your id for this task's trajectory (a UUID).")],
        node: NodeIn,
        ctx: Context,
        task: Annotated[str | None, Field(description="The task in words; required with the first node.")] = None,
        agent_id: Annotated[str | None, Field(description="Who you are; required with the first node.")] = None,
        role: Annotated[str, Field(description="planner, executor, verifier, ...")] = "agent",
        task_type: Annotated[str | None, Field(description="A short label such as 'import' or 'form'.")] = None,
    ) -> RecordResult:
        """Record one decision point: what you saw, the actions you could take, the one you chose and
        what happened. Send the parent's node_id as parent_id (none for the first node). Re-sending the
        same node is harmless. The first call for a trajectory must include task and agent_id."""
        return await record_trajectory_nodes(trajectory_id, [node], ctx, task, agent_id, role, task_type)

    @server.tool()
    @timed("record_trajectory_nodes")
    async def record_trajectory_nodes(
        trajectory_id: uuid.UUID,
        nodes: Annotated[list[NodeIn], Field(min_length=1, max_length=500)],
        ctx: Context,
        task: str | None = None,
        agent_id: str | None = None,
        role: str = "agent",
        task_type: str | None = None,
    ) -> RecordResult:
        """Record several nodes at once (parents before children); all are stored or none."""
        owner = owner_of(ctx)
        header = None
        if task is not None or agent_id is not None:
            if task is None or agent_id is None:
                raise ToolError("InvalidInput: send both task and agent_id to start a trajectory")
            with _tool_errors():
                header = TrajectoryHeader(
                    trajectory_id=trajectory_id, agent_id=agent_id, role=role, task=task, task_type=task_type
                )
        result = await _call(services.capture.record, owner, trajectory_id, nodes, header)
        metrics.nodes_written.inc(len(nodes))
        return result

    @server.tool()
    @timed("finalize_trajectory")
    async def finalize_trajectory(
        trajectory_id: uuid.UUID,
        outcome: Annotated[ResultStatus, Field(description="How the whole task ended.")],
        ctx: Context,
        summary: Annotated[str | None, Field(max_length=2000)] = None,
        served_template_ids: Annotated[
            list[uuid.UUID], Field(description="template_id of every experience you were served for this task.")
        ] = [],  # noqa: B006  (the SDK reads defaults from the signature; never mutated)
    ) -> FinalizeResult:
        """Close the trajectory with its outcome. Returns at once; hindsight analyses it in the
        background and reports the outcome to the experiences you were served."""
        owner = owner_of(ctx)
        with _tool_errors():
            result = Outcome(status=outcome, summary=summary, served_template_ids=served_template_ids)
        trajectory = await _call(services.capture.finalize, owner, trajectory_id, result)
        return FinalizeResult(
            trajectory_id=trajectory_id, status=trajectory.status, outcome=outcome, queued_for_analysis=True
        )

    _ = (record_trajectory_node, finalize_trajectory)
    return server
