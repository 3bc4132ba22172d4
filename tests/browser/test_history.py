"""In Chromium: the approval page follows the operation it let run, and a lapsed window closes
the decision's buttons."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dispatch.models import ApprovalRequest, Operation
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_after_approving_the_page_follows_the_operation_until_it_completes(
    live: World, destinations: Destinations, settings: Any, page: Any, login: Any,
) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the worker runs it on the grant's commit
    proposal = live.propose_email(live.draft(), dispatch_on_approval=True)
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.get_by_role("button", name="Approve").click()
    follow = page.locator("#follow")
    expect(follow.locator(".badge-completed")).to_be_visible()
    expect(follow).to_have_attribute("data-settled", "yes")
    assert Operation.objects.get(proposal_id=proposal.id).state == "completed"


def test_the_page_shows_a_later_dispatch_without_a_reload(
    live: World, destinations: Destinations, page: Any, login: Any,
) -> None:
    proposal = live.propose_email(live.draft())
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.get_by_role("button", name="Approve").click()
    follow = page.locator("#follow")
    expect(follow).to_contain_text("owner must dispatch it by")
    expect(follow).to_have_attribute("data-settled", "no")
    page.evaluate("window.stillTheSamePage = true")  # gone if the page reloaded

    # The agent dispatches and the worker runs it, while the page stays open.
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=timezone.now(), enqueue=False)
    expect(follow.locator(".badge-claimed")).to_be_visible()
    operation_execute(operation_id=operation.id)
    expect(follow.locator(".badge-completed")).to_be_visible()
    expect(follow).to_have_attribute("data-settled", "yes")
    assert page.evaluate("window.stillTheSamePage === true")


def test_the_buttons_close_when_the_countdown_ends(
    world: World, page: Any, login: Any,
) -> None:
    login("approver", "approver-pw")
    proposal = proposal_create(principal=world.owner, operation="payments.transfer",
                               arguments={"from_account": "acct-001", "to_account": "acct-999",
                                          "amount": "10.00", "currency": "EUR", "memo": ""},
                               now=timezone.now(), approval_expires_in=4)
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    approve = page.locator("button[value=grant]")
    deny = page.locator("button[value=deny]")
    expect(approve).to_be_enabled()
    expect(approve).to_be_disabled(timeout=10_000)
    expect(approve).to_have_text("Approve (expired)")
    expect(deny).to_be_disabled()
    expect(deny).to_have_text("Deny (expired)")
    expect(page.locator("[data-expires-at]")).to_have_text("expired")
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "pending"
