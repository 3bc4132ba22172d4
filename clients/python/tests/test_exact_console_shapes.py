"""The client's answers are typed: each method of `Client` and `AsyncClient` is annotated with
the `TypedDict` of its answer's shape (docs/rest-api.md), and answers stay plain dicts."""

from __future__ import annotations

import asyncio
import typing
from typing import Any

import httpx
import pytest

from exact_console import AsyncClient, Client, shapes

ANSWERS = {
    "contracts": shapes.ContractsPage,
    "propose": shapes.Proposal,
    "proposal": shapes.Proposal,
    "dispatch": shapes.Dispatched,
    "operation": shapes.Operation,
    "cancel_proposal": shapes.Proposal,
    "cancel_operation": shapes.Operation,
    "create_resource": shapes.Resource,
    "resource": shapes.Resource,
    "revise": shapes.Resource,
    "decide": shapes.Decision,
    "resolve": shapes.Operation,
    "audit": shapes.AuditPage,
    "wait_for_decision": shapes.Proposal,
    "wait_for_outcome": shapes.Operation,
    "webhooks": shapes.WebhooksPage,
    "create_webhook": shapes.WebhookCreated,
    "delete_webhook": shapes.Webhook,
    "keys": shapes.Jwks,
}


@pytest.mark.parametrize("client", [Client, AsyncClient])
@pytest.mark.parametrize(("method", "shape"), sorted(ANSWERS.items()))
def test_each_answer_is_annotated_with_its_shape(client: type, method: str,
                                                 shape: type) -> None:
    hints = typing.get_type_hints(getattr(client, method))
    assert hints["return"] is shape


def test_the_shapes_are_the_documented_keys() -> None:
    assert set(shapes.Proposal.__annotations__) == {
        "id", "operation", "digest", "canonical", "contract_fingerprint", "execution_id",
        "approval", "operation_id", "operation_state"}
    assert set(shapes.ApprovalRef.__annotations__) == {"id", "state", "role", "expires_at",
                                                       "permit_id", "quorum", "votes", "url"}
    assert set(shapes.Operation.__annotations__) == {"id", "proposal_id", "state", "attempts",
                                                     "result"}
    assert set(shapes.Attempt.__annotations__) == {"number", "started_at", "ended_at",
                                                   "outcome", "error"}
    assert set(shapes.Contract.__annotations__) == {"name", "version", "fingerprint",
                                                    "input_schema", "effects", "approval",
                                                    "idempotency"}
    assert set(shapes.Resource.__annotations__) == {"id", "kind", "revision", "digest",
                                                    "state", "payload"}


def test_answers_are_still_plain_dicts() -> None:
    body = {"id": "prp_1", "approval": None, "operation_id": None, "extra": 1}

    def console(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    with Client("http://console.test", "t", transport=httpx.MockTransport(console)) as sync:
        answer: Any = sync.proposal("prp_1")

    async def main() -> Any:
        async with AsyncClient("http://console.test", "t",
                               transport=httpx.MockTransport(console)) as client:
            return await client.proposal("prp_1")

    for got in (answer, asyncio.run(main())):
        assert type(got) is dict
        assert got == body  # keys the shape does not name are kept
