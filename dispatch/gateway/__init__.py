"""The MCP gateway (docs/mcp.md): MCP agents' tool calls become exact-action proposals."""
