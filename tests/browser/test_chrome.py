"""The console's chrome: the admin's navigation is one row at 1366 px, an
operation's page marks Operations as the current section, and the audit's verify address opened
in a browser leads to the audit page rather than a blank 405."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.services.dispatcher import proposal_dispatch
from tests.browser.conftest import signed_in
from tests.conftest import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1366, "height": 900}


def test_the_admins_navigation_is_one_row_at_1366(world: World, browser: Any,
                                                  live_server: Any) -> None:
    proposal, _ = world.approved_email()
    claimed = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                enqueue=False)
    context, tab = signed_in(browser, live_server.url, ("admin", "admin-pw"), DESKTOP)
    links = tab.locator(".mainnav a")
    expect(links).to_have_count(8)
    tops = {round(box["y"]) for box in (links.nth(i).bounding_box() for i in range(8)) if box}
    assert len(tops) == 1, tops
    who = tab.locator(".who").bounding_box()
    last = links.nth(7).bounding_box()
    assert who is not None and last is not None and abs(who["y"] - last["y"]) < 20

    tab.goto(f"/console/operations/{claimed.id}/")
    expect(tab.locator('.mainnav a[aria-current="page"]')).to_have_text("Operations")

    response = tab.goto("/console/audit/verify/")
    assert response is not None and response.ok
    tab.wait_for_url("**/console/audit/")
    expect(tab.get_by_role("button", name="Verify the audit chain")).to_be_visible()
    context.close()
