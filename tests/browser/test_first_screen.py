"""The decision first : on every approval page, at a desktop's 1366×900 and a phone's
390×844, the action's sentence, what is at stake and the decision's button are inside the first
screen, before any scrolling; on the phone Approve and Deny stay in a bar at the bottom of the
screen while the action is read. Each kind of approval the demo and the tests make: an email, a
small payment, a four-eyes payment, a stale email (Deny only), a publication."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from demo.seed import OPERATOR
from dispatch.models import ApprovalRequest
from tests.browser.conftest import signed_in
from tests.browser.test_pages import fits_the_screen
from tests.browser.test_tour import seeded
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.research import Researcher

__all__ = ["seeded"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
SIZES = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])

# Where an element is on the first screen, and for a button whether it is the one a click there
# reaches (not covered by another).
BOX = """(el) => {
  const box = el.getBoundingClientRect();
  const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return {top: box.top, bottom: box.bottom, left: box.left, right: box.right,
          reached: el.tagName !== "BUTTON" || (hit !== null && (hit === el || el.contains(hit)))};
}"""


def on_first_screen(tab: Any, selector: str, viewport: dict[str, int]) -> list[str]:
    """What keeps `selector` from being whole and clickable on the first screen, if anything."""
    box = tab.locator(selector).first.evaluate(BOX)
    problems = []
    if box["top"] < 0 or box["bottom"] > viewport["height"]:
        problems.append(f"{selector} spans y {box['top']:.0f}–{box['bottom']:.0f} of "
                        f"{viewport['height']}")
    if box["left"] < 0 or box["right"] > viewport["width"]:
        problems.append(f"{selector} spans x {box['left']:.0f}–{box['right']:.0f} of "
                        f"{viewport['width']}")
    if not box["reached"]:
        problems.append(f"{selector} is covered by another element")
    return problems


def first_screen(browser: Any, base_url: str, who: tuple[str, str], viewport: dict[str, int],
                 pages: dict[str, tuple[str, list[str]]]) -> dict[str, list[str]]:
    """Log in as `who`, open each page at `viewport` (no scrolling) and report, by page name,
    which of its selectors are not on the first screen."""
    context, tab = signed_in(browser, base_url, who, viewport)
    found: dict[str, list[str]] = {}
    for name, (path, selectors) in pages.items():
        tab.goto(path)
        expect(tab.locator(".headline .sentence")).to_be_visible()
        assert tab.evaluate("window.scrollY") == 0
        problems = [p for selector in selectors for p in on_first_screen(tab, selector, viewport)]
        if problems:
            found[name] = problems
    context.close()
    return found


SENTENCE = ".page-head .headline .sentence"
APPROVE = "button[name=decision][value=grant]"
DENY = "button[name=decision][value=deny]"


@pytest.mark.usefixtures("seeded")
@SIZES
def test_the_demos_approvals_put_the_decision_on_the_first_screen(
        browser: Any, live_server: Any, viewport: dict[str, int]) -> None:
    pending = ApprovalRequest.objects.filter(state="pending").select_related("proposal")
    stale = [a for a in pending if a.proposal.operation == "email.send"
             and a.proposal.resource_refs and _is_stale(a)]
    fresh_email = [a for a in pending if a.proposal.operation == "email.send" and a not in stale]
    transfers = [a for a in pending if a.proposal.operation == "payments.transfer"]
    small = [a for a in transfers if a.quorum == 1]
    large = [a for a in transfers if a.quorum > 1]
    assert stale and fresh_email and small and large
    pages = {
        "email": (f"/console/approvals/{fresh_email[0].id}/", [SENTENCE, APPROVE, DENY]),
        "payment": (f"/console/approvals/{small[0].id}/", [SENTENCE, APPROVE, DENY]),
        # What is at stake with four eyes: how many approvals it still needs.
        "four-eyes": (f"/console/approvals/{large[0].id}/",
                      [SENTENCE, ".headline .badge-large", "#vote-progress", APPROVE, DENY]),
        # A stale proposal offers Deny only, and says why at once.
        "stale": (f"/console/approvals/{stale[0].id}/", [SENTENCE, "#stale-reason strong", DENY]),
    }
    problems = first_screen(browser, live_server.url, OPERATOR, viewport, pages)
    assert problems == {}


def _is_stale(approval: ApprovalRequest) -> bool:
    from dispatch.models import Resource

    return any(Resource.objects.get(id=ref["id"]).current_revision != ref["revision"]
               for ref in approval.proposal.resource_refs)


@SIZES
def test_a_publication_puts_the_decision_on_the_first_screen(
        live: World, destinations: Destinations, browser: Any, live_server: Any,
        viewport: dict[str, int]) -> None:
    researcher = Researcher.enrol(live, destinations.sources_url)
    report, attestation_id = researcher.attested_report(researcher.question())
    proposal = researcher.propose_publication(report, attestation_id)
    pages = {"publication": (f"/console/approvals/{proposal.approval.id}/",
                             [SENTENCE, APPROVE, DENY])}
    problems = first_screen(browser, live_server.url, ("approver", "approver-pw"), viewport,
                            pages)
    assert problems == {}


def test_the_phones_decision_bar_stays_while_the_action_is_read(
        world: World, page: Any, login: Any) -> None:
    proposal = world.propose_email(world.draft())
    login("approver", "approver-pw")
    page.set_viewport_size(PHONE)
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    page.locator("#snapshot-title").scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 0
    assert on_first_screen(page, APPROVE, PHONE) == []
    # The raw snapshot is folded: there, not in the way.
    expect(page.locator("pre.snapshot").first).to_be_hidden()
    page.get_by_text("The snapshot that will run, as JSON").click()
    expect(page.locator("pre.snapshot").first).to_be_visible()
    page.locator(APPROVE).click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "granted"


@pytest.mark.usefixtures("seeded")
def test_the_phones_queue_shows_approvals_on_its_first_screen(
        browser: Any, live_server: Any) -> None:
    context, tab = signed_in(browser, live_server.url, OPERATOR, PHONE)
    # The title and the filters leave room for the first approvals: two rows' links in view.
    links = tab.locator("a.row-link")
    for index in (0, 1):
        box = links.nth(index).bounding_box()
        assert box is not None and box["y"] + box["height"] <= PHONE["height"], index
    context.close()


@SIZES
def test_a_renewal_puts_the_decision_on_the_first_screen(
        live: World, browser: Any, live_server: Any, viewport: dict[str, int]) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from dispatch.services.renewals import operation_reauthorize
    from tests.db.test_renewals import stopped_transfer

    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=timezone.now() - timedelta(seconds=1),
                                    reason="the bank was down")
    pages = {"renewal": (f"/console/renewals/{renewal.id}/", [SENTENCE, APPROVE, DENY])}
    problems = first_screen(browser, live_server.url, ("approver", "approver-pw"), viewport,
                            pages)
    assert problems == {}
    # Nothing on the phone is wider than its screen.
    context, tab = signed_in(browser, live_server.url, ("approver", "approver-pw"), PHONE)
    tab.goto(f"/console/renewals/{renewal.id}/")
    fits_the_screen(tab, scrolling=False)
    # The queue's row says the action in a sentence, every account named.
    tab.goto("/console/")
    row = tab.locator("#renewals tr", has=tab.locator(f"#r-{renewal.id}"))
    expect(row.locator(".headline .sentence")).to_contain_text("acct-999")
    context.close()
