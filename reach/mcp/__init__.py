"""MCP: the mesh's live capabilities as Model Context Protocol tools (docs/mcp.md)."""
