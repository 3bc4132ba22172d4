"""Pages around the console in Chromium: the API reference, the error pages, the favicon, and
the queue and an operation on a phone's screen."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from tests.browser.test_console_flows import busy_queue
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_reference_lists_the_operations(page: Any) -> None:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    response = page.goto("/api/v1/docs/")
    policy = response.headers["content-security-policy"]
    # Directives in any order (the header's order is the policy dict's, not a contract).
    directives = {part.split()[0]: part.split()[1:] for part in policy.split(";")
                  if part.strip()}
    assert directives["script-src"] == ["'self'"]
    assert "unsafe" not in policy
    expect(page.get_by_text("Propose an exact action").first).to_be_visible()
    expect(page.locator("#operations-proposals-proposals_create")).to_be_visible()
    assert errors == []


def test_an_unknown_page_is_the_consoles_404(page: Any) -> None:
    response = page.goto("/console/no/such/page/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    page.get_by_role("link", name="Back to the console").click()
    page.wait_for_url("**/accounts/login/?next=/console/")


def test_the_favicon_is_answered_with_an_image(page: Any) -> None:
    page.goto("/accounts/login/")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    for url in (href, "/favicon.ico"):
        response = page.request.get(url)
        assert response.status == 200, url
        assert response.headers["content-type"].startswith("image/"), url


PHONE = {"width": 390, "height": 844}
# Elements reaching past the right edge of the screen, and (with `scrolling`) elements whose
# own content is wider than their box in a box that scrolls sideways, for the failure message.
SIDEWAYS = """(scrolling) => {
  const width = document.documentElement.clientWidth;
  const found = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    const scrolls = scrolling && ["auto", "scroll"].includes(style.overflowX)
      && el.scrollWidth > el.clientWidth + 1;
    if (box.right > width + 1 || scrolls) {
      found.push(`${el.tagName.toLowerCase()}.${el.className} right=${Math.round(box.right)}`
        + ` scroll=${el.scrollWidth}/${el.clientWidth}`);
    }
  }
  return found;
}"""


def fits_the_screen(page: Any, *, scrolling: bool) -> None:
    """Nothing wider than the screen; with `scrolling`, nothing scrolling sideways either."""
    assert page.evaluate(SIDEWAYS, scrolling) == []
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), \
        page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_the_queue_fits_a_phone(world: World, page: Any, login: Any, screenshot: Any) -> None:
    busy_queue(world)
    page.set_viewport_size(PHONE)
    login("approver", "approver-pw")
    expect(page.locator("a.row-link").first).to_be_visible()
    screenshot("queue-phone")
    fits_the_screen(page, scrolling=True)


def test_an_operation_fits_a_phone(
    live: World, destinations: Destinations, page: Any, login: Any, screenshot: Any,
) -> None:
    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    claimed = proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=live.now,
                                enqueue=False)
    operation = operation_execute(operation_id=claimed.id)
    page.set_viewport_size(PHONE)
    login("admin", "admin-pw")
    page.goto(f"/console/operations/{operation.id}/")
    expect(page.get_by_role("heading", name=operation.operation)).to_be_visible()
    screenshot("operation-phone")
    fits_the_screen(page, scrolling=False)
