"""Idempotent intake over REST (docs/rest-api.md#proposal, `call_id`): 201 for the first proposal of
a call, 200 with that same proposal for a repeat, 409 `proposal_mismatch` for another action."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from demo.destinations.runner import list_all
from dispatch.models import Operation, Proposal
from dispatch.services.authority import grant_issue
from dispatch.services.principals import agent_create
from tests.api.conftest import Caller, assert_error, draft_payload, schema_errors
from tests.conftest import ALL_TOOLS, World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def transfer_body(**extra: Any) -> dict[str, Any]:
    return {"operation": "payments.transfer", "arguments": {
        "from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
        "currency": "EUR"}, **extra}


@pytest.mark.parametrize("scope", [{"execution_id": "exe-1"}, {}])
def test_a_repeated_call_id_answers_200_with_the_first_proposal(
    owner: Caller, scope: dict[str, str],
) -> None:
    first = owner.post("proposals/", transfer_body(call_id="call-1", **scope))
    assert first.status_code == 201, first.content

    again = owner.post("proposals/", transfer_body(call_id="call-1", **scope))

    assert again.status_code == 200, again.content
    assert again.json() == first.json()
    assert Proposal.objects.count() == 1


def test_a_call_id_without_an_execution_id_is_the_principals(owner: Caller) -> None:
    first = owner.post("proposals/", transfer_body(call_id="call-1")).json()
    # Naming the execution id the first proposal was given is another scope: a new call.
    named = owner.post("proposals/", transfer_body(call_id="call-1",
                                                   execution_id=first["execution_id"]))
    assert named.status_code == 201
    assert named.json()["id"] != first["id"]
    again = owner.post("proposals/", transfer_body(call_id="call-1"))
    assert (again.status_code, again.json()["id"]) == (200, first["id"])


def test_the_same_call_id_of_another_principal_is_its_own(owner: Caller, world: World) -> None:
    other, token = agent_create(name="other", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=other, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=world.now)
    first = owner.post("proposals/", transfer_body(call_id="call-1")).json()

    theirs = Caller(Client(), token).post("proposals/", transfer_body(call_id="call-1"))

    assert theirs.status_code == 201, theirs.content
    assert theirs.json()["id"] != first["id"]


@pytest.mark.parametrize("scope", [{"execution_id": "exe-1"}, {}])
def test_another_action_under_a_call_id_is_a_mismatch(
    owner: Caller, scope: dict[str, str],
) -> None:
    first = owner.post("proposals/", transfer_body(call_id="call-1", **scope)).json()
    other = transfer_body(call_id="call-1", **scope)
    other["arguments"]["amount"] = "11.00"

    assert_error(owner.post("proposals/", other), 409, "proposal_mismatch")
    assert_error(owner.post("proposals/", {"operation": "crm.lookup", "call_id": "call-1",
                                           "arguments": {"customer_id": "cus-001"}, **scope}),
                 409, "proposal_mismatch")
    assert list(Proposal.objects.values_list("id", flat=True)) == [first["id"]]


def test_defaults_given_or_left_out_are_the_same_arguments(owner: Caller) -> None:
    first = owner.post("proposals/", transfer_body(call_id="call-1")).json()
    explicit = transfer_body(call_id="call-1")
    explicit["arguments"].update(memo="", amount="10")
    again = owner.post("proposals/", explicit)
    assert (again.status_code, again.json()["id"]) == (200, first["id"])


@pytest.mark.parametrize("call_id", ["", "x" * 201, "caf\u00e9", "tab\tbed", "line\n", 7, None])
def test_a_call_id_must_be_1_to_200_printable_ascii(owner: Caller, call_id: Any) -> None:
    errors = schema_errors(owner.post("proposals/", transfer_body(call_id=call_id)))
    assert [e["pointer"] for e in errors] == ["/call_id"]
    assert not Proposal.objects.exists()


def test_a_call_id_of_200_characters_is_kept(owner: Caller) -> None:
    call_id = "~ " + "x" * 198
    first = owner.post("proposals/", transfer_body(call_id=call_id))
    assert first.status_code == 201, first.content
    again = owner.post("proposals/", transfer_body(call_id=call_id))
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])


def test_a_retry_after_a_lost_response_makes_one_proposal_and_one_effect(
    destinations: Destinations, owner: Caller, caller: Any,
    django_capture_on_commit_callbacks: Any, eager: None,
) -> None:
    draft = owner.post("resources/", {"kind": "email_draft", "payload": draft_payload()}).json()
    body = {"operation": "email.send", "call_id": "call-7", "execution_id": "run-1",
            "arguments": {"draft": {"id": draft["id"], "revision": draft["revision"]}}}
    owner.post("proposals/", body)  # its response is lost on the way back

    retried = owner.post("proposals/", body)
    assert retried.status_code == 200, retried.content
    proposal = retried.json()
    assert list(Proposal.objects.values_list("id", flat=True)) == [proposal["id"]]

    decided = caller("approver").post(f"approvals/{proposal['approval']['id']}/decision/",
                                      {"decision": "grant", "digest": proposal["digest"]})
    assert decided.status_code == 200, decided.content
    with django_capture_on_commit_callbacks(execute=True):
        dispatched = owner.post(f"proposals/{proposal['id']}/dispatch/", {})
    assert dispatched.status_code == 202, dispatched.content
    assert owner.get(f"operations/{dispatched.json()['operation_id']}/").json()["state"] == (
        "completed")

    # Retried once more after the effect: still the one proposal, nothing sent again.
    late = owner.post("proposals/", body)
    assert (late.status_code, late.json()["id"]) == (200, proposal["id"])
    assert late.json()["operation_state"] == "completed"
    assert Operation.objects.count() == 1
    assert len(list_all(destinations.directory)["email"]) == 1
