"""Each request's log line carries the ids of the action it concerns (docs/design.md#running:
`request_id`, `tenant`, `principal`, `proposal_id`, `operation_id` where they apply): a
proposal made, read, decided, dispatched or cancelled names its proposal; an operation read
names its operation and its proposal."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from django.test import Client

from dispatch.services.principals import token_issue
from exact_console import Client as ConsoleClient
from tests.conftest import World

pytestmark = pytest.mark.django_db

TRANSFER = {"operation": "payments.transfer", "arguments": {
    "from_account": "acct-001", "to_account": "acct-999", "amount": "10.00", "currency": "EUR"}}


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The request lines so far, as the JSON renderer gets them, and forget them."""
    found = [record.msg for record in caplog.records if record.name == "console.request"]
    caplog.clear()
    assert all(isinstance(line, dict) for line in found)
    return found  # type: ignore[return-value]  # structlog hands the renderer its event dict


def test_request_lines_name_the_proposal_and_the_operation(
    world: World, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="console.request")
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {world.owner_token}")
    operator = Client(HTTP_AUTHORIZATION=f"Bearer {token_issue(principal=world.approver)}")

    proposal = agent.post("/api/v1/proposals/", TRANSFER, content_type="application/json").json()
    (made,) = lines(caplog)
    assert made["proposal_id"] == proposal["id"]
    assert "operation_id" not in made

    agent.get(f"/api/v1/proposals/{proposal['id']}/")
    (read,) = lines(caplog)
    assert read["proposal_id"] == proposal["id"]

    decision = operator.post(f"/api/v1/approvals/{proposal['approval']['id']}/decision/",
                             {"decision": "grant", "digest": proposal["digest"]},
                             content_type="application/json")
    assert decision.status_code == 200, decision.content
    (decided,) = lines(caplog)
    assert decided["proposal_id"] == proposal["id"]
    assert decided["principal"] == world.approver.id

    dispatched = agent.post(f"/api/v1/proposals/{proposal['id']}/dispatch/",
                            {"permit": decision.json()["permit_id"]},
                            content_type="application/json")
    assert dispatched.status_code == 202, dispatched.content
    operation_id = dispatched.json()["operation_id"]
    (claimed,) = lines(caplog)
    assert (claimed["proposal_id"], claimed["operation_id"]) == (proposal["id"], operation_id)

    agent.get(f"/api/v1/operations/{operation_id}/")
    (looked,) = lines(caplog)
    assert (looked["proposal_id"], looked["operation_id"]) == (proposal["id"], operation_id)

    # An id that names nothing visible names nothing in the log either.
    agent.get("/api/v1/operations/op_forged/")
    (forged,) = lines(caplog)
    assert "operation_id" not in forged
    assert "proposal_id" not in forged


class Recording(httpx.HTTPTransport):
    """The network, keeping each request's `X-Request-ID` and the answer's."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanged: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.exchanged.append((request.headers["X-Request-ID"],
                               response.headers["X-Request-ID"]))
        return response


@pytest.mark.django_db(transaction=True)
def test_the_clients_request_id_is_echoed_and_on_the_request_line(
    world: World, live_server: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="console.request")
    network = Recording()
    with ConsoleClient(live_server.url, world.owner_token, transport=network) as agent:
        proposal = agent.propose(TRANSFER["operation"], TRANSFER["arguments"])
        agent.proposal(proposal["id"])
    (made, made_echo), (read, read_echo) = network.exchanged
    assert (made_echo, read_echo) == (made, read)
    assert made != read  # a fresh id per call
    logged = {line["request_id"]: line for line in lines(caplog)}
    assert logged[made]["proposal_id"] == logged[read]["proposal_id"] == proposal["id"]
