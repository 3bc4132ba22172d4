"""Operators and admins cancel an action with a button (docs/design.md#cancellation): on the
operation's page while it is `claimed`, on the approval's page while the approval is pending or
granted and unclaimed. The form posts with its CSRF token and an optional reason; the page it
returns to says what happened."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatch.models import ApprovalRequest, AuditEvent, Operation, Proposal
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import attempt_start
from dispatch.services.principals import human_create
from tests.conftest import World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db


def claimed(world: World) -> Operation:
    proposal, _ = world.approved_email()
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def operation_url(operation: Operation) -> str:
    return f"/console/operations/{operation.id}/"


def cancel_form(url: str) -> str:
    return f'action="{url}cancel/"'


def audited(proposal_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.actor, e.details) for e in AuditEvent.objects.filter(
        kind="proposal.cancelled", proposal_id=proposal_id)]


def test_an_operator_cancels_a_claimed_operation_on_its_page(
    world: World, operator: Browser,
) -> None:
    operation = claimed(world)
    url = operation_url(operation)
    page = operator.get(url)
    assert page.status_code == 200
    assert cancel_form(url) in text(page)
    assert "csrfmiddlewaretoken" in text(page)
    assert "Content-Security-Policy" in page.headers
    response = operator.post(url + "cancel/", {"reason": "wrong customer"})
    assert response.status_code == 302
    assert response["Location"] == url
    assert Operation.objects.get(id=operation.id).state == "failed_no_effect"
    after = text(operator.get(url))
    assert f"Cancelled: operation {operation.id} is now failed_no_effect" in after
    assert cancel_form(url) not in after
    ((actor, details),) = audited(operation.proposal_id)
    assert (actor, details["reason"]) == ("approver", "wrong customer")


def test_operators_see_the_page_without_the_admins_parts(
    world: World, operator: Browser, admin: Browser,
) -> None:
    operation = claimed(world)
    body = text(operator.get(operation_url(operation)))
    assert operation.id in body
    assert 'id="attempts-title"' in body
    assert 'id="timeline-title"' not in body  # the audit is the admins'
    assert 'id="timeline-title"' in text(admin.get(operation_url(operation)))


def test_cancel_during_an_attempt_asks_it_to_stop(world: World, admin: Browser) -> None:
    operation = claimed(world)
    assert attempt_start(operation, 1, world.now)  # a worker is inside the handler
    url = operation_url(operation)
    admin.get(url)
    response = admin.post(url + "cancel/", {"reason": ""})
    assert response.status_code == 302
    after = text(admin.get(url))
    assert "attempt 1 is running and is asked to stop" in after
    assert "Cancellation requested" in after
    assert cancel_form(url) not in after  # asked once; the attempt answers
    assert Operation.objects.get(id=operation.id).state == "claimed"
    assert Proposal.objects.get(id=operation.proposal_id).cancelled_at is not None


def test_no_cancel_button_once_the_operation_settled(world: World, admin: Browser) -> None:
    operation = claimed(world)
    url = operation_url(operation)
    admin.get(url)
    assert admin.post(url + "cancel/", {}).status_code == 302
    # A second post (another tab) is refused, and the page says so.
    again = admin.post(url + "cancel/", {})
    assert again.status_code == 302
    assert "already cancelled" in text(admin.get(url))
    assert len(audited(operation.proposal_id)) == 1


def test_the_cancel_form_needs_its_csrf_token(world: World, operator: Browser) -> None:
    operation = claimed(world)
    url = operation_url(operation)
    operator.get(url)
    response = operator.post(url + "cancel/", {"reason": "x"}, csrf=False)
    assert response.status_code == 403
    assert Operation.objects.get(id=operation.id).state == "claimed"


def test_a_reason_over_1000_characters_is_refused(world: World, operator: Browser) -> None:
    operation = claimed(world)
    url = operation_url(operation)
    operator.get(url)
    response = operator.post(url + "cancel/", {"reason": "x" * 1001})
    assert response.status_code == 400
    assert "at most 1000 characters" in text(response)
    assert Operation.objects.get(id=operation.id).state == "claimed"


def test_who_may_press_it(
    world: World, as_user: Callable[[str, str], Browser],
) -> None:
    """A human without a role gets the 403 page; another tenant's operator, not found."""
    human_create(name="viewer", tenant="acme", role="", password="pw")
    operation = claimed(world)
    url = operation_url(operation)
    viewer = as_user("viewer", "pw")
    assert viewer.get(url).status_code == 403
    assert viewer.post(url + "cancel/", {}).status_code == 403
    outsider = as_user("outsider-operator", "pw")
    assert outsider.get(url).status_code == 404
    assert outsider.post(url + "cancel/", {}).status_code == 404
    proposal = world.propose_email(world.draft())
    approval_url = f"/console/approvals/{proposal.approval.id}/"
    assert outsider.post(approval_url + "cancel/", {}).status_code == 404
    assert viewer.post(approval_url + "cancel/", {}).status_code == 403
    assert Operation.objects.get(id=operation.id).state == "claimed"
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"
    assert audited(operation.proposal_id) == audited(proposal.id) == []


@pytest.mark.parametrize("granted", [False, True])
def test_the_approval_page_cancels_an_unclaimed_action(
    world: World, operator: Browser, granted: bool,
) -> None:
    proposal = world.propose_email(world.draft())
    if granted:
        world.grant(proposal)
    url = f"/console/approvals/{proposal.approval.id}/"
    page = text(operator.get(url))
    assert cancel_form(url) in page
    response = operator.post(url + "cancel/", {"reason": "the customer called"})
    assert response.status_code == 302
    assert response["Location"] == url
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "revoked"
    after = text(operator.get(url))
    assert "Cancelled: the approval is revoked and the action will not run." in after
    assert cancel_form(url) not in after
    ((actor, details),) = audited(proposal.id)
    assert (actor, details["before_claim"]) == ("approver", True)


def test_a_claimed_approval_points_to_the_operations_page(
    world: World, operator: Browser,
) -> None:
    operation = claimed(world)
    url = f"/console/approvals/{operation.proposal.approval.id}/"
    page = text(operator.get(url))
    assert cancel_form(url) not in page
    assert f'href="{operation_url(operation)}"' in page
