"""Small things, in Chromium: the pause's question names what it pauses,
and times are in the reader's zone beside UTC on the pages that gave UTC only."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.models import Pause
from tests.browser.conftest import signed_in
from tests.conftest import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_pause_question_names_what_it_pauses(world: World, page: Any, login: Any) -> None:
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    login("admin", "admin-pw")
    page.goto("/console/pauses/")
    page.get_by_role("button", name="Pause").click()
    page.get_by_label("Contract").select_option("payments.transfer")
    page.get_by_role("button", name="Pause").click()
    page.get_by_label("Agent").select_option(label=world.owner.name)
    page.get_by_role("button", name="Pause").click()
    assert asked == [
        "Pause everything in acme: every contract and every agent? From now on no claim and no "
        "attempt starts there until an admin resumes it.",
        "Pause the contract payments.transfer, for every agent? From now on no claim and no "
        "attempt starts there until an admin resumes it.",
        f"Pause the contract payments.transfer for the agent {world.owner.name}? From now on no "
        "claim and no attempt starts there until an admin resumes it.",
    ]
    assert not Pause.objects.exists()  # each question was dismissed: nothing paused


def test_a_decided_approval_gives_times_in_the_readers_zone(
        world: World, browser: Any, live_server: Any) -> None:
    proposal = world.propose_email(world.draft())
    world.grant(proposal)
    context, tab = signed_in(browser, live_server.url, ("approver", "approver-pw"),
                             {"width": 1366, "height": 900}, timezone_id="Asia/Kolkata")
    tab.goto(f"/console/approvals/{proposal.approval.id}/")
    decided = tab.locator(".binding div", has=tab.locator("dt", has_text="At"))
    expect(decided.locator(".local-time")).to_contain_text("GMT+5:30")
    expect(decided.locator("time")).to_contain_text(" UTC")
    expires = tab.locator(".binding div", has=tab.locator("dt", has_text="Permit expires"))
    expect(expires.locator(".local-time")).to_contain_text("GMT+5:30")
    context.close()
