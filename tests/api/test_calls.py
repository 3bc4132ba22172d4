"""Each call of docs/rest-api.md#calls in-process: its answer's exact shape, its roles and its
refusals."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client

from dispatch.models import Operation
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.runs import proposal_run_approved
from dispatch.services.worker import operation_execute
from tests.api.conftest import API, Caller, assert_error, draft_payload, schema_errors
from tests.conftest import MAILBOX, World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

RESOURCE_KEYS = {"id", "kind", "revision", "digest", "state", "payload"}
PROPOSAL_KEYS = {"id", "operation", "digest", "canonical", "contract_fingerprint",
                 "execution_id", "approval", "operation_id", "operation_state"}
APPROVAL_KEYS = {"id", "state", "role", "expires_at", "permit_id", "quorum", "votes", "url"}
OPERATION_KEYS = {"id", "proposal_id", "state", "attempts", "result"}
ATTEMPT_KEYS = {"number", "started_at", "ended_at", "outcome", "error"}
AUDIT_KEYS = {"id", "at", "kind", "actor", "operation_id", "proposal_id", "digest", "details"}


def create_draft(owner: Caller, **overrides: Any) -> dict[str, Any]:
    response = owner.post("resources/", {"kind": "email_draft",
                                         "payload": draft_payload(**overrides)})
    assert response.status_code == 201, response.content
    return dict(response.json())


def propose_email(owner: Caller, draft: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = owner.post("proposals/", {"operation": "email.send", "arguments": {
        "draft": {"id": draft["id"], "revision": draft["revision"]}}, **extra})
    assert response.status_code == 201, response.content
    return dict(response.json())


def test_contracts_list_the_registry(owner: Caller) -> None:
    response = owner.get("contracts/")
    assert response.status_code == 200
    results = response.json()["results"]
    assert [c["name"] for c in results] == [
        "crm.lookup", "email.send", "evidence.attest", "payments.transfer", "report.publish",
        "research.fetch"]
    for contract in results:
        assert set(contract) == {"name", "version", "fingerprint", "input_schema", "effects",
                                 "approval", "idempotency"}
    named = {c["name"]: c for c in results}
    email = named["email.send"]
    assert email["approval"] == {"role": "operator", "expires_in": 3600}
    assert email["effects"] == ["external_write"]
    assert email["idempotency"] == "none"
    assert named["crm.lookup"]["approval"] is None
    assert named["payments.transfer"]["effects"] == ["external_write", "financial_write"]
    assert named["report.publish"]["approval"] == {"role": "operator", "expires_in": 3600}
    assert named["report.publish"]["idempotency"] == "receiver_dedup"
    assert named["research.fetch"]["effects"] == named["evidence.attest"]["effects"] == ["read"]


def test_resource_create_read_and_revise(owner: Caller) -> None:
    draft = create_draft(owner)
    assert set(draft) == RESOURCE_KEYS
    assert draft["revision"] == 1
    assert draft["state"] == "draft"
    assert draft["payload"]["cc"] == []  # defaults materialized
    assert owner.get(f"resources/{draft['id']}/").json() == draft

    revised = owner.post(f"resources/{draft['id']}/revisions/",
                         {"base_revision": 1, "payload": draft_payload(subject="Edited")})
    assert revised.status_code == 201
    body = revised.json()
    assert (body["id"], body["revision"], body["payload"]["subject"]) == (draft["id"], 2,
                                                                          "Edited")
    assert body["digest"] != draft["digest"]
    assert owner.get(f"resources/{draft['id']}/").json() == body

    stale = owner.post(f"resources/{draft['id']}/revisions/",
                       {"base_revision": 1, "payload": draft_payload()})
    assert assert_error(stale, 409, "stale_revision") == {"current_revision": 2,
                                                         "resource_id": draft["id"]}


def test_proposal_shape_and_digest(owner: Caller) -> None:
    draft = create_draft(owner)
    proposal = propose_email(owner, draft, execution_id="run-1", approval_expires_in=60)
    assert set(proposal) == PROPOSAL_KEYS
    assert proposal["operation"] == "email.send"
    assert proposal["execution_id"] == "run-1"
    digest = "sha256:" + hashlib.sha256(proposal["canonical"].encode()).hexdigest()
    assert proposal["digest"] == digest
    contracts = {c["name"]: c for c in owner.get("contracts/").json()["results"]}
    assert proposal["contract_fingerprint"] == contracts["email.send"]["fingerprint"]
    snapshot = json.loads(proposal["canonical"])
    assert snapshot["arguments"]["draft"]["payload"]["to"] == ["customer@example.com"]
    assert "run-1" not in proposal["canonical"]
    approval = proposal["approval"]
    assert set(approval) == APPROVAL_KEYS
    assert (approval["state"], approval["role"], approval["permit_id"]) == ("pending",
                                                                           "operator", None)
    assert approval["url"] is None  # CONSOLE_PUBLIC_URL unset: the client builds the link
    assert proposal["operation_id"] is None
    assert proposal["operation_state"] is None
    assert owner.get(f"proposals/{proposal['id']}/").json() == proposal
    # The draft is now proposed: it cannot be proposed twice.
    assert owner.get(f"resources/{draft['id']}/").json()["state"] == "proposed"


def test_payment_amount_is_canonical(owner: Caller) -> None:
    digests = set()
    for amount in ("10", "10.0", "10.00"):
        response = owner.post("proposals/", {"operation": "payments.transfer", "arguments": {
            "from_account": "acct-001", "to_account": "acct-999", "amount": amount,
            "currency": "EUR"}})
        assert response.status_code == 201, response.content
        proposal = response.json()
        assert json.loads(proposal["canonical"])["arguments"]["amount"] == "10.00"
        digests.add(proposal["digest"])
    assert len(digests) == 1


@pytest.mark.parametrize(("arguments", "code", "status"), [
    ({"from_account": "acct-002", "to_account": "acct-999", "amount": "1", "currency": "EUR"},
     "scope_violation", 403),
])
def test_proposal_refusals(owner: Caller, arguments: Any, code: str, status: int) -> None:
    response = owner.post("proposals/", {"operation": "payments.transfer",
                                         "arguments": arguments})
    assert_error(response, status, code)


def test_tool_not_in_the_tool_set_is_refused(caller: Any) -> None:
    # A human has no tool set: it may not propose.
    response = caller("approver").post("proposals/", {"operation": "crm.lookup",
                                                      "arguments": {"customer_id": "c"}})
    assert_error(response, 403, "tool_not_permitted")


def test_agents_never_decide(owner: Caller) -> None:
    proposal = propose_email(owner, create_draft(owner))
    response = owner.post(f"approvals/{proposal['approval']['id']}/decision/",
                          {"decision": "grant", "digest": proposal["digest"]})
    assert assert_error(response, 403, "role_required") == {"role": "operator"}


def test_operator_grants_once_with_the_digest_shown(owner: Caller, caller: Any) -> None:
    approver = caller("approver")
    proposal = propose_email(owner, create_draft(owner))
    decide = f"approvals/{proposal['approval']['id']}/decision/"

    wrong = approver.post(decide, {"decision": "grant", "digest": "sha256:" + "0" * 64})
    assert_error(wrong, 409, "proposal_mismatch")
    assert_error(owner.post(f"proposals/{proposal['id']}/dispatch/"), 409, "approval_pending")

    granted = approver.post(decide, {"decision": "grant", "digest": proposal["digest"],
                                     "reason": "checked the recipient"})
    assert granted.status_code == 200, granted.content
    body = granted.json()
    assert set(body) == {"approval", "permit_id"}
    votes = body["approval"].pop("votes")
    assert body["approval"] == {"id": proposal["approval"]["id"], "state": "granted",
                                "quorum": 1}
    assert [vote["by"] for vote in votes] == ["approver"] and set(votes[0]) == {"by", "at"}
    assert body["permit_id"].startswith("prm_")

    again = approver.post(decide, {"decision": "deny", "digest": proposal["digest"]})
    assert_error(again, 409, "approval_decided")
    shown = owner.get(f"proposals/{proposal['id']}/").json()
    assert shown["approval"]["state"] == "granted"
    assert shown["approval"]["permit_id"] == body["permit_id"]


def test_denied_proposal_cannot_dispatch(owner: Caller, caller: Any) -> None:
    proposal = propose_email(owner, create_draft(owner))
    response = caller("admin").post(f"approvals/{proposal['approval']['id']}/decision/",
                                    {"decision": "deny", "digest": proposal["digest"]})
    assert response.json() == {"approval": {"id": proposal["approval"]["id"],
                                            "state": "denied", "quorum": 1, "votes": []},
                               "permit_id": None}
    assert_error(owner.post(f"proposals/{proposal['id']}/dispatch/"), 403, "approval_denied")


def test_decision_shape_errors(owner: Caller, caller: Any) -> None:
    proposal = propose_email(owner, create_draft(owner))
    response = caller("approver").post(f"approvals/{proposal['approval']['id']}/decision/",
                                       {"decision": "maybe", "digest": 1})
    assert [e["pointer"] for e in schema_errors(response)] == ["/decision", "/digest"]


def test_session_decision_needs_csrf(owner: Caller, world: World) -> None:
    proposal = propose_email(owner, create_draft(owner))
    path = API + f"approvals/{proposal['approval']['id']}/decision/"
    body = json.dumps({"decision": "grant", "digest": proposal["digest"]})
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.approver.user)

    assert client.get(API + f"proposals/{proposal['id']}/").status_code == 200
    refused = client.post(path, body, content_type="application/json")
    assert_error(refused, 401, "unauthenticated")

    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    granted = client.post(path, body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert granted.status_code == 200, granted.content
    assert granted.json()["approval"]["state"] == "granted"


def test_session_without_a_principal_is_401(db: None) -> None:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="plain", password="pw")
    client = Client()
    client.force_login(user)
    assert_error(client.get(API + "contracts/"), 401, "unauthenticated")


def test_dispatch_then_read_the_operation(
    owner: Caller, caller: Any, django_capture_on_commit_callbacks: Any, eager: None,
) -> None:
    proposal = owner.post("proposals/", {"operation": "crm.lookup",
                                         "arguments": {"customer_id": "cus-002"}}).json()
    assert proposal["approval"] is None
    with django_capture_on_commit_callbacks(execute=True):
        response = owner.post(f"proposals/{proposal['id']}/dispatch/", {})
    assert response.status_code == 202, response.content
    dispatched = response.json()
    assert set(dispatched) == {"operation_id", "state"}
    assert dispatched["state"] == "claimed"

    operation = owner.get(f"operations/{dispatched['operation_id']}/").json()
    assert set(operation) == OPERATION_KEYS
    assert operation["proposal_id"] == proposal["id"]
    assert operation["state"] == "completed"
    assert operation["result"] == {"customer_id": "cus-002", "name": "Grace Hopper",
                                   "tier": "silver"}
    [attempt] = operation["attempts"]
    assert set(attempt) == ATTEMPT_KEYS
    assert (attempt["number"], attempt["outcome"], attempt["error"]) == (1, "completed", None)

    shown = owner.get(f"proposals/{proposal['id']}/").json()
    assert (shown["operation_id"], shown["operation_state"]) == (operation["id"], "completed")
    again = owner.post(f"proposals/{proposal['id']}/dispatch/", {})
    assert_error(again, 409, "permit_claimed")


def test_dispatch_with_another_proposals_permit_is_a_mismatch(
    owner: Caller, world: World,
) -> None:
    first, first_permit = world.approved_email()
    second, _ = world.approved_email(subject="Another")
    response = owner.post(f"proposals/{second.id}/dispatch/", {"permit": first_permit.id})
    assert_error(response, 409, "proposal_mismatch")
    response = owner.post(f"proposals/{second.id}/dispatch/", {"permit": "prm_forged"})
    assert_error(response, 404, "not_found")
    assert first.id != second.id


def test_dispatch_on_approval_is_claimed_by_the_worker(
    owner: Caller, caller: Any, world: World, django_capture_on_commit_callbacks: Any,
) -> None:
    proposal = owner.post("proposals/", {
        "operation": "payments.transfer", "dispatch_on_approval": True,
        "arguments": {"from_account": "acct-001", "to_account": "acct-999",
                      "amount": "5", "currency": "EUR"}}).json()
    # The grant commits the decision and the permit, and hands the claim to a worker.
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = caller("approver").post(
            f"approvals/{proposal['approval']['id']}/decision/",
            {"decision": "grant", "digest": proposal["digest"]})
    assert response.status_code == 200, response.content
    assert response.json()["approval"]["state"] == "granted"
    assert len(callbacks) == 1  # the worker's claim-and-run task
    shown = owner.get(f"proposals/{proposal['id']}/").json()
    assert (shown["operation_id"], shown["operation_state"]) == (None, None)
    # The worker: claim with attempt 1 in one transaction, run, record.
    ran = proposal_run_approved(proposal_id=proposal["id"], principal_id=world.owner.id)
    assert ran is not None
    shown = owner.get(f"proposals/{proposal['id']}/").json()
    assert shown["operation_id"] == ran.id == Operation.objects.get(proposal_id=proposal["id"]).id
    assert shown["operation_state"] == ran.state != "claimed"
    answer = owner.post(f"proposals/{proposal['id']}/dispatch/").json()["error"]["code"]
    assert answer == ("unsafe_retry" if ran.state == "unknown" else "permit_claimed")


def test_refused_dispatch_on_approval_leaves_the_grant_standing(
    owner: Caller, caller: Any, settings: Any, world: World,
) -> None:
    proposal = owner.post("proposals/", {
        "operation": "payments.transfer", "dispatch_on_approval": True,
        "arguments": {"from_account": "acct-001", "to_account": "acct-999",
                      "amount": "5", "currency": "EUR"}}).json()
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 0  # the claim will be refused
    response = caller("approver").post(f"approvals/{proposal['approval']['id']}/decision/",
                                       {"decision": "grant", "digest": proposal["digest"]})
    assert response.status_code == 200, response.content
    permit_id = response.json()["permit_id"]
    assert proposal_run_approved(proposal_id=proposal["id"], principal_id=world.owner.id) is None
    shown = owner.get(f"proposals/{proposal['id']}/").json()
    assert (shown["operation_id"], shown["approval"]["state"]) == (None, "granted")
    # The agent hears why when it dispatches itself.
    assert_error(owner.post(f"proposals/{proposal['id']}/dispatch/", {"permit": permit_id}),
                 429, "budget_exhausted")


def test_resolve_is_for_admins(
    destinations: Destinations, owner: Caller, caller: Any, world: World,
) -> None:
    proposal, _ = world.approved_email(to=["x@lose-response.test"])
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    path = f"operations/{operation.id}/resolve/"
    body = {"outcome": "no_effect", "evidence": "bounced; checked the sink by hand"}
    assert_error(caller("admin").post(path, body), 409, "protocol_state_invalid")  # claimed
    assert operation_execute(operation_id=operation.id).state == "unknown"

    assert owner.get(f"operations/{operation.id}/").json()["state"] == "unknown"
    assert_error(caller("approver").post(path, body), 403, "role_required")
    assert_error(owner.post(path, body), 403, "role_required")
    assert [e["pointer"] for e in schema_errors(caller("admin").post(
        path, {"outcome": "maybe", "evidence": 3}))] == ["/evidence", "/outcome"]
    resolved = caller("admin").post(path, body)
    assert resolved.status_code == 200, resolved.content
    assert set(resolved.json()) == OPERATION_KEYS
    assert resolved.json()["state"] == "reconciled_no_effect"
    assert_error(caller("admin").post(path, body), 409, "protocol_state_invalid")


def test_grants_are_the_callers_own_newest_first_and_paged(
    owner: Caller, caller: Any, world: World,
) -> None:
    from dispatch.services.authority import grant_issue

    for n in range(5):
        grant_issue(issuer="admin", subject=world.owner, operations=["crm.lookup"],
                    scope={"customer": [f"cus-{n}"]}, now=world.now)
    seen: list[dict[str, Any]] = []
    page = owner.get("grants/", page_size=3).json()
    assert set(page) == {"results", "next", "previous"}
    while True:
        seen.extend(page["results"])
        if not page["next"]:
            break
        page = owner.client.get(page["next"], HTTP_AUTHORIZATION=f"Bearer {owner.token}").json()
    assert len(seen) == 8  # three from the world, five here
    assert len({g["id"] for g in seen}) == 8
    assert {g["subject"] for g in seen} == {"owner"}
    assert seen[0]["scope"] == {"customer": ["cus-4"]}  # newest first
    assert set(seen[0]) == {"id", "issuer", "subject", "operations", "scope", "not_before",
                            "expires_at", "revoked_at", "parent_id", "budget"}
    assert seen[0]["budget"] is None
    assert caller("approver").get("grants/").json()["results"] == []


def test_delegation_narrows_or_is_refused(owner: Caller, world: World) -> None:
    from dispatch.services.principals import agent_create

    agent_create(name="helper", tenant="acme", tools=["email.send"])
    grants = owner.get("grants/").json()["results"]
    email = next(g for g in grants if g["operations"] == ["email.send"])
    path = f"grants/{email['id']}/delegate/"
    expires = (world.now + timedelta(hours=1)).isoformat()

    child = owner.post(path, {"subject": "helper", "operations": ["email.send"],
                              "scope": {"mailbox": [MAILBOX]}, "expires_at": expires})
    assert child.status_code == 201, child.content
    body = child.json()
    assert (body["subject"], body["parent_id"], body["scope"]) == (
        "helper", email["id"], {"mailbox": [MAILBOX]})

    wider = owner.post(path, {"subject": "helper", "operations": ["email.send"],
                              "scope": {"mailbox": [MAILBOX, "ceo@acme.example"]}})
    details = assert_error(wider, 403, "delegation_widens")
    assert details["scope"] == {"mailbox": ["ceo@acme.example"]}
    assert_error(owner.post(path, {"subject": "nobody", "operations": ["email.send"],
                                   "scope": {}}), 404, "not_found")
    bad = owner.post(path, {"subject": "helper", "operations": [], "scope": {"mailbox": 1},
                            "expires_at": "tomorrow"})
    assert [e["pointer"] for e in schema_errors(bad)] == ["/expires_at", "/operations"]
    past = owner.post(path, {"subject": "helper", "operations": ["email.send"],
                             "scope": {"mailbox": [MAILBOX]},
                             "expires_at": "2001-01-01T00:00:00Z"})
    assert schema_errors(past) == [{"pointer": "/expires_at", "message": "must be in the future"}]
    naive = owner.post(path, {"subject": "helper", "operations": ["email.send"],
                              "scope": {"mailbox": [MAILBOX]},
                              "expires_at": "2999-01-01T00:00:00"})
    assert [e["pointer"] for e in schema_errors(naive)] == ["/expires_at"]
    scope = owner.post(path, {"subject": "helper", "operations": ["email.send"],
                              "scope": {"mailbox": "someone"}})
    assert [e["pointer"] for e in schema_errors(scope)] == ["/scope"]


def test_audit_is_for_the_tenants_admins(owner: Caller, caller: Any, world: World) -> None:
    proposal, _ = world.approved_email()
    assert_error(owner.get("audit/"), 403, "role_required")
    assert_error(caller("approver").get("audit/"), 403, "role_required")
    admin = caller("admin")
    events = admin.get("audit/", proposal=proposal.id).json()["results"]
    assert [e["kind"] for e in events] == ["approval.granted", "approval.requested",
                                           "proposal.created"]
    assert set(events[0]) == AUDIT_KEYS
    assert events[0]["actor"] == "approver"
    assert events[0]["digest"] == proposal.digest
    ids = [e["id"] for e in events]
    assert ids == sorted(ids, reverse=True)
    kinds = admin.get("audit/", kind="grant.issued").json()["results"]
    assert {e["kind"] for e in kinds} == {"grant.issued"}
    assert admin.get("audit/", operation="op_none").json()["results"] == []
    everything = admin.get("audit/", kind="", proposal="", operation="").json()["results"]
    assert len(everything) > len(events)


def test_audit_pages_through_everything(caller: Any, world: World) -> None:
    for _ in range(3):
        world.approved_email()
    admin = caller("admin")
    total = len(admin.get("audit/", page_size=200).json()["results"])
    seen: list[int] = []
    page = admin.get("audit/", page_size=4).json()
    while True:
        seen.extend(e["id"] for e in page["results"])
        if not page["next"]:
            break
        page = admin.client.get(page["next"],
                                HTTP_AUTHORIZATION=f"Bearer {admin.token}").json()
    assert len(seen) == total == len(set(seen))
    assert seen == sorted(seen, reverse=True)
