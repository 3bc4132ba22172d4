"""The MCP gateway over streamable HTTP at `/mcp/` (docs/mcp.md#http): the SDK's Starlette app for
the gateway server, behind a gate that refuses a request without a live agent token.

`GET /healthz` answers 200 `{"status": "ok"}` while the process serves, before the gate and
anything of MCP, touching nothing (no token, no database), as the web app's `/healthz` does
(config/health.py): the liveness probe of an orchestrator or of compose's healthcheck.

The gate answers 401 with `WWW-Authenticate: Bearer` and a JSON-RPC error body (which the
official client surfaces as such) before anything of MCP is parsed; each request that passes is
authenticated again by the server from the same header, so no request is served as anyone but
the holder of its own token. Bodies over `MCP_MAX_BODY_BYTES` are the SDK's 413.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

from dispatch.gateway.server import Gateway
from dispatch.gateway.store import bearer_principal, in_thread

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PATH = "/mcp/"
HEALTH = "/healthz"
HEALTHY = json.dumps({"status": "ok"}).encode()
UNAUTHORIZED = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32001, "message": "Unauthorized: send 'Authorization: Bearer <agent token>'"}},
).encode()


class BearerGate:
    """ASGI middleware: `/mcp` requests need a live agent token; lifespan events pass."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == HEALTH:
            await _healthz(scope, send)
            return
        if scope["type"] == "http":
            if scope["path"] == PATH.rstrip("/"):  # `/mcp` is `/mcp/`, without a redirect
                scope = {**scope, "path": PATH, "raw_path": PATH.encode()}
            if scope["path"].startswith(PATH) and not await self._authorized(scope):
                await _respond(send, 401, UNAUTHORIZED, [
                    (b"www-authenticate", b'Bearer realm="mcp", error="invalid_token"')])
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _authorized(scope: Scope) -> bool:
        values = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
        if len(values) != 1:
            return False
        header = values[0].decode("latin-1")
        return await in_thread(bearer_principal, header) is not None


async def _respond(send: Send, status: int, body: bytes,
                   headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *headers]})
    await send({"type": "http.response.body", "body": body})


async def _healthz(scope: Scope, send: Send) -> None:
    method = scope.get("method", "GET")
    if method not in ("GET", "HEAD"):
        await _respond(send, 405, b"", [(b"allow", b"GET, HEAD")])
        return
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(HEALTHY)).encode()),
        (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else HEALTHY})


def gateway_app(*, host: str = "127.0.0.1", wait_seconds: float | None = None) -> ASGIApp:
    """The ASGI app of the HTTP gateway. `host` is where it listens: on loopback the SDK's
    DNS-rebinding protection is on."""
    gateway = Gateway(wait_seconds=wait_seconds)
    app = gateway.server.streamable_http_app(
        streamable_http_path=PATH, host=host,
        max_request_body_size=settings.MCP_MAX_BODY_BYTES)
    return BearerGate(app)
