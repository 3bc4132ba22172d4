"""In Chromium, four eyes (docs/design.md#approval-policies): operator A approves a large
transfer that needs two operators and reads "1 of 2 approvals", their own vote and, on disabled
buttons, why they cannot vote again; operator B sees A's vote, approves, and the page shows the
permit. The live server runs in this process, so the `four_eyes` settings apply to it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.models import Permit
from dispatch.services.approvals import approval_decide
from tests.browser.test_audit import ZONE, in_zone
from tests.browser.test_pages import PHONE, fits_the_screen
from tests.conftest import World
from tests.support.quorum import four_eyes, second_operator

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("four_eyes")]


def test_two_operators_approve_a_large_transfer(
        world: World, page: Any, login: Any, screenshot: Any) -> None:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    second_operator()
    proposal = world.propose_transfer("25000.00")
    approval_id = proposal.approval.id

    login("approver", "approver-pw")
    row = page.locator("tr", has=page.locator(f"#q-{approval_id}"))
    expect(row.locator(".badge-votes")).to_have_text("0 of 2")
    page.locator(f"#q-{approval_id}").click()
    expect(page.locator("#vote-progress")).to_have_text("0 of 2 approvals")
    page.get_by_role("button", name="Approve").click()
    # The large-amount question says this approval alone mints nothing.
    assert len(asked) == 1 and "Your approval counts as 1 of 2: no permit yet" in asked[0]

    expect(page.locator(".messages")).to_contain_text(
        "Your approval is recorded: 1 of 2 approvals. No permit yet and nothing runs: a second "
        "operator must approve.")
    expect(page.locator(".messages")).not_to_contain_text("Approved")
    expect(page.locator("#vote-progress")).to_have_text("1 of 2 approvals")
    expect(page.locator(".vote-list li")).to_have_count(1)
    expect(page.locator(".vote-list li")).to_contain_text("you, approver approved")
    reason = page.locator("#voted-reason")
    expect(reason).to_contain_text("You approved this at")
    expect(reason).to_contain_text("; a second operator must approve.")
    expect(page.get_by_role("button", name="Approve")).to_be_disabled()
    expect(page.get_by_role("button", name="Deny")).to_be_disabled()
    expect(page.locator("#follow")).to_have_count(0)
    assert not Permit.objects.exists()
    screenshot("four-eyes-first-vote", full_page=False)

    page.goto("/console/")
    expect(row.locator(".vote-count")).to_contain_text("1 of 2 you approved")
    # Not a decision: the Decided tab lists it among A's approvals waiting for others.
    page.goto("/console/decided/")
    expect(page.locator(f"#d-{approval_id}")).to_have_count(0)
    expect(page.locator(f"#w-{approval_id}")).to_contain_text("1 of 2 approvals")
    expect(page.locator(f"#w-{approval_id}")).to_contain_text("you approved")

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Logged out")).to_be_visible()
    login("approver2", "pw")
    expect(row.locator(".badge-votes")).to_have_text("1 of 2")
    expect(row.locator(".vote-count")).not_to_contain_text("you approved")
    page.locator(f"#q-{approval_id}").click()
    expect(page.locator("#vote-progress")).to_have_text("1 of 2 approvals")
    expect(page.locator(".vote-list li")).to_contain_text("approver approved")
    expect(page.locator(".vote-list li")).not_to_contain_text("you,")
    expect(page.locator("#voted-reason")).to_have_count(0)
    expect(page.get_by_role("button", name="Deny")).to_be_enabled()
    page.get_by_role("button", name="Approve").click()
    assert len(asked) == 2 and "This mints a one-shot permit" in asked[1]

    permit = Permit.objects.get(approval_id=approval_id)
    expect(page.locator(".messages")).to_contain_text(f"Approved. Permit {permit.id} is bound")
    expect(page.locator("#vote-progress")).to_have_text("2 of 2 approvals")
    expect(page.locator(".vote-list li")).to_have_count(2)
    expect(page.locator(".vote-list li").nth(1)).to_contain_text("you, approver2 approved")
    expect(page.locator(".binding")).to_contain_text(permit.id)
    screenshot("four-eyes-granted")
    page.goto("/console/decided/")
    expect(page.locator(f"#d-{approval_id}")).to_contain_text("the last of 2 approvals")
    expect(page.locator("#waiting-votes")).to_have_count(0)
    assert errors == [], errors


def test_a_vote_waiting_for_others_fits_a_phone(
        world: World, page: Any, login: Any, screenshot: Any) -> None:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    in_zone(page, ZONE)  # local time beside UTC: the widest a vote's time gets
    proposal = world.propose_transfer("25000.00")
    approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                    decision="grant", digest=proposal.digest, now=world.now)
    page.set_viewport_size(PHONE)
    login("approver", "approver-pw")
    fits_the_screen(page, scrolling=True)
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    expect(page.locator("#voted-reason .local-time")).to_be_visible()
    screenshot("four-eyes-phone")
    fits_the_screen(page, scrolling=False)
    page.goto("/console/decided/")
    expect(page.locator(f"#w-{proposal.approval.id} .local-time")).to_be_visible()
    fits_the_screen(page, scrolling=True)
    assert errors == [], errors
