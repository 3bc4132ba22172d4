"""Every denial the service layer owns, from realistic input, and nothing changed by it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from demo.destinations.runner import list_all
from demo.handlers import EmailSendHandler
from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    BudgetCounter,
    Decision,
    Grant,
    Operation,
    Permit,
    Principal,
    Proposal,
    Resource,
    Revision,
)
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide, approvals_expire_stale
from dispatch.services.authority import grant_delegate, grant_issue, grant_revoke
from dispatch.services.budgets import budget_take
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import agent_create, human_create
from dispatch.services.proposals import proposal_create
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.resources import resource_create, revision_create
from dispatch.services.runs import proposal_run_approved
from dispatch.services.worker import operation_execute
from protocols.denials import Denial, DenialCode
from tests.conftest import ALL_TOOLS, MAILBOX, World
from tests.support.destinations import Destinations
from tests.support.runtime import ChangedEmailSendHandler

pytestmark = pytest.mark.django_db

WRONG_DIGEST = "sha256:" + "0" * 64
PAYLOAD = {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
           "body": "We have refunded your order."}


# --- helpers ------------------------------------------------------------------------------------


def refused(call: Callable[..., Any], **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as caught:
        call(**kwargs)
    return caught.value


def store() -> dict[str, Any]:
    """Everything a refusal must leave as it was (audit of the refusal itself aside)."""
    return {
        "proposals": sorted(Proposal.objects.values_list("id", flat=True)),
        "approvals": sorted(ApprovalRequest.objects.values_list("id", "state")),
        "decisions": sorted(Decision.objects.values_list("id", "outcome")),
        "permits": sorted(Permit.objects.values_list("id", "state")),
        "operations": sorted(Operation.objects.values_list("id", "state", "attempts_made")),
        "resources": sorted(Resource.objects.values_list("id", "current_revision", "state")),
        "revisions": sorted(Revision.objects.values_list("id", flat=True)),
        "grants": sorted(Grant.objects.values_list("id", "revoked_at")),
        "budget": sorted(BudgetCounter.objects.filter(used__gt=0).values_list("key", "used")),
        "audit": sorted(AuditEvent.objects.exclude(kind__in=["dispatch.denied", "intake.denied"])
                        .values_list("id", flat=True)),
    }


def dispatch(world: World, proposal: Any, *, principal: Any = None, permit_id: Any = None,
             now: datetime | None = None) -> Operation:
    return proposal_dispatch(principal=principal or world.owner, proposal_id=proposal.id,
                             permit_id=permit_id, now=now or world.now, enqueue=False)


def decide(world: World, proposal: Any, decision: str = "grant", *, approver: Any = None,
           digest: Any = None, now: datetime | None = None) -> Any:
    return approval_decide(approver=approver or world.approver,
                           approval_id=proposal.approval.id, decision=decision,
                           digest=proposal.digest if digest is None else digest,
                           now=now or world.now)


def email_arguments(resource: Any, revision: int | None = None) -> dict[str, Any]:
    return {"draft": {"id": resource.id, "revision": revision or resource.current_revision}}


def propose_lookup(world: World, *, principal: Any = None, execution_id: str | None = None,
                   now: datetime | None = None) -> Proposal:
    return proposal_create(principal=principal or world.owner, operation="crm.lookup",
                           arguments={"customer_id": "cus-001"}, execution_id=execution_id,
                           now=now or world.now)


def edit(world: World, resource: Any, subject: str = "Edited subject") -> Resource:
    edited, _ = revision_create(principal=world.owner, resource_id=resource.id,
                                base_revision=resource.current_revision,
                                payload={**PAYLOAD, "subject": subject}, now=world.now)
    return edited


def state_of(resource: Any) -> str:
    return Resource.objects.get(id=resource.id).state


def grant_of(principal: Any, operation: str) -> Grant:
    return next(g for g in Grant.objects.filter(subject=principal)
                if operation in g.operations)


def without_id(denial: Denial) -> dict[str, Any]:
    body = denial.as_body()
    details = {k: v for k, v in body["error"]["details"].items() if k != "id"}
    return {"error": {**body["error"], "details": details}}


def budget_used() -> dict[str, int]:
    return dict(BudgetCounter.objects.values_list("key", "used"))


@pytest.fixture
def colleague(world: World) -> Principal:
    """A second agent of the owner's tenant, with the same tools and grants."""
    agent, _ = agent_create(name="colleague", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=agent, operations=["email.send", "crm.lookup"],
                scope={"mailbox": [MAILBOX], "customer": "*"}, now=world.now)
    return agent


@pytest.fixture
def elsewhere(world: World) -> dict[str, Any]:
    """Objects of the other tenant: a resource, a pending and a dispatched proposal, a grant."""
    payload = {**PAYLOAD, "from": "ops@globex.example"}
    pending_draft, _ = resource_create(principal=world.outsider, kind="email_draft",
                                       payload=payload, now=world.now)
    pending = proposal_create(principal=world.outsider, operation="email.send",
                              arguments=email_arguments(pending_draft), now=world.now)
    sent_draft, _ = resource_create(principal=world.outsider, kind="email_draft",
                                    payload=payload, now=world.now)
    approved = proposal_create(principal=world.outsider, operation="email.send",
                               arguments=email_arguments(sent_draft), now=world.now)
    _, permit = approval_decide(approver=world.outsider_operator,
                                approval_id=approved.approval.id, decision="grant",
                                digest=approved.digest, now=world.now)
    operation = proposal_dispatch(principal=world.outsider, proposal_id=approved.id,
                                  now=world.now, enqueue=False)
    return {
        "resource": pending_draft, "proposal": pending, "approval": pending.approval,
        "operation": operation, "permit": permit, "grant": grant_of(world.outsider, "email.send"),
        "claimed_proposal": approved,
    }


@pytest.fixture
def email_only_policy(policy: Callable[[list[str]], None]) -> Callable[[], None]:
    """Call to make deployment policy refuse `financial_write`; the runtime is rebuilt."""
    return lambda: policy(["read", "external_write", "human"])


# --- not_found: forged ids and other tenants' ids -----------------------------------------------


def _dispatch_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: proposal_dispatch(principal=world.owner, proposal_id=target, now=world.now,
                                     enqueue=False)


def _decide_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: approval_decide(approver=world.approver, approval_id=target,
                                   decision="grant", digest=WRONG_DIGEST, now=world.now)


def _resolve_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: operation_resolve(admin=world.admin, operation_id=target,
                                     outcome="completed", evidence="seen", now=world.now)


def _revise_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: revision_create(principal=world.owner, resource_id=target, base_revision=1,
                                   payload=PAYLOAD, now=world.now)


