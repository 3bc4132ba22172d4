"""End to end over HTTP: an agent and a human with their bearer tokens, the Python client
(`exact_console`, clients/python), a live server, the real SMTP sink and bank, and the handler
run by the (eager) task queue."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

import exact_console
from demo.destinations.runner import list_all
from dispatch.services.principals import token_issue
from exact_console import Client, Denied
from tests.api.conftest import draft_payload
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db(transaction=True)


#: How long a test waits for an operation to settle (the handler runs eagerly, in the request).
SETTLE = 30


class People:
    def __init__(self, url: str, world: World) -> None:
        self.agent = Client(url, world.owner_token, timeout=60)
        self.operator = Client(url, token_issue(principal=world.approver), timeout=60)
        self.admin = Client(url, token_issue(principal=world.admin), timeout=60)

    def close(self) -> None:
        for client in (self.agent, self.operator, self.admin):
            client.close()


@pytest.fixture
def people(destinations: Destinations, live_server: Any, world: World,
           eager: None) -> Iterator[People]:
    # `destinations` first: the world's proposals bind the running destinations.
    people = People(live_server.url, world)
    yield people
    people.close()


def refused(call: Any, *args: Any, **kwargs: Any) -> Denied:
    with pytest.raises(Denied) as caught:
        call(*args, **kwargs)
    return caught.value


def test_email_is_proposed_approved_dispatched_and_sent_once(
    people: People, destinations: Destinations,
) -> None:
    agent, operator, admin = people.agent, people.operator, people.admin
    email = next(c for c in agent.contracts()["results"] if c["name"] == "email.send")
    [tool] = exact_console.tools(agent, ["email.send"])
    assert (tool.input_schema, tool.needs_approval) == (email["input_schema"], True)
    draft = agent.create_resource("email_draft", draft_payload())
    proposal = agent.propose("email.send", {"draft": {"id": draft["id"],
                                                      "revision": draft["revision"]}})
    assert proposal["contract_fingerprint"] == email["fingerprint"]
    assert proposal["digest"] == "sha256:" + hashlib.sha256(
        proposal["canonical"].encode()).hexdigest()
    approval = proposal["approval"]
    assert approval is not None
    assert approval["state"] == "pending"

    assert refused(agent.dispatch, proposal["id"]).code == "approval_pending"
    error = refused(agent.decide, approval["id"], decision="grant",
                    digest=proposal["digest"])
    assert (error.status, error.code) == (403, "role_required")

    # The human reads what will run, then grants that exact digest with a personal token.
    shown = operator.proposal(proposal["id"])
    assert json.loads(shown["canonical"])["arguments"]["draft"]["payload"]["to"] == [
        "customer@example.com"]
    decision = operator.decide(approval["id"], decision="grant", digest=shown["digest"],
                               reason="recipient checked")
    assert {k: decision["approval"][k] for k in ("id", "state", "quorum")} == {
        "id": approval["id"], "state": "granted", "quorum": 1}
    assert decision["permit_id"]

    dispatched = agent.dispatch(proposal["id"])
    assert dispatched["state"] == "claimed"
    operation = agent.wait_for_outcome(dispatched["operation_id"], timeout=SETTLE)
    assert operation["state"] == "completed"
    assert operation["result"] == {"message_id": f"{operation['id']}@console.invalid"}
    assert [a["outcome"] for a in operation["attempts"]] == ["completed"]

    messages = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in messages] == [f"{operation['id']}@console.invalid"]
    assert agent.resource(draft["id"])["state"] == "sent"
    assert refused(agent.dispatch, proposal["id"]).code == "permit_claimed"
    assert len(list_all(destinations.directory)["email"]) == 1

    events = admin.audit(proposal=proposal["id"])["results"]
    assert [e["kind"] for e in reversed(events)] == [
        "proposal.created", "approval.requested", "dispatch.denied", "approval.granted",
        "permit.claimed", "attempt.started", "operation.completed", "dispatch.denied"]
    denied = [e["details"]["code"] for e in reversed(events) if e["kind"] == "dispatch.denied"]
    assert denied == ["approval_pending", "permit_claimed"]
    assert refused(agent.audit).code == "role_required"


def test_dispatch_on_approval_sends_when_the_human_grants(
    people: People, destinations: Destinations,
) -> None:
    agent, operator = people.agent, people.operator
    draft = agent.create_resource("email_draft", draft_payload(subject="Auto"))
    proposal = agent.propose(
        "email.send", {"draft": {"id": draft["id"], "revision": 1}},
        dispatch_on_approval=True, execution_id="run-42", approval_expires_in=120)
    assert proposal["approval"] is not None
    operator.decide(proposal["approval"]["id"], decision="grant", digest=proposal["digest"])

    shown = agent.wait_for_decision(proposal["id"], timeout=SETTLE)
    assert shown["approval"] is not None
    assert shown["approval"]["state"] == "granted"
    assert shown["operation_id"] is not None
    operation = agent.wait_for_outcome(shown["operation_id"], timeout=SETTLE)
    assert operation["state"] == "completed"
    assert len(list_all(destinations.directory)["email"]) == 1
    assert refused(agent.dispatch, proposal["id"]).code == "permit_claimed"


def test_a_proposal_sent_again_with_its_call_id_is_the_same_one(
    people: People, destinations: Destinations,
) -> None:
    agent = people.agent
    draft = agent.create_resource("email_draft", draft_payload())
    arguments = {"draft": {"id": draft["id"], "revision": draft["revision"]}}
    first = agent.propose("email.send", arguments, call_id="call-1")
    assert agent.propose("email.send", arguments, call_id="call-1") == first
    error = refused(agent.propose, "crm.lookup", {"customer_id": "cus-001"},
                    call_id="call-1")
    assert (error.status, error.code) == (409, "proposal_mismatch")


def test_denied_email_never_runs(people: People, destinations: Destinations) -> None:
    agent = people.agent
    draft = agent.create_resource("email_draft", draft_payload())
    proposal = agent.propose("email.send", {"draft": {"id": draft["id"], "revision": 1}})
    assert proposal["approval"] is not None
    decision = people.operator.decide(proposal["approval"]["id"], decision="deny",
                                      digest=proposal["digest"], reason="wrong tone")
    assert decision == {"approval": {"id": proposal["approval"]["id"], "state": "denied",
                                     "quorum": 1, "votes": []}, "permit_id": None}
    assert refused(agent.dispatch, proposal["id"]).code == "approval_denied"
    assert agent.resource(draft["id"])["state"] == "denied"
    assert list_all(destinations.directory)["email"] == []


def test_payment_is_retried_with_the_same_key_and_booked_once(
    people: People, destinations: Destinations,
) -> None:
    agent = people.agent
    proposal = agent.propose("payments.transfer", {
        "from_account": "acct-001", "to_account": "acct-999", "amount": "25",
        "currency": "EUR", "memo": "lose-response-once.test"})
    assert json.loads(proposal["canonical"])["arguments"]["amount"] == "25.00"
    assert proposal["approval"] is not None
    assert refused(agent.dispatch, proposal["id"]).status == 409  # pending

    people.operator.decide(proposal["approval"]["id"], decision="grant",
                           digest=proposal["digest"])
    dispatched = agent.dispatch(proposal["id"])
    operation = agent.wait_for_outcome(dispatched["operation_id"], timeout=SETTLE)
    assert operation["state"] == "completed"
    assert [(a["number"], a["outcome"]) for a in operation["attempts"]] == [
        (1, "uncertain"), (2, "completed")]
    transfers = list_all(destinations.directory)["bank"]
    assert [(t["key"], t["amount"], t["currency"]) for t in transfers] == [
        (operation["id"], "25.00", "EUR")]


def test_payment_outside_the_grant_is_refused_before_any_human_is_asked(
    people: People, destinations: Destinations,
) -> None:
    error = refused(people.agent.propose, "payments.transfer", {
        "from_account": "acct-002", "to_account": "acct-999", "amount": "25",
        "currency": "EUR"})
    assert (error.status, error.code, error.details) == (
        403, "scope_violation", {"key": "account", "value": "acct-002"})
    assert list_all(destinations.directory)["bank"] == []


def test_unknown_email_is_resolved_by_an_admin(
    people: People, destinations: Destinations,
) -> None:
    agent = people.agent
    draft = agent.create_resource("email_draft", draft_payload(to=["x@lose-response.test"]))
    proposal = agent.propose("email.send", {"draft": {"id": draft["id"], "revision": 1}})
    assert proposal["approval"] is not None
    people.operator.decide(proposal["approval"]["id"], decision="grant",
                           digest=proposal["digest"])
    operation = agent.wait_for_outcome(agent.dispatch(proposal["id"])["operation_id"],
                                       timeout=SETTLE)
    assert operation["state"] == "unknown"
    assert len(operation["attempts"]) == 1  # never retried blindly

    error = refused(people.operator.resolve, operation["id"], outcome="completed",
                    evidence="seen")
    assert error.code == "role_required"
    resolved = people.admin.resolve(operation["id"], outcome="completed",
                                    evidence="the sink holds the message")
    assert resolved["state"] == "reconciled_completed"
    assert agent.resource(draft["id"])["state"] == "sent"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_an_agent_cancels_with_the_client(people: People, destinations: Destinations) -> None:
    agent = people.agent
    draft = agent.create_resource("email_draft", draft_payload())
    proposal = agent.propose("email.send", {"draft": {"id": draft["id"], "revision": 1}})
    cancelled = agent.cancel_proposal(proposal["id"], reason="not needed any more")
    assert cancelled["approval"] is not None
    assert cancelled["approval"]["state"] == "revoked"
    error = refused(agent.cancel_proposal, proposal["id"])
    assert (error.status, error.code) == (409, "protocol_state_invalid")

    lookup = agent.propose("crm.lookup", {"customer_id": "cus-001"})
    operation = agent.wait_for_outcome(agent.dispatch(lookup["id"])["operation_id"],
                                       timeout=SETTLE)
    assert operation["state"] == "completed"
    error = refused(people.operator.cancel_operation, operation["id"], reason="too late")
    assert (error.status, error.code, error.details) == (
        409, "protocol_state_invalid", {"state": "completed"})
    assert list_all(destinations.directory)["email"] == []
