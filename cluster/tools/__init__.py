"""The MCP tool surface, one module per concept; :func:`build_server` puts them on one server.

A tool is a module-level async function of its concept's module, listed in that module's
``TOOLS``; docs/architecture.md ("Where does my change go") shows how to add one.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from cluster.auth import OwnerResolver
from cluster.services import Services
from cluster.tools import experience, memory, trajectories
from cluster.tools.common import Toolbox
from cluster.tools.registry import published, published_tool

INSTRUCTIONS = """\
hindsight remembers what worked. Before a decision, call query_experience with your situation
(context_snapshot, available_actions) and put the returned prompt block in your context. Record each
decision with record_trajectory_node under a trajectory_id you choose (the first call also sends task
and agent_id). When done, call finalize_trajectory with the outcome and the experience ids you were
served; hindsight learns from it in the background."""


TOOL_FUNCTIONS = (*trajectories.TOOLS, *experience.TOOLS, *memory.TOOLS)
"""Every tool, in the order the server lists them."""


def build_server(services: Services, owners: OwnerResolver) -> MCPServer[Toolbox]:
    """An MCP server exposing ``services``; ``owners`` turns each request's credential into an owner.

    The server's lifespan yields the tools' :class:`Toolbox`, which each tool reads from its context.
    """
    box = Toolbox(services, owners)
    values = published(services.settings)
    tools = [published_tool(fn, services.metrics, values) for fn in TOOL_FUNCTIONS]
    return MCPServer(name="hindsight", instructions=INSTRUCTIONS, tools=tools, lifespan=box.lifespan)