def _delegate_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: grant_delegate(actor=world.owner, grant_id=target, subject_name="approver",
                                  operations=["email.send"], scope={"mailbox": [MAILBOX]},
                                  expires_at=None, now=world.now)


def _revoke_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: grant_revoke(actor=world.admin, grant_id=target, now=world.now)


CALLS: dict[str, tuple[Callable[[World, Any], Callable[[], Any]], str, str]] = {
    # name: (call, kind in the details, the prefix of a forged id)
    "dispatch": (_dispatch_call, "proposal", "prp"),
    "decide": (_decide_call, "approval", "apr"),
    "resolve": (_resolve_call, "operation", "op"),
    "revise": (_revise_call, "resource", "res"),
    "delegate": (_delegate_call, "grant", "grt"),
    "revoke": (_revoke_call, "grant", "grt"),
}
FORGED = ["{prefix}_doesnotexist", "", "doesnotexist", "x" * 300, 123, None, ["x"],
          {"id": "x"}, True]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("forged", FORGED, ids=[f"forged{i}" for i in range(len(FORGED))])
def test_forged_id_is_not_found(world: World, call: str, forged: Any) -> None:
    make, kind, prefix = CALLS[call]
    target = forged.format(prefix=prefix) if isinstance(forged, str) else forged
    before = store()
    denial = refused(make(world, target))
    assert denial.code is DenialCode.NOT_FOUND
    assert denial.status == 404
    assert denial.details["kind"] == kind
    if isinstance(target, str):
        assert denial.details == {"kind": kind, "id": target}
    else:
        assert denial.details == {"kind": kind}
    assert store() == before


@pytest.mark.parametrize(
    ("call", "key"),
    [("dispatch", "proposal"), ("dispatch", "claimed_proposal"), ("decide", "approval"),
     ("resolve", "operation"), ("revise", "resource"), ("delegate", "grant"),
     ("revoke", "grant")],
)
def test_other_tenants_id_answers_like_a_forged_one(
    world: World, elsewhere: dict[str, Any], call: str, key: str,
) -> None:
    make, kind, prefix = CALLS[call]
    before = store()
    theirs = refused(make(world, elsewhere[key].id))
    forged = refused(make(world, f"{prefix}_doesnotexist"))
    assert theirs.code is DenialCode.NOT_FOUND
    assert theirs.details == {"kind": kind, "id": elsewhere[key].id}
    assert without_id(theirs) == without_id(forged)
    assert str(theirs).replace(elsewhere[key].id, "") == str(forged).replace(
        f"{prefix}_doesnotexist", "")
    assert store() == before


def test_other_tenants_resource_cannot_be_proposed(
    world: World, elsewhere: dict[str, Any],
) -> None:
    before = store()
    theirs = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(elsewhere["resource"]), now=world.now)
    forged = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments={"draft": {"id": "res_doesnotexist", "revision": 1}},
                     now=world.now)
    assert theirs.code is DenialCode.NOT_FOUND
    assert theirs.details == {"kind": "resource", "id": elsewhere["resource"].id}
    assert without_id(theirs) == without_id(forged)
    assert store() == before


def test_other_tenants_operator_cannot_decide(world: World) -> None:
    proposal = world.propose_email(world.draft())
    before = store()
    theirs = refused(decide, world=world, proposal=proposal, approver=world.outsider_operator)
    forged = refused(approval_decide, approver=world.outsider_operator,
                     approval_id="apr_doesnotexist", decision="grant",
                     digest=proposal.digest, now=world.now)
    assert theirs.code is DenialCode.NOT_FOUND
    assert without_id(theirs) == without_id(forged)
    assert store() == before


@pytest.mark.parametrize("source", ["other_tenant", "forged"])
def test_permit_of_another_tenant_is_not_found(
    world: World, elsewhere: dict[str, Any], source: str,
) -> None:
    proposal, permit = world.approved_email()
    target = elsewhere["permit"].id if source == "other_tenant" else "prm_doesnotexist"
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=target)
    assert denial.code is DenialCode.NOT_FOUND
    assert denial.details == {"kind": "permit", "id": target}
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


def test_grant_of_a_colleague_is_not_found(world: World, colleague: Principal) -> None:
    theirs = grant_of(colleague, "email.send")
    before = store()
    denial = refused(_delegate_call(world, theirs.id))
    forged = refused(_delegate_call(world, "grt_doesnotexist"))
    assert denial.code is DenialCode.NOT_FOUND
    assert without_id(denial) == without_id(forged)
    assert store() == before


def test_delegation_to_another_tenants_principal_is_not_found(world: World) -> None:
    before = store()
    denial = refused(grant_delegate, actor=world.owner,
                     grant_id=grant_of(world.owner, "email.send").id,
                     subject_name=world.outsider.name, operations=["email.send"],
                     scope={"mailbox": [MAILBOX]}, expires_at=None, now=world.now)
    assert denial.code is DenialCode.NOT_FOUND
    assert denial.details == {"kind": "principal", "id": world.outsider.name}
    assert store() == before


# --- unknown_operation, tool_not_permitted ------------------------------------------------------


@pytest.mark.parametrize("operation", ["email.sendx", "", "EMAIL.SEND", "email", None, 7,
                                       ["email.send"], "payments.transfer "])
def test_unknown_operation_is_refused(world: World, operation: Any) -> None:
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation=operation,
                     arguments={"customer_id": "cus-001"}, now=world.now)
    assert denial.code is DenialCode.UNKNOWN_OPERATION
    assert denial.status == 404
    assert store() == before


def test_tool_outside_the_agents_tool_set_is_refused(world: World) -> None:
    narrow, _ = agent_create(name="narrow", tenant="acme", tools=["crm.lookup"])
    grant_issue(issuer="admin", subject=narrow, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=world.now)
    # A draft of an agent whose tools take drafts: `narrow` could not make one itself.
    draft = world.draft()
    before = store()
    denial = refused(proposal_create, principal=narrow, operation="email.send",
                     arguments=email_arguments(draft), now=world.now)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED
    assert denial.details == {"operation": "email.send"}
    assert store() == before
    assert state_of(draft) == "draft"


def test_human_without_tools_cannot_propose(world: World) -> None:
    denial = refused(proposal_create, principal=world.approver, operation="crm.lookup",
                     arguments={"customer_id": "cus-001"}, now=world.now)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED


def test_tool_removed_after_the_proposal_is_refused_at_dispatch(world: World) -> None:
    proposal = propose_lookup(world)
    Principal.objects.filter(id=world.owner.id).update(tools=["email.send"])
    world.owner.refresh_from_db()
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.TOOL_NOT_PERMITTED
    assert store() == before


