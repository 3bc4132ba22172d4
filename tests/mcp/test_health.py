"""`GET /healthz` of the HTTP gateway (docs/mcp.md#http), in process through its ASGI app: 200
`{"status": "ok"}` while the process serves, without a token and before anything of MCP; the
gate still refuses `/mcp/` without one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from dispatch.gateway.http import gateway_app

pytestmark = pytest.mark.django_db


def ask(method: str, path: str, **headers: str) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway_app())
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://127.0.0.1:8001") as client:
            return await client.request(method, path, headers=headers)

    return asyncio.run(main())


def test_healthz_answers_ok_without_a_token() -> None:
    answer = ask("GET", "/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["cache-control"] == "no-store"


def test_healthz_answers_head_and_refuses_other_methods() -> None:
    assert ask("HEAD", "/healthz").status_code == 200
    refused = ask("POST", "/healthz")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, HEAD"


def test_the_gate_still_refuses_mcp_without_a_token() -> None:
    answer = ask("POST", "/mcp/", **{"content-type": "application/json"})
    assert answer.status_code == 401
    body: Any = json.loads(answer.content)
    assert body["error"]["code"] == -32001
