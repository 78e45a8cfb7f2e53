"""The MCP tool surface, one module per concept; :func:`build_server` puts them on one server."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from cluster.auth import OwnerResolver
from cluster.services import Services
from cluster.tools.common import Toolbox
from cluster.tools.experience import register_experience_tools
from cluster.tools.memory import register_memory_tools
from cluster.tools.trajectories import register_trajectory_tools

INSTRUCTIONS = """\
hindsight remembers what worked. Before a decision, call query_experience with your situation
(context_snapshot, available_actions) and put the returned prompt block in your context. Record each
decision with record_trajectory_node (the first call also sends task and agent_id). When done, call
finalize_trajectory with the outcome and the experience ids you were served; hindsight learns from it
in the background."""


def build_server(services: Services, owners: OwnerResolver) -> MCPServer:
    """An MCP server exposing ``services``; ``owners`` turns each request's credential into an owner."""
    server = MCPServer(name="hindsight", instructions=INSTRUCTIONS)
    box = Toolbox(server, services, owners)
    register_trajectory_tools(box)
    register_experience_tools(box)
    register_memory_tools(box)
    return server
