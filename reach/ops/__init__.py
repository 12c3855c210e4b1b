"""Use cases shared by the CLI, the console, the HTTP API and MCP; they return plain values; interfaces only render
them."""
