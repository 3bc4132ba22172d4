"""The Python client's webhooks and keys (`webhooks()`, `create_webhook()`, `delete_webhook()`,
`keys()`), sync and async, over HTTP against a live server: an agent registers, lists and deletes
its own webhooks (the secret shown once), and the keys it reads verify a permit token the worker
minted, with `exact_console.permits.verify`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dispatch.models import Operation
from dispatch.runtime import get_runtime
from dispatch.services.permit_tokens import permit_token
from dispatch.signing import jwks
from exact_console import AsyncClient, Client, Denied
from exact_console.permits import verify
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = "https://hooks.acme.example/console"
EVENTS = ["approval.granted", "operation.completed"]


def test_an_agent_registers_lists_and_deletes_its_webhooks(agent: Client, world: World) -> None:
    created = agent.create_webhook(HOOK, events=EVENTS)
    assert created["url"] == HOOK and created["events"] == EVENTS
    assert created["secret"].startswith("whsec_")

    listed = agent.webhooks()["results"]
    assert listed == [{key: created[key] for key in ("id", "url", "events", "created_at")}]
    assert "secret" not in listed[0]

    assert agent.delete_webhook(created["id"])["id"] == created["id"]
    assert agent.webhooks() == {"results": []}
    with pytest.raises(Denied) as refused:
        agent.delete_webhook(created["id"])
    assert (refused.value.status, refused.value.code) == (404, "not_found")
    with pytest.raises(Denied) as bad:
        agent.create_webhook(HOOK, events=["approval.nonsense"])
    assert bad.value.code == "schema_invalid"


def test_the_async_client_registers_lists_and_deletes_too(live_server: Any, world: World) -> None:
    async def main() -> tuple[Any, ...]:
        async with AsyncClient(live_server.url, world.owner_token) as agent:
            created = await agent.create_webhook(HOOK, events=EVENTS)
            listed = await agent.webhooks()
            deleted = await agent.delete_webhook(created["id"])
            return created, listed, deleted, await agent.webhooks()

    created, listed, deleted, after = asyncio.run(main())
    assert [w["id"] for w in listed["results"]] == [created["id"]] == [deleted["id"]]
    assert after == {"results": []}


def test_the_keys_verify_a_permit_token_the_worker_mints(agent: Client, world: World,
                                                         live_server: Any) -> None:
    proposal = agent.propose("crm.lookup", {"customer_id": "cus-001"}, call_id="c-keys-1")
    dispatched = agent.dispatch(proposal["id"])
    operation = Operation.objects.select_related("proposal").get(id=dispatched["operation_id"])
    token = permit_token(operation, get_runtime().contract_for(
        "crm.lookup", operation.proposal.contract_fingerprint))
    audience = json.loads(operation.proposal.canonical)["destination"]["name"]

    keys = agent.keys()

    assert keys == jwks()
    assert [k["alg"] for k in keys["keys"]] == ["EdDSA"] * len(keys["keys"])
    claims = verify(token, keys, audience=audience, snapshot=operation.proposal.canonical)
    assert claims.sub == operation.id

    async def read() -> Any:
        async with AsyncClient(live_server.url, world.owner_token) as client:
            return await client.keys()

    assert asyncio.run(read()) == keys