# --- schema_invalid -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "pointers"),
    [
        ({}, ["/arguments/draft"]),
        ({"draft": "DRAFT"}, ["/arguments/draft"]),
        ({"draft": {"id": "DRAFT", "revision": 1}, "bcc": ["boss@acme.example"]},
         ["/arguments/bcc"]),
        ({"draft": {"id": "DRAFT", "revision": "1"}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "DRAFT", "revision": 0}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "DRAFT"}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "DRAFT", "revision": 1, "payload": {"to": ["x@evil.example"]}}},
         ["/arguments/draft/payload"]),
        ([], ["/arguments"]),
        ("draft", ["/arguments"]),
        (None, ["/arguments"]),
    ],
    ids=["missing", "not-a-ref", "extra", "wrong-type", "revision-0", "missing-revision",
         "client-payload", "list", "string", "null"],
)
def test_email_arguments_against_the_schema(
    world: World, arguments: Any, pointers: list[str],
) -> None:
    draft = world.draft()
    arguments = json.loads(json.dumps(arguments).replace("DRAFT", draft.id))
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=arguments, now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.status == 422
    assert [e["pointer"] for e in denial.details["errors"]] == pointers
    assert all(e["message"] for e in denial.details["errors"])
    assert store() == before
    assert state_of(draft) == "draft"


@pytest.mark.parametrize(
    ("changes", "pointers"),
    [
        ({"amount": "10.001"}, ["/arguments/amount"]),
        ({"amount": "-10"}, ["/arguments/amount"]),
        ({"amount": "0"}, ["/arguments/amount"]),
        ({"amount": "1e3"}, ["/arguments/amount"]),
        ({"amount": 10}, ["/arguments/amount"]),
        ({"currency": "XXX"}, ["/arguments/amount"]),
        ({"currency": "eur"}, ["/arguments/currency"]),
        ({"memo": 5}, ["/arguments/memo"]),
        ({"to_account": "acct 999"}, ["/arguments/to_account"]),
        ({"fee": "1.00"}, ["/arguments/fee"]),
        ({"amount": None, "currency": None}, ["/arguments/amount", "/arguments/currency"]),
    ],
    ids=["three-places", "negative", "zero", "exponent", "number", "unknown-currency",
         "lowercase-currency", "memo-type", "account-pattern", "extra", "two-wrong"],
)
def test_transfer_arguments_against_the_schema(
    world: World, changes: dict[str, Any], pointers: list[str],
) -> None:
    arguments = {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                 "currency": "EUR", "memo": "", **changes}
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments=arguments, now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == pointers
    assert store() == before


def test_missing_transfer_members_are_each_reported_once(world: World) -> None:
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments={"from_account": "acct-001", "to_account": "acct-999"},
                     now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.details["errors"] == [
        {"pointer": "/arguments/amount", "message": "is required"},
        {"pointer": "/arguments/currency", "message": "is required"},
    ]


def test_equal_amounts_are_one_proposal_digest(world: World) -> None:
    digests = {world.propose_transfer(amount=a).digest for a in ("10", "10.0", "10.00")}
    assert len(digests) == 1


@pytest.mark.parametrize(
    ("payload", "pointers"),
    [
        ({k: v for k, v in PAYLOAD.items() if k != "to"}, ["/payload/to"]),
        ({k: v for k, v in PAYLOAD.items() if k not in ("to", "subject")},
         ["/payload/subject", "/payload/to"]),
        ({**PAYLOAD, "to": ["not-an-address"]}, ["/payload/to/0"]),
        ({**PAYLOAD, "to": []}, ["/payload/to"]),
        ({**PAYLOAD, "bcc": ["x@example.com"]}, ["/payload/bcc"]),
        ({**PAYLOAD, "subject": 5}, ["/payload/subject"]),
    ],
    ids=["missing-to", "missing-two", "bad-address", "no-recipient", "extra", "wrong-type"],
)
def test_draft_payload_against_the_schema(
    world: World, payload: dict[str, Any], pointers: list[str],
) -> None:
    before = store()
    denial = refused(resource_create, principal=world.owner, kind="email_draft",
                     payload=payload, now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == pointers
    assert store() == before


@pytest.mark.parametrize(
    ("extra", "pointer"),
    [({"execution_id": "has space"}, "/execution_id"),
     ({"execution_id": 5}, "/execution_id"),
     ({"execution_id": "x" * 81}, "/execution_id"),
     ({"approval_expires_in": 0}, "/approval_expires_in"),
     ({"approval_expires_in": "60"}, "/approval_expires_in"),
     ({"approval_expires_in": True}, "/approval_expires_in"),
     ({"dispatch_on_approval": "yes"}, "/dispatch_on_approval")],
)
def test_proposal_options_against_the_schema(
    world: World, extra: dict[str, Any], pointer: str,
) -> None:
    draft = world.draft()
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(draft), now=world.now, **extra)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == [pointer]
    assert store() == before


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [({"decision": "approve"}, "/decision"), ({"decision": None}, "/decision"),
     ({"digest": 5}, "/digest"), ({"reason": 5}, "/reason")],
)
def test_decision_against_the_schema(
    world: World, changes: dict[str, Any], pointer: str,
) -> None:
    proposal = world.propose_email(world.draft())
    call = {"approver": world.approver, "approval_id": proposal.approval.id,
            "decision": "grant", "digest": proposal.digest, "now": world.now, **changes}
    before = store()
    denial = refused(approval_decide, **call)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == [pointer]
    assert store() == before


# --- authority: scope, missing, expired, revoked, policy ----------------------------------------


def test_sender_outside_the_grants_mailbox_is_a_scope_violation(world: World) -> None:
    draft = world.draft(sender="sales@acme.example")
    before = store()
    denial = refused(world.propose_email, resource=draft)
    assert denial.code is DenialCode.SCOPE_VIOLATION
    assert denial.details == {"key": "mailbox", "value": "sales@acme.example"}
    assert store() == before
    assert state_of(draft) == "draft"


def test_account_outside_the_grant_is_a_scope_violation(world: World) -> None:
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments={"from_account": "acct-002", "to_account": "acct-999",
                                "amount": "10", "currency": "EUR"}, now=world.now)
    assert denial.code is DenialCode.SCOPE_VIOLATION
    assert denial.details == {"key": "account", "value": "acct-002"}
    assert store() == before


def test_agent_without_a_grant_has_no_authority(world: World) -> None:
    newcomer, _ = agent_create(name="newcomer", tenant="acme", tools=ALL_TOOLS)
    before = store()
    denial = refused(propose_lookup, world=world, principal=newcomer)
    assert denial.code is DenialCode.AUTHORITY_MISSING
    assert denial.details == {"operation": "crm.lookup"}
    assert store() == before


def test_grant_for_another_operation_is_no_authority(world: World) -> None:
    newcomer, _ = agent_create(name="newcomer", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=newcomer, operations=["email.send"],
                scope={"mailbox": [MAILBOX]}, now=world.now)
    denial = refused(propose_lookup, world=world, principal=newcomer)
    assert denial.code is DenialCode.AUTHORITY_MISSING


