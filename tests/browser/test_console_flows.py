"""End to end in Chromium: log in, decide, resolve, and see every refusal on the page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.models import ApprovalRequest, Operation
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import human_create
from dispatch.services.resources import revision_create
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def state_of(proposal: Any) -> str:
    return ApprovalRequest.objects.get(id=proposal.approval.id).state


def busy_queue(world: World) -> Any:
    """A queue that looks like a working day; returns the newest email proposal."""
    world.propose_transfer(amount="24500", memo="Invoice 2024-117")
    world.propose_email(world.draft(to=["grace@example.com"], subject="Your invoice"))
    world.propose_transfer(amount="89.9", memo="Refund order 5521")
    draft = world.draft(to=["ada@example.com"], subject="Draft reply")
    revision_create(principal=world.owner, resource_id=draft.id, base_revision=1, payload={
        "from": "support@acme.example", "to": ["ada@example.com"], "cc": ["lead@acme.example"],
        "subject": "Your refund is on its way",
        "body": "We have refunded your order #5521. It should arrive within 3 days."},
        now=world.now)
    draft.refresh_from_db()
    return world.propose_email(draft)


def test_log_in_and_approve(world: World, page: Any, login: Any, screenshot: Any) -> None:
    proposal = busy_queue(world)
    login("approver", "approver-pw")
    expect(page.get_by_role("heading", name="Pending approvals")).to_be_visible()
    rows = page.locator("a.row-link")
    assert rows.count() == 4
    screenshot("queue")
    page.locator(f"#q-{proposal.approval.id}").click()
    page.wait_for_url(f"**/console/approvals/{proposal.approval.id}/")
    expect(page.get_by_text(proposal.digest, exact=True).first).to_be_visible()
    expect(page.get_by_text("Your refund is on its way").first).to_be_visible()
    screenshot("approval")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert state_of(proposal) == "granted"


def test_deny_needs_a_reason(world: World, page: Any, login: Any) -> None:
    proposal = world.propose_email(world.draft())
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.get_by_role("button", name="Deny").click()
    expect(page.get_by_text("Give a reason to deny this action.")).to_be_visible()
    assert state_of(proposal) == "pending"
    page.get_by_label("Reason").fill("Wrong customer")
    page.get_by_role("button", name="Deny").click()
    expect(page.get_by_text("Denied. The action will not run.")).to_be_visible()
    assert state_of(proposal) == "denied"


def test_keyboard_only_approval(world: World, page: Any, login: Any) -> None:
    proposal = world.propose_transfer(amount="42")
    login("approver", "approver-pw")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/console/approvals/{proposal.approval.id}/")
    page.get_by_label("Reason").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Approve"
    page.keyboard.press("Enter")
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert state_of(proposal) == "granted"


def test_queue_updates_without_reload(world: World, page: Any, login: Any) -> None:
    login("approver", "approver-pw")
    expect(page.get_by_text("Nothing waits for a decision")).to_be_visible()
    proposal = world.propose_transfer(amount="77")
    expect(page.locator(f"#q-{proposal.approval.id}")).to_be_visible(timeout=12_000)
    expect(page.locator("#queue-count strong")).to_have_text("1")


def test_stale_snapshot_is_refused(world: World, page: Any, login: Any) -> None:
    draft = world.draft()
    proposal = world.propose_email(draft)
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    revision_create(principal=world.owner, resource_id=draft.id, base_revision=1, payload={
        "from": "support@acme.example", "to": ["someone-else@example.com"],
        "subject": "Changed", "body": "Changed after the page was loaded."}, now=world.now)
    page.get_by_role("button", name="Approve").click()
    alert = page.locator("#refusal")
    expect(alert).to_contain_text("The resource was edited after this proposal was made.")
    expect(alert).to_contain_text("stale_revision")
    assert state_of(proposal) == "pending"


def test_role_is_refused(world: World, page: Any, login: Any) -> None:
    login("approver", "approver-pw")
    response = page.goto("/console/grants/")
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    human_create(name="viewer", tenant="acme", role="none", password="pw")
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Logged out")).to_be_visible()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("viewer")
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()


def test_post_without_csrf_token_is_refused(world: World, page: Any, login: Any) -> None:
    proposal = world.propose_email(world.draft())
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.evaluate(
        "document.querySelector('.decision-form input[name=csrfmiddlewaretoken]').remove()")
    with page.expect_response(re.compile(r"/decide/$")) as answer:
        page.get_by_role("button", name="Approve").click()
    assert answer.value.status == 403
    assert "CSRF" in page.content()
    assert state_of(proposal) == "pending"


def test_resolve_an_unknown_outcome(
    live: World, destinations: Destinations, page: Any, login: Any, screenshot: Any,
) -> None:
    operations = []
    for proposal in (live.approved_email(to=["x@lose-response.test"])[0],
                     _approved_transfer(live)):
        claimed = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                    now=live.now, enqueue=False)
        operations.append(operation_execute(operation_id=claimed.id))
    assert [op.state for op in operations] == ["unknown", "unknown"]
    login("admin", "admin-pw")
    page.get_by_role("link", name="Unknown outcomes").click()
    expect(page.get_by_role("heading", name="Unknown outcomes")).to_be_visible()
    screenshot("unknown")
    email = operations[0]
    asked: list[str] = []

    def answer(accept: bool) -> Any:
        def handle(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()
        return handle

    card = page.locator("article", has=page.locator(f"#op-{email.id}"))
    page.once("dialog", answer(True))
    card.get_by_role("button", name="Mark no effect").click()
    expect(page.get_by_text("Write a note of the evidence before resolving.")).to_be_visible()
    page.get_by_label("Evidence note").fill("Sink log shows a bounce; nothing was delivered.")
    page.once("dialog", answer(False))  # asked what it records, and cancelled: nothing sent
    page.get_by_role("button", name="Mark no effect").click()
    expect(page.get_by_label("Evidence note")).to_have_value(
        "Sink log shows a bounce; nothing was delivered.")
    assert Operation.objects.get(id=email.id).state == "unknown"
    assert asked[-1].startswith("Record that the effect did not happen?")
    assert email.id in asked[-1]
    page.once("dialog", answer(True))
    page.get_by_role("button", name="Mark no effect").click()
    expect(page.get_by_role("status")).to_have_text(
        "Recorded as no effect: the effect did not happen. "
        f"Operation {email.id} is settled and is never attempted again.")
    assert Operation.objects.get(id=email.id).state == "reconciled_no_effect"


def _approved_transfer(world: World) -> Any:
    proposal = world.propose_transfer(amount="310", memo="lose-response.test")
    world.grant(proposal)
    return proposal


def test_mixed_script_domain_is_flagged_in_view(
    world: World, page: Any, login: Any, screenshot: Any,
) -> None:
    proposal = world.propose_email(world.draft(
        to=["kunde@bücher.example", "billing@p\u0430ypal.example"], subject="Your invoice"))
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    section = page.locator("section[aria-labelledby=addresses-title]")
    expect(section.get_by_role("alert")).to_contain_text("mixes Cyrillic and Latin letters")
    expect(section.get_by_text("billing@xn--pypal-4ve.example")).to_be_visible()
    expect(section.get_by_text("kunde@xn--bcher-kva.example")).to_be_visible()
    expect(page.locator("aside").get_by_role("alert")).to_contain_text("mixes scripts")
    screenshot("approval-mixed-scripts")
