"""`manage.py mcp_serve`: the MCP gateway (docs/mcp.md) over stdio for one agent, or over
streamable HTTP at `/mcp/` for every agent with a token."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.gateway.store import bearer_principal
from dispatch.stopping import stop_signals


class Command(BaseCommand):
    help = ("Serve the MCP gateway: over stdio as the agent of --token (for a desktop or IDE MCP "
            "client that starts it), or with --http over streamable HTTP at /mcp/, where each "
            "request brings its own 'Authorization: Bearer <token>'.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--token", help="the agent's token (stdio)")
        parser.add_argument("--http", action="store_true", help="serve streamable HTTP")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--wait", type=float, default=None,
                            help="seconds a call waits for its outcome (MCP_WAIT_SECONDS)")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["http"]:
            if opts["token"]:
                raise CommandError("--http takes no --token: every request brings its own")
            self._serve_http(opts["host"], opts["port"], opts["wait"])
            return
        token = opts["token"]
        if not token:
            raise CommandError("give the agent's token: --token T (or serve --http)")
        if bearer_principal(f"Bearer {token}") is None:
            raise CommandError("unknown or revoked token")
        self._serve_stdio(token, opts["wait"])

    @staticmethod
    def _serve_stdio(token: str, wait: float | None) -> None:
        from mcp.server.stdio import stdio_server

        from dispatch.gateway.server import Gateway

        gateway = Gateway(token=token, wait_seconds=wait)

        async def serve() -> None:
            async with stdio_server() as (read, write):
                await gateway.server.run(read, write,
                                         gateway.server.create_initialization_options())

        anyio.run(serve)

    @staticmethod
    def _serve_http(host: str, port: int, wait: float | None) -> None:
        import uvicorn

        from dispatch.gateway.http import gateway_app

        logging.getLogger("dispatch.gateway").info(
            "MCP gateway: http://%s:%s/mcp/ (Authorization: Bearer <agent token>)", host, port)
        # log_config=None: uvicorn's loggers go through settings.LOGGING (JSON lines).
        # uvicorn shuts down gracefully on SIGTERM and SIGINT, then raises the signal again
        # into the handlers it found: ours, so the process exits 0 rather than dying of it
        # (dispatch/stopping.py).
        with stop_signals():
            uvicorn.run(gateway_app(host=host, wait_seconds=wait), host=host, port=port,
                        log_level="warning", lifespan="on", log_config=None)