@pytest.fixture
def short_lived(world: World) -> Principal:
    """An agent whose only grant (crm.lookup, email.send) lasts 60 seconds from `now`."""
    agent, _ = agent_create(name="short-lived", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=agent, operations=["crm.lookup", "email.send"],
                scope={"customer": "*", "mailbox": [MAILBOX]}, now=world.now, expires_in=60)
    return agent


@pytest.mark.parametrize("seconds", [60, 61, 3600])
def test_expired_grant_is_refused_at_proposal(
    world: World, short_lived: Principal, seconds: int,
) -> None:
    before = store()
    denial = refused(propose_lookup, world=world, principal=short_lived,
                     now=world.now + timedelta(seconds=seconds))
    assert denial.code is DenialCode.AUTHORITY_EXPIRED
    assert store() == before


def test_grant_within_its_window_allows_a_proposal(
    world: World, short_lived: Principal,
) -> None:
    proposal = propose_lookup(world, principal=short_lived,
                              now=world.now + timedelta(seconds=59))
    assert proposal.principal_id == short_lived.id


def test_grant_expired_since_the_proposal_is_refused_at_dispatch(
    world: World, short_lived: Principal,
) -> None:
    proposal = propose_lookup(world, principal=short_lived)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, principal=short_lived,
                     now=world.now + timedelta(seconds=61))
    assert denial.code is DenialCode.AUTHORITY_EXPIRED
    assert store() == before


def test_grant_expired_after_approval_is_refused_at_dispatch(
    world: World, short_lived: Principal,
) -> None:
    draft, _ = resource_create(principal=short_lived, kind="email_draft", payload=PAYLOAD,
                               now=world.now)
    proposal = proposal_create(principal=short_lived, operation="email.send",
                               arguments=email_arguments(draft), now=world.now)
    _, permit = decide(world, proposal)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, principal=short_lived,
                     now=world.now + timedelta(seconds=90))
    assert denial.code is DenialCode.AUTHORITY_EXPIRED
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"


def _revoke_email_grant(world: World) -> None:
    grant_revoke(actor=world.admin, grant_id=grant_of(world.owner, "email.send").id,
                 now=world.now)


def test_revoked_grant_is_refused_at_proposal(world: World) -> None:
    draft = world.draft()
    _revoke_email_grant(world)
    before = store()
    denial = refused(world.propose_email, resource=draft)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert denial.details == {"operation": "email.send"}
    assert store() == before
    assert state_of(draft) == "draft"


def test_grant_revoked_before_the_decision_is_refused_at_decision(world: World) -> None:
    proposal = world.propose_email(world.draft())
    _revoke_email_grant(world)
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert store() == before
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"


def test_grant_revoked_after_approval_is_refused_at_dispatch(
    live: World, destinations: Destinations,
) -> None:
    proposal, permit = live.approved_email()
    _revoke_email_grant(live)
    before = store()
    denial = refused(dispatch, world=live, proposal=proposal)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert store() == before
    # Revoking the grant revoked the unclaimed permit resting on it (the human's decision
    # stands); the draft is a draft again, for a new proposal under new authority.
    assert Permit.objects.get(id=permit.id).state == "revoked"
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "granted"
    assert Resource.objects.get(id=proposal.resource_refs[0]["id"]).state == "draft"
    assert list_all(destinations.directory)["email"] == []


def test_revoked_parent_cannot_be_delegated(world: World, colleague: Principal) -> None:
    _revoke_email_grant(world)
    before = store()
    denial = refused(grant_delegate, actor=world.owner,
                     grant_id=grant_of(world.owner, "email.send").id,
                     subject_name=colleague.name, operations=["email.send"],
                     scope={"mailbox": [MAILBOX]}, expires_at=None, now=world.now)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert store() == before


def test_revoking_a_grant_revokes_its_delegations(world: World) -> None:
    delegate, _ = agent_create(name="delegate", tenant="acme", tools=ALL_TOOLS)
    child = grant_delegate(actor=world.owner, grant_id=grant_of(world.owner, "email.send").id,
                           subject_name=delegate.name, operations=["email.send"],
                           scope={"mailbox": [MAILBOX]}, expires_at=None, now=world.now)
    draft, _ = resource_create(principal=delegate, kind="email_draft", payload=PAYLOAD,
                               now=world.now)
    _revoke_email_grant(world)
    denial = refused(proposal_create, principal=delegate, operation="email.send",
                     arguments=email_arguments(draft), now=world.now)
    assert denial.code is DenialCode.AUTHORITY_REVOKED
    assert Grant.objects.get(id=child.id).revoked_at == world.now


def test_policy_without_financial_write_refuses_a_transfer(
    world: World, email_only_policy: Callable[[], None],
) -> None:
    email_only_policy()
    before = store()
    denial = refused(world.propose_transfer)
    assert denial.code is DenialCode.EFFECT_NOT_PERMITTED
    assert denial.status == 403
    assert denial.details == {"effects": ["financial_write"]}
    assert store() == before
    # The same policy still allows an email: the refusal is about the effect, not the agent.
    assert world.propose_email(world.draft()).operation == "email.send"


def test_policy_tightened_before_the_decision_is_refused_at_decision(
    world: World, email_only_policy: Callable[[], None],
) -> None:
    proposal = world.propose_transfer()
    email_only_policy()
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.EFFECT_NOT_PERMITTED
    assert store() == before


def test_policy_tightened_after_approval_is_refused_at_dispatch(
    world: World, email_only_policy: Callable[[], None],
) -> None:
    """The permit binds the policy fingerprint: a changed policy is a fingerprint mismatch."""
    proposal = world.propose_transfer()
    permit = world.grant(proposal)
    email_only_policy()
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert denial.details == {"reason": "deployment policy changed"}
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


# --- protocol state and revisions ---------------------------------------------------------------


def test_edit_after_approval_is_stale_at_dispatch(world: World) -> None:
    proposal, permit = world.approved_email()
    draft = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    edited = edit(world, draft)
    assert (edited.current_revision, edited.state) == (2, "draft")
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.STALE_REVISION
    assert denial.details["current_revision"] == 2
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


def test_edit_before_the_decision_is_stale_at_decision(world: World) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    edit(world, Resource.objects.get(id=draft.id))
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.STALE_REVISION
    assert store() == before
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"
    assert not Permit.objects.filter(proposal=proposal).exists()


def test_proposal_of_an_old_revision_is_stale(world: World) -> None:
    draft = world.draft()
    edit(world, draft)
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(draft, revision=1), now=world.now)
    assert denial.code is DenialCode.STALE_REVISION
    assert denial.details["current_revision"] == 2
    assert store() == before


