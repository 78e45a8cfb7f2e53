"""A benchmark environment as an MCP server: the running episode's actions are its tools.

An agent in front of it sees what an agent sees at a real MCP server whose tools change with the
state of the work: ``tools/list`` names the actions of the current stage (the decoys too), and a
call of one is judged by the episode's hidden rules. The answer is what a tool would say: the
result's summary as text, ``isError`` when the call did not do the job (a ``partial`` call
included: MCP has no third status), and the call's simulated cost as ``structuredContent.cost``
(``steps``, and ``latency_ms`` where the family simulates it), which ``hindsight proxy`` records
as the call's cost.

The benchmark sets :attr:`EnvironmentServer.episode` before each episode; between episodes the
server lists no tools and refuses calls.
"""

from __future__ import annotations

from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)
from starlette.types import ASGIApp

from cluster.demo.env_base import Call, Episode

_ANY_PARAMS: dict[str, Any] = {"type": "object", "additionalProperties": True}


class EnvironmentServer:
    """The MCP server of whichever episode is running."""

    def __init__(self) -> None:
        self.episode: Episode | None = None
        self.server: Server[None] = Server[None](
            "procedural-environment",
            instructions="The tools of the task at hand; they change as the task moves on.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def app(self) -> ASGIApp:
        """Streamable HTTP at ``/mcp`` (stateless, JSON answers), for uvicorn on loopback."""
        return self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[None], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        view = self.episode.view() if self.episode is not None else None
        if view is None:
            return ListToolsResult(tools=[])
        return ListToolsResult(
            tools=[
                Tool(
                    name=action,
                    description=f"{action.replace('_', ' ')}: a step of {view.stage}",
                    input_schema=_ANY_PARAMS,
                )
                for action in view.available_actions
            ]
        )

    async def _call_tool(self, ctx: ServerRequestContext[None], params: CallToolRequestParams) -> CallToolResult:
        episode = self.episode
        if episode is None or episode.done:
            return CallToolResult(content=[TextContent(type="text", text="No task is running.")], is_error=True)
        result = episode.act(Call(action=params.name, params=params.arguments or {}))
        return CallToolResult(
            content=[TextContent(type="text", text=result.summary)],
            structured_content={"cost": result.cost()},
            is_error=result.status != "success",
        )
