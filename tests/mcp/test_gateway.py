"""The MCP gateway end to end, with the official SDK's client over stdio and streamable HTTP,
against a gateway process, a real Celery worker and the real destinations (docs/mcp.md)."""

from __future__ import annotations

import re
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from mcp import Client

from demo.destinations.runner import list_all
from dispatch.models import Operation, Proposal
from tests.mcp.conftest import Gateway, Stack, http_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.slow]

OWN_TOOLS = ["crm.lookup", "email.send", "payments.transfer",
             "resource.create", "resource.revise", "proposal.status"]
#: What model APIs accept as a function's name (docs/mcp.md#names).
MODEL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.mark.parametrize("names", ["qualified", "model"])
def test_tools_are_the_agents_contracts_with_their_annotations(
        stack: Stack, names: str) -> None:
    """Listed by qualified name (docs/mcp.md#tools), or by the names every model API accepts
    where the deployment asks for them (`MCP_TOOL_NAMES=model`); titled (and annotated) with
    the qualified name either way."""
    gateway = Gateway(env={**stack.env, "MCP_TOOL_NAMES": names},
                      log=stack.tmp / f"gateway-{names}.log")
    gateway.start()

    async def listed() -> Any:
        async with http_client(gateway.url, stack.world.owner_token) as client:
            return (await client.list_tools()).tools

    try:
        tools = {tool.name: tool for tool in anyio.run(listed)}
    finally:
        gateway.stop()
    named = {name: name if names == "qualified" else name.replace(".", "_")
             for name in OWN_TOOLS}
    assert sorted(tools) == sorted(named.values())
    if names == "model":
        assert all(MODEL_NAME.fullmatch(name) for name in tools)
    assert sorted(tool.title for tool in tools.values()) == sorted(OWN_TOOLS)
    assert all(tool.annotations.title == tool.title for tool in tools.values())
    lookup, transfer = tools[named["crm.lookup"]], tools[named["payments.transfer"]]
    assert (lookup.title, transfer.title) == ("crm.lookup", "payments.transfer")
    assert f"`{named['proposal.status']}`" in transfer.description
    assert lookup.annotations.read_only_hint is True
    assert lookup.annotations.destructive_hint is False
    assert transfer.annotations.read_only_hint is False
    assert transfer.annotations.destructive_hint is True
    assert "approval" in transfer.description and "Runs without" in lookup.description
    assert transfer.input_schema["required"] == ["amount", "currency", "from_account",
                                                 "to_account"] or set(
        transfer.input_schema["required"]) >= {"amount", "from_account", "to_account"}


@pytest.mark.parametrize(("transport", "name"), [
    ("http", "crm_lookup"), ("stdio", "crm_lookup"),
    ("http", "crm.lookup"),  # the qualified name, as listed before tool names: still taken
])
def test_an_ungated_lookup_runs_on_the_worker_and_answers_the_operation(
        stack: Stack, gateway: Gateway, transport: str, name: str) -> None:
    async def call() -> Any:
        if transport == "http":
            async with http_client(gateway.url, stack.world.owner_token) as client:
                return await client.call_tool(name, {"customer_id": "cus-001"})
        async with Client(stack.stdio(stack.world.owner_token)) as client:
            return await client.call_tool(name, {"customer_id": "cus-001"})

    answer = anyio.run(call)
    assert answer.is_error is False, answer.structured_content
    body = answer.structured_content
    operation = Operation.objects.get(id=body["operation"]["id"])
    assert body == {"proposal_id": operation.proposal_id,
                    "operation": {"id": operation.id, "state": "completed",
                                  "result": operation.result}}
    proposal = Proposal.objects.get(id=operation.proposal_id)
    assert proposal.channel == "mcp"
    assert proposal.client  # the SDK's client names itself


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc", "Bearer"])
def test_a_request_without_a_live_token_is_401_before_any_mcp(
        stack: Stack, gateway: Gateway, header: str | None) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if header is not None:
        headers["Authorization"] = header
    response = httpx.post(gateway.url, headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == -32001
    assert not list_all(stack.destinations.directory)["email"]