@pytest.mark.parametrize("revision", [2, 99])
def test_proposal_of_a_future_revision_is_stale(world: World, revision: int) -> None:
    draft = world.draft()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(draft, revision=revision), now=world.now)
    assert denial.code is DenialCode.STALE_REVISION


def test_edit_of_an_old_revision_is_stale(world: World) -> None:
    draft = world.draft()
    edit(world, draft, "first edit")
    before = store()
    denial = refused(revision_create, principal=world.owner, resource_id=draft.id,
                     base_revision=1, payload={**PAYLOAD, "subject": "lost update"},
                     now=world.now)
    assert denial.code is DenialCode.STALE_REVISION
    assert denial.details == {"current_revision": 2, "resource_id": draft.id}
    assert store() == before


def test_resource_being_dispatched_cannot_be_proposed_or_edited(world: World) -> None:
    proposal, _ = world.approved_email()
    dispatch(world, proposal)
    draft = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    assert draft.state == "dispatching"
    before = store()
    proposed = refused(world.propose_email, resource=draft)
    edited = refused(revision_create, principal=world.owner, resource_id=draft.id,
                     base_revision=1, payload=PAYLOAD, now=world.now)
    for denial in (proposed, edited):
        assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
        assert denial.details["state"] == "dispatching"
    assert proposed.details["event"] == "propose"
    assert edited.details["event"] == "edit"
    assert store() == before


def test_sent_resource_cannot_be_proposed_again(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    operation = operation_execute(operation_id=dispatch(live, proposal).id)
    assert operation.state == "completed"
    draft = Resource.objects.get(id=proposal.resource_refs[0]["id"])
    assert draft.state == "sent"
    before = store()
    denial = refused(live.propose_email, resource=draft)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.details == {"protocol": "email_draft", "state": "sent", "event": "propose"}
    edited = refused(revision_create, principal=live.owner, resource_id=draft.id,
                     base_revision=1, payload=PAYLOAD, now=live.now)
    assert edited.code is DenialCode.PROTOCOL_STATE_INVALID
    assert store() == before
    assert len(list_all(destinations.directory)["email"]) == 1


def test_denied_draft_cannot_be_proposed_until_edited(world: World) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    decide(world, proposal, "deny")
    assert state_of(draft) == "denied"
    before = store()
    denial = refused(world.propose_email, resource=draft)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert store() == before
    assert world.propose_email(edit(world, draft)).resource_refs[0]["revision"] == 2


# --- approvals ----------------------------------------------------------------------------------


def test_dispatch_before_a_decision_is_pending(world: World) -> None:
    proposal = world.propose_email(world.draft())
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.APPROVAL_PENDING
    assert store() == before


def test_dispatch_after_a_denial_is_denied(world: World) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    approval, permit = decide(world, proposal, "deny")
    assert (approval.state, permit) == ("denied", None)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.APPROVAL_DENIED
    assert store() == before
    assert state_of(draft) == "denied"


@pytest.mark.parametrize("late", [60, 61, 7200])
def test_decision_after_the_window_is_expired(world: World, late: int) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft, approval_expires_in=60)
    denial = refused(decide, world=world, proposal=proposal,
                     now=world.now + timedelta(seconds=late))
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "expired"
    assert not Decision.objects.filter(approval_id=proposal.approval.id).exists()
    assert not Permit.objects.filter(proposal=proposal).exists()
    assert state_of(draft) == "draft"


def test_contract_window_is_an_hour(world: World) -> None:
    proposal = world.propose_email(world.draft(), approval_expires_in=10 ** 6)
    assert proposal.approval.expires_at == world.now + timedelta(hours=1)
    denial = refused(decide, world=world, proposal=proposal,
                     now=world.now + timedelta(hours=1))
    assert denial.code is DenialCode.APPROVAL_EXPIRED


def test_dispatch_of_a_pending_approval_after_its_window_is_expired(world: World) -> None:
    proposal = world.propose_email(world.draft(), approval_expires_in=60)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal,
                     now=world.now + timedelta(seconds=61))
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert store() == before


@pytest.mark.parametrize("late", [60, 3600])
def test_dispatch_after_the_permit_window_is_expired(world: World, late: int) -> None:
    proposal = world.propose_email(world.draft(), approval_expires_in=60)
    permit = world.grant(proposal)
    assert permit.expires_at == world.now + timedelta(seconds=60)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal,
                     now=world.now + timedelta(seconds=late))
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


@pytest.mark.parametrize(("first", "second"),
                         [("grant", "grant"), ("grant", "deny"), ("deny", "grant"),
                          ("deny", "deny")])
def test_second_decision_is_refused(world: World, first: str, second: str) -> None:
    proposal = world.propose_email(world.draft())
    decide(world, proposal, first)
    before = store()
    denial = refused(decide, world=world, proposal=proposal, decision=second,
                     approver=world.admin)
    assert denial.code is DenialCode.APPROVAL_DECIDED
    assert store() == before
    assert Decision.objects.filter(approval_id=proposal.approval.id).count() == 1
    assert Permit.objects.filter(proposal=proposal).count() == (first == "grant")


@pytest.mark.parametrize("digest", [WRONG_DIGEST, "", "sha256:", "SHA256:" + "0" * 64])
def test_wrong_digest_at_decision_is_a_mismatch(world: World, digest: str) -> None:
    proposal = world.propose_email(world.draft())
    before = store()
    denial = refused(decide, world=world, proposal=proposal, digest=digest)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"


def test_digest_of_another_proposal_at_decision_is_a_mismatch(world: World) -> None:
    proposal = world.propose_email(world.draft())
    other = world.propose_email(world.draft(to=["someone-else@example.com"]))
    assert other.digest != proposal.digest
    before = store()
    denial = refused(decide, world=world, proposal=proposal, digest=other.digest)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before


def test_permit_of_another_proposal_is_a_mismatch(world: World) -> None:
    proposal, permit = world.approved_email()
    _, other_permit = world.approved_email(to=["someone-else@example.com"])
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=other_permit.id)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before
    assert set(Permit.objects.values_list("state", flat=True)) == {"issued"}
    # Its own permit still runs it.
    assert dispatch(world, proposal, permit_id=permit.id).proposal_id == proposal.id


def test_permit_for_an_operation_without_approval_is_a_mismatch(world: World) -> None:
    _, permit = world.approved_email()
    proposal = propose_lookup(world)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=permit.id)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before


@pytest.mark.parametrize("who", ["colleague", "admin", "approver"])
def test_dispatch_by_another_principal_of_the_tenant_is_a_mismatch(
    world: World, colleague: Principal, who: str,
) -> None:
    proposal, permit = world.approved_email()
    principal = {"colleague": colleague, "admin": world.admin, "approver": world.approver}[who]
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, principal=principal)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


