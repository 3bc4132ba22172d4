"""Admin pages: unknown outcomes and their resolution, grants, audit, timelines."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from dispatch.models import AuditEvent, Grant, Operation
from dispatch.services.authority import grant_delegate
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import human_create, subagent_create
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.console.conftest import Browser, text
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

UNKNOWN = "/console/operations/unknown/"


def unknown_operation(world: World) -> Operation:
    """An email whose send happened but whose response was lost: outcome unknown."""
    proposal, _ = world.approved_email(to=["x@lose-response.test"])
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    operation = operation_execute(operation_id=operation.id)
    assert operation.state == "unknown"
    return operation


@pytest.mark.parametrize("url", [UNKNOWN, "/console/grants/", "/console/audit/"])
def test_operator_is_refused_on_admin_pages(world: World, operator: Browser, url: str) -> None:
    response = operator.get(url)
    assert response.status_code == 403
    assert "for an admin" in text(response)


def test_operator_cannot_post_to_admin_actions(world: World, operator: Browser) -> None:
    grant = Grant.objects.filter(subject=world.owner).first()
    assert grant is not None
    operator.get("/console/")
    assert operator.post(f"/console/grants/{grant.id}/revoke/", {}).status_code == 403
    assert operator.post("/console/operations/op_x/resolve/",
                         {"outcome": "completed", "evidence": "x"}).status_code == 403
    grant.refresh_from_db()
    assert grant.revoked_at is None


def test_unknown_outcomes_list_attempts_and_evidence(
    live: World, destinations: Destinations, admin: Browser,
) -> None:
    operation = unknown_operation(live)
    Operation.objects.filter(id=operation.id).update(evidence="sink: no message found yet")
    response = admin.get(UNKNOWN)
    body = text(response)
    assert response.status_code == 200
    assert operation.id in body
    assert "<strong>1</strong> unknown" in body
    attempt = operation.attempts.get()
    assert attempt.error and attempt.error[:30] in body.replace("&#x27;", "'")
    assert "badge-uncertain" in body
    assert "sink: no message found yet" in body
    assert "Mark completed" in body
    assert "Mark no effect" in body


def test_resolve_needs_a_note(live: World, destinations: Destinations, admin: Browser) -> None:
    operation = unknown_operation(live)
    admin.get(UNKNOWN)
    response = admin.post(f"/console/operations/{operation.id}/resolve/",
                          {"outcome": "completed", "evidence": "   "})
    assert response.status_code == 400
    assert "Write a note of the evidence before resolving." in text(response)
    operation.refresh_from_db()
    assert operation.state == "unknown"


def test_resolve_unknown_outcome(live: World, destinations: Destinations, admin: Browser) -> None:
    operation = unknown_operation(live)
    admin.get(UNKNOWN)
    response = admin.post(f"/console/operations/{operation.id}/resolve/",
                          {"outcome": "no_effect", "evidence": "Bounced; checked the sink."})
    assert response.status_code == 302
    operation.refresh_from_db()
    assert operation.state == "reconciled_no_effect"
    assert operation.evidence == "Bounced; checked the sink."
    after = text(admin.get(UNKNOWN))
    assert "Recorded as no effect: the effect did not happen." in after
    assert "No unknown outcomes." in after
    # Resolving twice is refused by the service, and the page says why.
    again = admin.post(f"/console/operations/{operation.id}/resolve/",
                       {"outcome": "completed", "evidence": "again"})
    assert again.status_code == 409
    assert "only unknown outcomes are resolved" in text(again)


def test_operation_timeline_runs_from_proposal_to_outcome(
    live: World, destinations: Destinations, admin: Browser,
) -> None:
    operation = unknown_operation(live)
    body = text(admin.get(f"/console/operations/{operation.id}/"))
    kinds = re.findall(r'class="badge badge-([a-z-]+)">([a-z_.]+)</span>', body)
    order = [label for _, label in kinds if "." in label]
    assert order[:6] == ["proposal.created", "approval.requested", "approval.granted",
                         "permit.claimed", "attempt.started", "operation.unknown"]


def test_operation_of_another_tenant_is_not_found(world: World, as_user: Any) -> None:
    human_create(name="globex-admin", tenant="globex", role="admin", password="pw")
    assert as_user("globex-admin", "pw").get("/console/operations/op_missing/").status_code == 404


def test_grants_page_shows_delegations_as_a_tree(world: World, admin: Browser) -> None:
    human_create(name="lead", tenant="acme", role="operator", password="pw")
    from dispatch.models import Principal
    lead = Principal.objects.get(name="lead")
    root = Grant.objects.filter(subject=world.owner, operations=["email.send"]).get()
    Grant.objects.filter(id=root.id).update(subject=lead)  # the lead holds it, then delegates
    child = grant_delegate(actor=lead, grant_id=root.id, subject_name="owner",
                           operations=["email.send"], scope={"mailbox": ["support@acme.example"]},
                           expires_at=world.now + timedelta(hours=1), now=world.now)
    body = text(admin.get("/console/grants/"))
    parent_at = body.index(root.id)
    nested = body.index('<ul class="grant-children">', parent_at)
    assert nested < body.index(child.id)
    assert "delegated" in body
    assert "outsider" not in body  # another tenant's grants stay hidden


def test_the_grant_form_never_offers_a_delegated_steps_sub_agent(
    world: World, admin: Browser,
) -> None:
    sub = subagent_create(tenant_id=world.owner.tenant_id, name="researcher@dlg_x",
                          tools=["crm.lookup"])
    assert sub.name not in text(admin.get("/console/grants/"))
    response = admin.post("/console/grants/issue/", {
        "subject": sub.id, "operations": ["crm.lookup"], "scope": "customer=*",
        "expires_in": "3600"})
    assert response.status_code == 400
    assert not Grant.objects.filter(subject=sub).exists()


def test_issue_and_revoke_a_grant(world: World, admin: Browser) -> None:
    admin.get("/console/grants/")
    response = admin.post("/console/grants/issue/", {
        "subject": world.owner.id, "operations": ["payments.transfer"],
        "scope": "account=acct-002, acct-003", "expires_in": "3600"})
    assert response.status_code == 302
    grant = Grant.objects.filter(subject=world.owner).latest("created_at")
    assert grant.operations == ["payments.transfer"]
    assert grant.scope == {"account": ["acct-002", "acct-003"]}
    assert grant.issuer == "admin"
    assert grant.expires_at is not None
    admin.get("/console/grants/")
    revoked = admin.post(f"/console/grants/{grant.id}/revoke/", {})
    assert revoked.status_code == 302
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    assert AuditEvent.objects.filter(kind="grant.revoked").count() == 1


def test_issue_form_refuses_a_scope_without_the_authority_key(
    world: World, admin: Browser,
) -> None:
    admin.get("/console/grants/")
    response = admin.post("/console/grants/issue/", {
        "subject": world.owner.id, "operations": ["email.send"], "scope": "account=acct-1"})
    assert response.status_code == 400
    assert "email.send needs a scope for &#x27;mailbox&#x27;." in text(response)


@pytest.mark.parametrize("expires_in", [str(10**20), str(10**14), "-" + str(10**20)])
def test_issue_form_refuses_an_expiry_no_datetime_can_hold(
    world: World, admin: Browser, expires_in: str,
) -> None:
    admin.get("/console/grants/")
    before = Grant.objects.count()
    response = admin.post("/console/grants/issue/", {
        "subject": world.owner.id, "operations": ["crm.lookup"], "scope": "customer=*",
        "expires_in": expires_in})
    assert response.status_code == 400
    assert Grant.objects.count() == before
    if expires_in.startswith("-"):
        assert "Ensure this value is greater than or equal to 1." in text(response)
    else:
        assert ("That expiry is after 9999-12-31T23:59:59.999999Z, the latest expiry that "
                "can be stored.") in text(response)


def test_issue_form_refuses_another_tenants_subject(world: World, admin: Browser) -> None:
    admin.get("/console/grants/")
    before = Grant.objects.count()
    response = admin.post("/console/grants/issue/", {
        "subject": world.outsider.id, "operations": ["crm.lookup"], "scope": "customer=*"})
    assert response.status_code == 400
    assert Grant.objects.count() == before


def test_revoke_of_another_tenants_grant_is_not_found(world: World, admin: Browser) -> None:
    theirs = Grant.objects.filter(subject=world.outsider).get()
    admin.get("/console/grants/")
    assert admin.post(f"/console/grants/{theirs.id}/revoke/", {}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_audit_filters_and_pages(world: World, admin: Browser) -> None:
    proposals = [world.propose_transfer(amount=str(i + 1)) for i in range(30)]
    body = text(admin.get("/console/audit/?kind=approval.requested"))
    assert body.count('badge-approval-requested">approval.requested') == 30
    assert "proposal.created</span>" not in body
    only = text(admin.get(f"/console/audit/?proposal={proposals[3].id}"))
    # proposal.created, approval.requested
    assert only.count(f"?proposal={proposals[3].id}\"") == 2
    first = admin.get("/console/audit/")
    events = AuditEvent.objects.filter(tenant_id=world.owner.tenant_id).order_by("-id")
    assert events.count() > 50
    ids = re.findall(r'<li class="audit-event"', text(first))
    assert len(ids) == 50
    older = re.search(r'href="([^"]+)" rel="next"', text(first))
    assert older
    second = admin.get(older.group(1).replace("&amp;", "&"))
    assert len(re.findall(r'<li class="audit-event"', text(second))) == events.count() - 50


def test_audit_of_another_tenant_stays_hidden(world: World, admin: Browser) -> None:
    body = text(admin.get("/console/audit/?kind=grant.issued"))
    assert "ops@globex.example" not in body
    assert body.count('badge-grant-issued">grant.issued') == 3
