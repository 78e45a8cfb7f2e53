"""``hindsight proxy``: an MCP server in front of an agent's own MCP servers that records every tool
call as a trajectory node, so an agent learns without recording code (docs/proxy.md)."""