def test_second_dispatch_finds_the_permit_claimed(world: World) -> None:
    proposal, permit = world.approved_email()
    operation = dispatch(world, proposal)
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.PERMIT_CLAIMED
    assert store() == before
    assert list(Operation.objects.values_list("id", flat=True)) == [operation.id]
    assert Permit.objects.get(id=permit.id).state == "claimed"


def test_a_claimed_permit_is_reported_before_anything_that_changed_since(world: World) -> None:
    """Once claimed, the action is out of the dispatcher's hands: a later dispatch hears
    `permit_claimed` even though the grant it rested on has been revoked meanwhile."""
    proposal, permit = world.approved_email()
    _, other_permit = world.approved_email(to=["other@example.com"])
    dispatch(world, proposal)
    # Naming another proposal's permit is still a mismatch, not a claim.
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=other_permit.id)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    grant_revoke(actor=world.admin, grant_id=grant_of(world.owner, "email.send").id,
                 now=world.now)
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.PERMIT_CLAIMED
    assert denial.details == {"permit_id": permit.id}
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=permit.id)
    assert denial.code is DenialCode.PERMIT_CLAIMED


def test_second_dispatch_without_a_permit_is_claimed_and_holds_no_budget(
    world: World,
) -> None:
    proposal = propose_lookup(world)
    dispatch(world, proposal)
    used = budget_used()
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.PERMIT_CLAIMED
    assert store() == before
    assert budget_used() == used


@pytest.mark.parametrize("who", ["owner", "no_role", "colleague"])
def test_only_a_human_with_the_role_may_decide(
    world: World, colleague: Principal, who: str,
) -> None:
    no_role, _ = human_create(name="bystander", tenant="acme", role="none", password="pw")
    principal = {"owner": world.owner, "no_role": no_role, "colleague": colleague}[who]
    proposal = world.propose_email(world.draft())
    before = store()
    denial = refused(decide, world=world, proposal=proposal, approver=principal)
    assert denial.code is DenialCode.ROLE_REQUIRED
    assert denial.details == {"role": "operator"}
    assert store() == before


def test_admin_holds_the_operator_role(world: World) -> None:
    proposal = world.propose_email(world.draft())
    _, permit = decide(world, proposal, approver=world.admin)
    assert permit is not None
    assert permit.approver_id == world.admin.id


@pytest.fixture
def unknown(live: World) -> Operation:
    """An email whose response was lost: an `unknown` operation."""
    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    operation = operation_execute(operation_id=dispatch(live, proposal).id)
    assert operation.state == "unknown"
    return operation


@pytest.mark.parametrize("who", ["approver", "owner"])
def test_only_an_admin_resolves_an_unknown(
    live: World, unknown: Operation, destinations: Destinations, who: str,
) -> None:
    principal = {"approver": live.approver, "owner": live.owner}[who]
    before = store()
    denial = refused(operation_resolve, admin=principal, operation_id=unknown.id,
                     outcome="completed", evidence="I looked", now=live.now)
    assert denial.code is DenialCode.ROLE_REQUIRED
    assert denial.details == {"role": "admin"}
    assert store() == before
    assert Operation.objects.get(id=unknown.id).state == "unknown"
    assert len(list_all(destinations.directory)["email"]) == 1


def test_unknown_resource_cannot_be_proposed_again(live: World, unknown: Operation) -> None:
    draft = Resource.objects.get(id=unknown.proposal.resource_refs[0]["id"])
    assert draft.state == "unknown"
    denial = refused(live.propose_email, resource=draft)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.details["state"] == "unknown"


def test_dispatching_an_uncertain_operation_again_is_an_unsafe_retry(
    live: World, unknown: Operation, destinations: Destinations,
) -> None:
    """docs/design.md#audit: the answer says what happened. The effect may have happened, so what
    the agent hears is not "already used" but "not safe to retry; an admin must resolve it"."""
    before = store()
    denial = refused(dispatch, world=live, proposal=unknown.proposal)
    assert denial.code is DenialCode.UNSAFE_RETRY
    assert denial.details == {"operation_id": unknown.id, "state": "unknown"}
    denial = refused(dispatch, world=live, proposal=unknown.proposal,
                     permit_id=unknown.permit_id)
    assert denial.code is DenialCode.UNSAFE_RETRY
    assert store() == before
    assert AuditEvent.objects.filter(kind="dispatch.denied").latest("id").details["code"] == (
        "unsafe_retry")
    assert len(list_all(destinations.directory)["email"]) == 1


def test_dispatching_a_settled_operation_again_is_still_permit_claimed(live: World) -> None:
    proposal, _ = live.approved_email()
    operation = operation_execute(operation_id=dispatch(live, proposal).id)
    assert operation.state == "completed"
    assert refused(dispatch, world=live, proposal=proposal).code is DenialCode.PERMIT_CLAIMED


def test_claimed_operation_cannot_be_resolved(world: World) -> None:
    proposal, _ = world.approved_email()
    operation = dispatch(world, proposal)
    before = store()
    denial = refused(operation_resolve, admin=world.admin, operation_id=operation.id,
                     outcome="completed", evidence="I looked", now=world.now)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert store() == before


@pytest.mark.parametrize("who", ["approver", "owner"])
def test_only_an_admin_revokes_a_grant(world: World, who: str) -> None:
    principal = {"approver": world.approver, "owner": world.owner}[who]
    grant = grant_of(world.owner, "email.send")
    before = store()
    denial = refused(grant_revoke, actor=principal, grant_id=grant.id, now=world.now)
    assert denial.code is DenialCode.ROLE_REQUIRED
    assert store() == before
    assert Grant.objects.get(id=grant.id).revoked_at is None


# --- delegation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operations", "scope", "widened"),
    [
        (["email.send", "payments.transfer"], {"mailbox": [MAILBOX]},
         {"operations": ["payments.transfer"]}),
        (["email.send"], {"mailbox": [MAILBOX, "sales@acme.example"]},
         {"scope": {"mailbox": ["sales@acme.example"]}}),
        (["email.send"], {"mailbox": "*"}, {"scope": {"mailbox": "*"}}),
        (["email.send"], {"mailbox": [MAILBOX], "account": ["acct-001"]},
         {"scope": {"account": ["acct-001"]}}),
        (["*"], {"mailbox": [MAILBOX]}, {"operations": ["*"]}),
    ],
    ids=["more-operations", "wider-mailbox", "any-mailbox", "new-key", "every-operation"],
)
def test_delegation_that_widens_is_refused(
    world: World, colleague: Principal, operations: list[str], scope: dict[str, Any],
    widened: dict[str, Any],
) -> None:
    before = store()
    denial = refused(grant_delegate, actor=world.owner,
                     grant_id=grant_of(world.owner, "email.send").id,
                     subject_name=colleague.name, operations=operations, scope=scope,
                     expires_at=None, now=world.now)
    assert denial.code is DenialCode.DELEGATION_WIDENS
    assert denial.status == 403
    assert denial.details == widened
    assert store() == before


