"""A colleague's decision reaches an open approval page: the page asks every
few seconds (views.approval_watch) and, within that interval and without a reload, replaces live
Approve and Deny with who decided and when; under four eyes a colleague's vote appears, and
one's own vote takes the approval out of one's pending count, and the page names who else can
still approve."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from console.approval_page import WATCH_SECONDS
from tests.browser.conftest import signed_in
from tests.conftest import World
from tests.support.quorum import four_eyes, second_operator

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FIRST = ("approver", "approver-pw")
SECOND = ("approver2", "pw")
DESKTOP = {"width": 1366, "height": 900}
#: The watch interval, and a second for the request and the swap.
WITHIN = (WATCH_SECONDS + 1.5) * 1000


def test_a_colleagues_denial_replaces_the_buttons(
        world: World, browser: Any, live_server: Any) -> None:
    second_operator()
    proposal = world.propose_email(world.draft())
    url = f"/console/approvals/{proposal.approval.id}/"
    mine, tab = signed_in(browser, live_server.url, FIRST, DESKTOP)
    errors: list[str] = []
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.goto(url)
    expect(tab.get_by_role("button", name="Approve")).to_be_enabled()
    tab.get_by_label("Reason").fill("half-typed")
    theirs, other = signed_in(browser, live_server.url, SECOND, DESKTOP)
    other.goto(url)
    other.get_by_label("Reason").fill("Wrong customer")
    other.get_by_role("button", name="Deny").click()
    expect(other.get_by_text("Denied. The action will not run.")).to_be_visible()

    notice = tab.locator("#decided-notice")
    expect(notice).to_contain_text("Denied by approver2 at", timeout=WITHIN)
    expect(notice).to_contain_text("Reason: Wrong customer")
    expect(tab.get_by_role("button", name="Approve")).to_have_count(0)
    expect(tab.get_by_role("button", name="Deny")).to_have_count(0)
    expect(tab.locator("h1 .badge")).to_have_text("denied")
    assert tab.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert errors == []
    mine.close()
    theirs.close()


@pytest.mark.usefixtures("four_eyes")
def test_a_colleagues_vote_and_approval_reach_the_open_page(
        world: World, browser: Any, live_server: Any) -> None:
    second_operator()
    large = world.propose_transfer("25000.00")
    world.propose_email(world.draft())
    url = f"/console/approvals/{large.approval.id}/"
    mine, tab = signed_in(browser, live_server.url, FIRST, DESKTOP)
    tab.on("dialog", lambda dialog: dialog.accept())
    expect(tab.locator("#queue-count strong")).to_have_text("2")
    tab.goto(url)
    theirs, other = signed_in(browser, live_server.url, SECOND, DESKTOP)
    other.on("dialog", lambda dialog: dialog.accept())
    other.goto(url)
    expect(other.locator("#vote-progress")).to_have_text("0 of 2 approvals")
    # The four-eyes page names who else can approve (an admin holds every role).
    expect(other.locator("#voters-left")).to_have_text("Can also approve: admin, approver.")

    tab.get_by_role("button", name="Approve").click()
    expect(tab.locator("#vote-progress")).to_have_text("1 of 2 approvals")
    # The colleague's open page shows the vote, and still offers them Approve.
    expect(other.locator("#vote-progress")).to_have_text("1 of 2 approvals", timeout=WITHIN)
    expect(other.locator(".vote-list")).to_contain_text("approver approved")
    expect(other.get_by_role("button", name="Approve")).to_be_enabled()
    expect(other.locator("#voters-left")).to_have_text("Can also approve: admin.")
    # One's own vote leaves one's pending count; the row stays, marked.
    tab.goto("/console/")
    expect(tab.locator("#queue-count strong")).to_have_text("1")
    expect(tab.locator("#queue-voted")).to_contain_text("and 1 you approved, waiting for another")
    other.goto("/console/")
    expect(other.locator("#queue-count strong")).to_have_text("2")

    tab.goto(url)
    other.goto(url)
    other.get_by_role("button", name="Approve").click()
    expect(other.get_by_text("Approved. Permit")).to_be_visible()
    notice = tab.locator("#decided-notice")
    expect(notice).to_contain_text("Approved by you and approver2 at", timeout=WITHIN)
    expect(tab.get_by_role("button", name="Approve")).to_have_count(0)
    expect(tab.locator("h1 .badge")).to_have_text("granted")
    mine.close()
    theirs.close()
