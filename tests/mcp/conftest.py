"""The MCP gateway's fixtures (tests/support/mcp.py)."""

from tests.support.mcp import Gateway, Stack, gateway, http_client, stack

__all__ = ["Gateway", "Stack", "gateway", "http_client", "stack"]
