"""End to end over HTTP: an agent and a human with their bearer tokens, the `dispatch.client`,
a live server, the real SMTP sink and bank, and the handler run by the (eager) task queue."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from demo.destinations.runner import list_all
from dispatch.client import ApiClient, ApiError
from dispatch.services.principals import token_issue
from tests.api.conftest import draft_payload
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db(transaction=True)


class People:
    def __init__(self, url: str, world: World) -> None:
        self.agent = ApiClient(url, world.owner_token, timeout=60)
        self.operator = ApiClient(url, token_issue(principal=world.approver), timeout=60)
        self.admin = ApiClient(url, token_issue(principal=world.admin), timeout=60)


@pytest.fixture
def people(destinations: Destinations, live_server: Any, world: World, eager: None) -> People:
    # `destinations` first: the world's proposals bind the running destinations.
    return People(live_server.url, world)


def refused(call: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_email_is_proposed_approved_dispatched_and_sent_once(
    people: People, destinations: Destinations,
) -> None:
    agent, operator, admin = people.agent, people.operator, people.admin
    email = next(c for c in agent.contracts() if c["name"] == "email.send")
    draft = agent.resource_create("email_draft", draft_payload())
    proposal = agent.proposal_create("email.send", {"draft": {"id": draft["id"],
                                                              "revision": draft["revision"]}})
    assert proposal["contract_fingerprint"] == email["fingerprint"]
    assert proposal["digest"] == "sha256:" + hashlib.sha256(
        proposal["canonical"].encode()).hexdigest()
    approval = proposal["approval"]
    assert approval is not None
    assert approval["state"] == "pending"

    assert refused(agent.proposal_dispatch, proposal["id"]).code == "approval_pending"
    error = refused(agent.approval_decide, approval["id"], decision="grant",
                    digest=proposal["digest"])
    assert (error.status, error.code) == (403, "role_required")

    # The human reads what will run, then grants that exact digest with a personal token.
    shown = operator.proposal_get(proposal["id"])
    assert json.loads(shown["canonical"])["arguments"]["draft"]["payload"]["to"] == [
        "customer@example.com"]
    decision = operator.approval_decide(approval["id"], decision="grant",
                                        digest=shown["digest"], reason="recipient checked")
    assert decision["approval"] == {"id": approval["id"], "state": "granted"}
    assert decision["permit_id"]

    dispatched = agent.proposal_dispatch(proposal["id"])
    assert dispatched["state"] == "claimed"
    operation = agent.wait_for_operation(dispatched["operation_id"])
    assert operation["state"] == "completed"
    assert operation["result"] == {"message_id": f"{operation['id']}@console.invalid"}
    assert [a["outcome"] for a in operation["attempts"]] == ["completed"]

    messages = list_all(destinations.directory)["email"]
    assert [m["message_id"] for m in messages] == [f"{operation['id']}@console.invalid"]
    assert agent.resource_get(draft["id"])["state"] == "sent"
    assert refused(agent.proposal_dispatch, proposal["id"]).code == "permit_claimed"
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
    draft = agent.resource_create("email_draft", draft_payload(subject="Auto"))
    proposal = agent.proposal_create(
        "email.send", {"draft": {"id": draft["id"], "revision": 1}},
        dispatch_on_approval=True, execution_id="run-42", approval_expires_in=120)
    assert proposal["approval"] is not None
    operator.approval_decide(proposal["approval"]["id"], decision="grant",
                             digest=proposal["digest"])

    shown = agent.proposal_get(proposal["id"])
    assert shown["operation_id"] is not None
    operation = agent.wait_for_operation(shown["operation_id"])
    assert operation["state"] == "completed"
    assert len(list_all(destinations.directory)["email"]) == 1
    assert refused(agent.proposal_dispatch, proposal["id"]).code == "permit_claimed"


def test_a_proposal_sent_again_with_its_call_id_is_the_same_one(
    people: People, destinations: Destinations,
) -> None:
    agent = people.agent
    draft = agent.resource_create("email_draft", draft_payload())
    arguments = {"draft": {"id": draft["id"], "revision": draft["revision"]}}
    first = agent.proposal_create("email.send", arguments, call_id="call-1")
    assert agent.proposal_create("email.send", arguments, call_id="call-1") == first
    error = refused(agent.proposal_create, "crm.lookup", {"customer_id": "cus-001"},
                    call_id="call-1")
    assert (error.status, error.code) == (409, "proposal_mismatch")


def test_denied_email_never_runs(people: People, destinations: Destinations) -> None:
    agent = people.agent
    draft = agent.resource_create("email_draft", draft_payload())
    proposal = agent.proposal_create("email.send", {"draft": {"id": draft["id"],
                                                              "revision": 1}})
    assert proposal["approval"] is not None
    decision = people.operator.approval_decide(proposal["approval"]["id"], decision="deny",
                                               digest=proposal["digest"], reason="wrong tone")
    assert decision == {"approval": {"id": proposal["approval"]["id"], "state": "denied"},
                        "permit_id": None}
    assert refused(agent.proposal_dispatch, proposal["id"]).code == "approval_denied"
    assert agent.resource_get(draft["id"])["state"] == "denied"
    assert list_all(destinations.directory)["email"] == []


def test_payment_is_retried_with_the_same_key_and_booked_once(
    people: People, destinations: Destinations,
) -> None:
    agent = people.agent
    proposal = agent.proposal_create("payments.transfer", {
        "from_account": "acct-001", "to_account": "acct-999", "amount": "25",
        "currency": "EUR", "memo": "lose-response-once.test"})
    assert json.loads(proposal["canonical"])["arguments"]["amount"] == "25.00"
    assert proposal["approval"] is not None
    assert refused(agent.proposal_dispatch, proposal["id"]).status == 409  # pending

    people.operator.approval_decide(proposal["approval"]["id"], decision="grant",
                                    digest=proposal["digest"])
    dispatched = agent.proposal_dispatch(proposal["id"])
    operation = agent.wait_for_operation(dispatched["operation_id"])
    assert operation["state"] == "completed"
    assert [(a["number"], a["outcome"]) for a in operation["attempts"]] == [
        (1, "uncertain"), (2, "completed")]
    transfers = list_all(destinations.directory)["bank"]
    assert [(t["key"], t["amount"], t["currency"]) for t in transfers] == [
        (operation["id"], "25.00", "EUR")]


def test_payment_outside_the_grant_is_refused_before_any_human_is_asked(
    people: People, destinations: Destinations,
) -> None:
    error = refused(people.agent.proposal_create, "payments.transfer", {
        "from_account": "acct-002", "to_account": "acct-999", "amount": "25",
        "currency": "EUR"})
    assert (error.status, error.code, error.details) == (
        403, "scope_violation", {"key": "account", "value": "acct-002"})
    assert list_all(destinations.directory)["bank"] == []


def test_unknown_email_is_resolved_by_an_admin(
    people: People, destinations: Destinations,
) -> None:
    agent = people.agent
    draft = agent.resource_create("email_draft", draft_payload(to=["x@lose-response.test"]))
    proposal = agent.proposal_create("email.send", {"draft": {"id": draft["id"],
                                                              "revision": 1}})
    assert proposal["approval"] is not None
    people.operator.approval_decide(proposal["approval"]["id"], decision="grant",
                                    digest=proposal["digest"])
    operation = agent.wait_for_operation(agent.proposal_dispatch(proposal["id"])["operation_id"])
    assert operation["state"] == "unknown"
    assert len(operation["attempts"]) == 1  # never retried blindly

    error = refused(people.operator.operation_resolve, operation["id"], outcome="completed",
                    evidence="seen")
    assert error.code == "role_required"
    resolved = people.admin.operation_resolve(operation["id"], outcome="completed",
                                              evidence="the sink holds the message")
    assert resolved["state"] == "reconciled_completed"
    assert agent.resource_get(draft["id"])["state"] == "sent"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_an_agent_cancels_with_the_client(people: People, destinations: Destinations) -> None:
    agent = people.agent
    draft = agent.resource_create("email_draft", draft_payload())
    proposal = agent.proposal_create("email.send", {"draft": {"id": draft["id"],
                                                              "revision": 1}})
    cancelled = agent.cancel_proposal(proposal["id"], reason="not needed any more")
    assert cancelled["approval"] is not None
    assert cancelled["approval"]["state"] == "revoked"
    error = refused(agent.cancel_proposal, proposal["id"])
    assert (error.status, error.code) == (409, "protocol_state_invalid")

    lookup = agent.proposal_create("crm.lookup", {"customer_id": "cus-001"})
    operation = agent.wait_for_operation(agent.proposal_dispatch(lookup["id"])["operation_id"])
    assert operation["state"] == "completed"
    error = refused(people.operator.cancel_operation, operation["id"], reason="too late")
    assert (error.status, error.code, error.details) == (
        409, "protocol_state_invalid", {"state": "completed"})
    assert list_all(destinations.directory)["email"] == []