@pytest.mark.parametrize("expires_at", [timedelta(hours=2), None],
                         ids=["later", "unbounded"])
def test_delegation_that_outlives_its_parent_is_refused(
    world: World, colleague: Principal, expires_at: timedelta | None,
) -> None:
    parent = grant_issue(issuer="admin", subject=world.owner, operations=["crm.lookup"],
                         scope={"customer": ["cus-001"]}, now=world.now, expires_in=3600)
    before = store()
    denial = refused(grant_delegate, actor=world.owner, grant_id=parent.id,
                     subject_name=colleague.name, operations=["crm.lookup"],
                     scope={"customer": ["cus-001"]},
                     expires_at=None if expires_at is None else world.now + expires_at,
                     now=world.now)
    assert denial.code is DenialCode.DELEGATION_WIDENS
    assert set(denial.details) == {"expires_at"}
    assert store() == before


def test_narrower_delegation_is_granted(world: World, colleague: Principal) -> None:
    child = grant_delegate(actor=world.owner, grant_id=grant_of(world.owner, "email.send").id,
                           subject_name=colleague.name, operations=["email.send"],
                           scope={"mailbox": [MAILBOX]},
                           expires_at=world.now + timedelta(minutes=5), now=world.now)
    assert child.parent_id == grant_of(world.owner, "email.send").id
    assert child.subject_id == colleague.id


# --- budget -------------------------------------------------------------------------------------


def test_execution_budget_exhausted_is_refused_and_reserves_nothing(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 1
    first = propose_lookup(world, execution_id="exe-budget")
    second = propose_lookup(world, execution_id="exe-budget")
    dispatch(world, first)
    used = budget_used()
    before = store()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert denial.status == 429
    assert denial.details == {"budget": "execution"}
    assert store() == before
    assert budget_used() == used
    assert used[f"execution:{world.owner.id}:exe-budget"] == 1


def test_budget_exhausted_leaves_the_permit_issued(world: World, settings: Any) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 1
    first = world.propose_email(world.draft(), execution_id="exe-mail")
    world.grant(first)
    second_draft = world.draft(to=["second@example.com"])
    second = world.propose_email(second_draft, execution_id="exe-mail")
    permit = world.grant(second)
    dispatch(world, first)
    before = store()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(second_draft) == "authorized"


def test_principal_budget_exhausted_rolls_back_every_key(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_PRINCIPAL = 1
    dispatch(world, propose_lookup(world, execution_id="exe-one"))
    second = propose_lookup(world, execution_id="exe-two")
    used = budget_used()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert denial.details == {"budget": "principal"}
    after = budget_used()
    assert after.get(f"execution:{world.owner.id}:exe-two", 0) == 0
    assert {k: v for k, v in after.items() if v} == used


@pytest.mark.django_db(transaction=True)
def test_budget_is_taken_only_inside_a_transaction() -> None:
    with pytest.raises(RuntimeError, match="inside the claim's transaction"):
        budget_take(limits=[("execution:x:y", 5)], cost=1)
    assert not BudgetCounter.objects.exists()


def test_budget_cost_over_a_whole_counter_is_refused_before_any_write(
    world: World, settings: Any,
) -> None:
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 0
    proposal = propose_lookup(world, execution_id="exe-zero")
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.BUDGET_EXHAUSTED
    assert denial.details == {"budget": "execution"}
    assert store() == before
    assert not BudgetCounter.objects.exists()


def test_claim_refused_on_the_worker_leaves_the_grant_standing(
    world: World, settings: Any, django_capture_on_commit_callbacks: Any,
) -> None:
    """`dispatch_on_approval`: the grant commits the decision and the permit and hands the
    claim to a worker. A claim the worker is refused (the execution's budget is spent) leaves
    the decision, the issued permit and the authorized draft, takes no budget, starts no
    attempt and runs nothing."""
    settings.BUDGET_TOOL_CALLS_PER_EXECUTION = 1
    dispatch(world, propose_lookup(world, execution_id="exe-grant"))
    used = budget_used()
    draft = world.draft()
    proposal = world.propose_email(draft, execution_id="exe-grant", dispatch_on_approval=True)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        approval, permit = decide(world, proposal)
    assert len(callbacks) == 1  # the worker's claim-and-run task
    assert proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id) is None
    assert approval.state == "granted"
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"
    assert not Operation.objects.filter(proposal=proposal).exists()
    assert not Attempt.objects.filter(operation__proposal=proposal).exists()
    assert budget_used() == used
    kinds = list(AuditEvent.objects.filter(proposal_id=proposal.id).order_by("id")
                 .values_list("kind", flat=True))
    assert kinds[-2:] == ["approval.granted", "dispatch.denied"]
    # The agent hears why when it dispatches itself.
    assert refused(dispatch, world=world, proposal=proposal).code is DenialCode.BUDGET_EXHAUSTED


def test_database_error_in_the_workers_claim_rolls_back_claim_and_attempt(
    world: World, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any,
) -> None:
    from django.db import OperationalError

    import dispatch.services.claims

    def broken(**_: Any) -> None:
        raise OperationalError("lost the connection mid-claim")

    monkeypatch.setattr(dispatch.services.claims, "budget_take", broken)
    draft = world.draft()
    proposal = world.propose_email(draft, dispatch_on_approval=True)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        approval, permit = decide(world, proposal)
    assert len(callbacks) == 1
    with pytest.raises(OperationalError):  # the task fails; its message comes back
        proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id)
    assert ApprovalRequest.objects.get(id=approval.id).state == "granted"
    assert Decision.objects.filter(approval_id=approval.id).count() == 1
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"
    assert not Operation.objects.filter(proposal=proposal).exists()
    assert not Attempt.objects.exists()
    assert not BudgetCounter.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_budget_take_counts_a_repeated_key_once_and_nothing_for_no_keys() -> None:
    from django.db import transaction

    with transaction.atomic():
        budget_take(limits=[("execution:x:y", 5), ("execution:x:y", 5)], cost=2)
        budget_take(limits=[], cost=1)
    assert budget_used() == {"execution:x:y": 2}
    with pytest.raises(ValueError, match="never negative"), transaction.atomic():
        budget_take(limits=[("execution:x:y", 5)], cost=-1)
    assert budget_used() == {"execution:x:y": 2}


