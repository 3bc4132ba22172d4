"""The approval page and its decision: what is shown, and every refusal shown plainly."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from dispatch.models import ApprovalRequest, Decision, Permit
from dispatch.services.approvals import approval_decide
from dispatch.services.resources import revision_create
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db


def page_url(proposal: Any) -> str:
    return f"/console/approvals/{proposal.approval.id}/"


def decide_url(proposal: Any) -> str:
    return f"/console/approvals/{proposal.approval.id}/decide/"


def state_of(proposal: Any) -> str:
    return ApprovalRequest.objects.get(id=proposal.approval.id).state


def test_page_shows_the_exact_action(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft(to=["ann@example.com", "bob@example.com"]))
    response = operator.get(page_url(proposal))
    body = text(response)
    assert response.status_code == 200
    assert "email.send" in body
    assert "contract v1" in body
    assert "owner" in body  # the requesting principal
    assert proposal.execution_id in body
    assert proposal.digest in body
    assert f'name="digest" value="{proposal.digest}"' in body
    assert "matches the canonical text" in body
    # Every effect-relevant field, pretty-printed, nothing hidden by defaults.
    for value in ("ann@example.com", "bob@example.com", "support@acme.example",
                  "Your refund", "We have refunded your order.", "&quot;cc&quot;: []",
                  "smtp_sink", "127.0.0.1:"):
        assert value in body, value
    assert "First revision" in body
    assert "you, approver" in body  # the permit binds the approver
    assert "Time left to decide" in body
    assert 'name="decision" value="grant"' in body
    assert 'name="decision" value="deny"' in body


def test_page_diffs_against_the_previous_revision(world: World, operator: Browser) -> None:
    draft = world.draft(subject="Old subject")
    revision_create(principal=world.owner, resource_id=draft.id, base_revision=1, payload={
        "from": "support@acme.example", "to": ["customer@example.com"],
        "cc": ["boss@example.com"], "subject": "New subject",
        "body": "We have refunded your order."}, now=world.now)
    draft.refresh_from_db()
    proposal = world.propose_email(draft)
    body = text(operator.get(page_url(proposal)))
    assert "First revision" not in body
    assert "Revision 2 (this proposal) against revision 1" in body
    assert '<tr class="diff-changed">' in body
    assert "Old subject" in body
    assert "New subject" in body
    assert '<tr class="diff-same">' in body


def test_approve_mints_a_permit(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant", "reason": ""})
    assert response.status_code == 302
    assert response["Location"] == page_url(proposal)
    assert state_of(proposal) == "granted"
    permit = Permit.objects.get(proposal_id=proposal.id)
    assert permit.approver_id == world.approver.id
    after = text(operator.get(page_url(proposal)))
    assert "Approved. Permit" in after
    assert permit.id in after
    assert 'name="decision"' not in after


def test_deny_needs_a_reason(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "deny", "reason": "  "})
    assert response.status_code == 400
    assert "Give a reason to deny this action." in text(response)
    assert state_of(proposal) == "pending"


def test_deny_with_a_reason(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "deny",
                                                    "reason": "Wrong customer"})
    assert response.status_code == 302
    assert state_of(proposal) == "denied"
    assert Decision.objects.get(approval_id=proposal.approval.id).reason == "Wrong customer"
    assert not Permit.objects.filter(proposal_id=proposal.id).exists()
    assert "Wrong customer" in text(operator.get(page_url(proposal)))


def test_stale_snapshot_is_refused(world: World, operator: Browser) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    operator.get(page_url(proposal))
    # The agent edits the draft after the operator loaded the page.
    revision_create(principal=world.owner, resource_id=draft.id, base_revision=1, payload={
        "from": "support@acme.example", "to": ["attacker@example.com"],
        "subject": "Your refund", "body": "Changed."}, now=world.now)
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant"})
    body = text(response)
    assert response.status_code == 409
    assert "The resource was edited after this proposal was made." in body
    assert "The resource has a newer revision" in body
    assert "stale_revision" in body
    assert state_of(proposal) == "pending"
    assert not Permit.objects.filter(proposal_id=proposal.id).exists()
    # Reloaded, the page says so before anyone clicks.
    assert "revision 2 is now current" in text(operator.get(page_url(proposal)))


def test_a_digest_other_than_the_proposals_is_refused(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    response = operator.post(decide_url(proposal), {"digest": "sha256:" + "0" * 64,
                                                    "decision": "grant"})
    assert response.status_code == 409
    assert "proposal_mismatch" in text(response)
    assert state_of(proposal) == "pending"


def test_expired_approval_is_refused(past_world: World, as_user: Any) -> None:
    proposal = past_world.propose_transfer()
    operator = as_user("past-approver", "approver-pw")
    page = operator.get(page_url(proposal))
    assert "window closed" in text(page)
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant"})
    body = text(response)
    assert response.status_code == 403
    assert "The approval window has passed" in body
    assert "approval_expired" in body
    assert state_of(proposal) == "expired"


def test_decided_by_someone_else_is_refused(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    approval_decide(approver=world.admin, approval_id=proposal.approval.id, decision="deny",
                    digest=proposal.digest, reason="not today", now=timezone.now())
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant"})
    body = text(response)
    assert response.status_code == 409
    assert "This approval was decided by someone else meanwhile." in body
    assert "approval_decided" in body
    assert "not today" in body  # the page now shows the other decision
    assert state_of(proposal) == "denied"


def test_a_second_decision_of_ones_own_is_refused(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    first = operator.post(decide_url(proposal), {"digest": proposal.digest, "decision": "grant"})
    assert first.status_code == 302
    second = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                  "decision": "deny", "reason": "changed mind"})
    assert second.status_code == 409
    assert "You already decided this approval" in text(second)
    assert state_of(proposal) == "granted"


def test_post_without_csrf_token_is_refused(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant"}, csrf=False)
    assert response.status_code == 403
    assert state_of(proposal) == "pending"


def test_csrf_refusal_page_in_the_console_look(
    world: World, operator: Browser, settings: Any,
) -> None:
    settings.CSRF_FAILURE_VIEW = "console.views.csrf_failure"
    proposal = world.propose_email(world.draft())
    operator.get(page_url(proposal))
    response = operator.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant"}, csrf=False)
    assert response.status_code == 403
    assert "Form refused" in text(response)
    assert "Content-Security-Policy" in response.headers
    assert state_of(proposal) == "pending"


def test_decide_is_post_only(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    assert operator.get(decide_url(proposal)).status_code == 405


def test_other_tenants_operator_cannot_decide(world: World, as_user: Any) -> None:
    proposal = world.propose_email(world.draft())
    outsider = as_user("outsider-operator", "pw")
    outsider.get("/console/")
    response = outsider.post(decide_url(proposal), {"digest": proposal.digest,
                                                    "decision": "grant"})
    assert response.status_code == 404
    assert state_of(proposal) == "pending"


def test_admin_may_decide_too(world: World, admin: Browser) -> None:
    proposal = world.propose_transfer()
    admin.get(page_url(proposal))
    response = admin.post(decide_url(proposal), {"digest": proposal.digest, "decision": "grant"})
    assert response.status_code == 302
    assert state_of(proposal) == "granted"