def test_old_sqlite_is_refused_by_a_system_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import dispatch.apps

    monkeypatch.setattr(dispatch.apps, "settings", SimpleNamespace(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3"}}))
    monkeypatch.setattr(dispatch.apps.sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(dispatch.apps.sqlite3, "sqlite_version", "3.34.1")
    errors = dispatch.apps.check_sqlite_version()
    assert [e.id for e in errors] == ["dispatch.E001"]
    assert "3.34.1" in errors[0].msg
    monkeypatch.setattr(dispatch.apps.sqlite3, "sqlite_version_info", (3, 35, 0))
    assert dispatch.apps.check_sqlite_version() == []


def test_worker_claims_and_starts_attempt_one_in_one_transaction(
    world: World, django_capture_on_commit_callbacks: Any,
) -> None:
    """docs/design.md#write-transactions: the grant commits the decision and the permit; the
    worker's claim and attempt 1 commit together, so the action costs two commits where the
    handler runs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    draft = world.draft()
    proposal = world.propose_email(draft, dispatch_on_approval=True)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        _, permit = decide(world, proposal)
    assert len(callbacks) == 1  # handed over only once the grant commits
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert state_of(draft) == "authorized"
    assert not Operation.objects.filter(proposal=proposal).exists()
    with CaptureQueriesContext(connection) as seen:
        operation = proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id)
    assert operation is not None and operation.id == permit.operation_id
    assert Permit.objects.get(id=permit.id).state == "claimed"
    assert Attempt.objects.filter(operation_id=operation.id, number=1).exists()
    kinds = list(AuditEvent.objects.filter(operation_id=operation.id).order_by("id")
                 .values_list("kind", flat=True))
    assert kinds[:2] == ["permit.claimed", "attempt.started"]
    # Inside the test's transaction every atomic block is a savepoint: the claim with its
    # attempt is one, the outcome another (the refused-dispatch audit would be a third).
    savepoints = [q["sql"] for q in seen.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 2, savepoints


def test_failed_claim_holds_no_budget(world: World) -> None:
    """Two proposals on one revision: the second claim fails at the resource compare-and-swap,
    and its budget, taken in the same transaction, rolls back with it."""
    draft = world.draft()
    first = world.propose_email(draft)
    second = world.propose_email(draft)
    world.grant(first)
    second_permit = world.grant(second)
    assert state_of(draft) == "authorized"
    dispatch(world, first)
    used = budget_used()
    before = store()
    denial = refused(dispatch, world=world, proposal=second)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.details["state"] == "dispatching"
    assert store() == before
    after = budget_used()
    assert after.get(f"execution:{world.owner.id}:{second.execution_id}", 0) == 0
    assert {k: v for k, v in after.items() if v} == used
    assert Permit.objects.get(id=second_permit.id).state == "issued"
    assert Operation.objects.filter(proposal=second).count() == 0


# --- contract_mismatch --------------------------------------------------------------------------


def test_changed_handler_after_the_proposal_is_a_contract_mismatch(
    live: World, destinations: Destinations, changed_handler: Callable[[], None],
) -> None:
    proposal, permit = live.approved_email()
    changed_handler()
    contract = get_runtime().contract("email.send")
    assert contract.implementation_fingerprint == ChangedEmailSendHandler.implementation_fingerprint
    assert contract.implementation_fingerprint != EmailSendHandler.implementation_fingerprint
    assert contract.fingerprint != proposal.contract_fingerprint
    before = store()
    denial = refused(dispatch, world=live, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert denial.status == 409
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert list_all(destinations.directory)["email"] == []
    # A new proposal binds the new fingerprint.
    fresh = live.propose_email(live.draft())
    assert fresh.contract_fingerprint == contract.fingerprint


def test_a_pending_approval_under_a_changed_contract_cannot_be_granted(
    world: World, changed_handler: Callable[[], None],
) -> None:
    """No human grants what could never run (docs/compatibility.md): the approval stays pending,
    to be denied or to expire, and the action is proposed again under the new contract."""
    proposal = world.propose_email(world.draft())
    changed_handler()
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert store() == before
    decide(world, proposal, "deny")
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "denied"
    assert Permit.objects.filter(proposal=proposal).count() == 0


def test_handler_swapped_under_a_registered_contract_is_a_contract_mismatch(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposal, permit = world.approved_email()
    monkeypatch.setitem(get_runtime().handlers, ("email.send", 1), ChangedEmailSendHandler())
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


# --- the audit of a refusal ---------------------------------------------------------------------


def test_dispatch_denial_is_audited_with_its_code(world: World) -> None:
    """docs/design.md#proposals lists `dispatch.denied` (with its code) among the audit kinds."""
    proposal = world.propose_email(world.draft())
    refused(dispatch, world=world, proposal=proposal)
    events = list(AuditEvent.objects.filter(kind="dispatch.denied", proposal_id=proposal.id))
    assert len(events) == 1
    assert "approval_pending" in json.dumps(events[0].details)


# --- refusals that must not happen: one proposal's lapse does not undo another's standing -------


def test_lapse_of_a_second_proposal_leaves_the_first_permit_usable(world: World) -> None:
    """A revision may carry several proposals (lifecycle table); a pending one expiring unused
    must not take back the authorization a human granted the other."""
    draft = world.draft()
    granted = world.propose_email(draft)
    permit = world.grant(granted)
    world.propose_email(draft, approval_expires_in=60)
    later = world.now + timedelta(seconds=120)
    assert approvals_expire_stale(now=later) == 1
    assert permit.expires_at > later
    operation = dispatch(world, granted, now=later)
    assert operation.permit_id == permit.id
    assert state_of(draft) == "dispatching"


def test_lapse_of_a_second_proposal_leaves_the_first_approvable(world: World) -> None:
    draft = world.draft()
    pending = world.propose_email(draft)
    world.propose_email(draft, approval_expires_in=60)
    later = world.now + timedelta(seconds=120)
    assert approvals_expire_stale(now=later) == 1
    _, permit = decide(world, pending, now=later)
    assert permit is not None
    assert state_of(draft) == "authorized"


def test_a_dispatch_denial_is_audited_without_the_argument_it_quotes(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/design.md#audit: the caller hears which value fell outside the scope; the audit keeps
    the code and the key, never the value. (A scope violation cannot be reached at dispatch
    through the services since a revoked covering grant answers authority_revoked: the
    admission is made to raise it.)"""
    proposal = propose_lookup(world)

    def outside(*args: Any, **kwargs: Any) -> Any:
        raise Denial(DenialCode.SCOPE_VIOLATION, key="customer", value="cus-secret-42")

    monkeypatch.setattr("dispatch.services.dispatcher.admit_proposal", outside)
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.details == {"key": "customer", "value": "cus-secret-42"}
    event = AuditEvent.objects.filter(kind="dispatch.denied").latest("id")
    assert event.details == {"code": "scope_violation", "key": "customer"}
