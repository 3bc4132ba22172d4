"""In Chromium: the audit reads as sentences with labelled details, local and UTC times and
links that lead to the approval and the operation; the audit, the Decided tab and the
operations list fit a phone's screen."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from dispatch.models import AuditEvent
from dispatch.services.approvals import approval_decide
from dispatch.services.dispatcher import proposal_dispatch
from tests.browser.test_pages import PHONE, fits_the_screen
from tests.conftest import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A zone with a half-hour offset and no daylight saving: its local time is never UTC's.
ZONE = "Asia/Kolkata"


def errors_of(page: Any) -> list[str]:
    """Every error Chromium's console reports from now on (the `page` fixture adds CSP
    violations and script errors)."""
    found: list[str] = []
    page.on("console", lambda msg: found.append(msg.text) if msg.type == "error" else None)
    return found


def in_zone(page: Any, zone: str) -> None:
    """The page's clock reads local time in `zone` (Chromium's timezone override)."""
    page.context.new_cdp_session(page).send("Emulation.setTimezoneOverride",
                                            {"timezoneId": zone})


def a_working_day(world: World) -> Any:
    """Approved and claimed emails, a denied transfer, a pending one: the lists have rows of
    every kind. Returns the claimed email's proposal."""
    world.propose_transfer(amount="24500", memo="Invoice 2024-117")
    denied = world.propose_transfer(amount="89.90", memo="Refund order 5521")
    approval_decide(approver=world.approver, approval_id=denied.approval.id, decision="deny",
                    digest=denied.digest, reason="not this account", now=world.now)
    for to in (["grace.hopper-longname@a-rather-long-domain-name.example"],
               ["ada@example.com", "lead@acme.example"]):
        proposal, _ = world.approved_email(to=to, subject="Your refund is on its way")
        proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                          enqueue=False)
    return proposal


def test_the_audit_reads_as_sentences_with_details_times_and_links(
    world: World, page: Any, login: Any, screenshot: Any,
) -> None:
    errors = errors_of(page)
    in_zone(page, ZONE)
    proposal = a_working_day(world)
    claim = AuditEvent.objects.get(kind="permit.claimed", proposal_id=proposal.id)
    operation_id = claim.operation_id
    login("admin", "admin-pw")
    page.goto("/console/audit/")
    expect(page.get_by_role("heading", name="Audit")).to_be_visible()
    screenshot("audit")

    row = page.locator(f"#e-{claim.id}")
    expect(row.locator(".audit-title")).to_have_text("Permit claimed")
    expect(row.locator(".audit-operation")).to_have_text("email.send")
    expect(row.locator(".headline .sentence")).to_have_text(
        "Email ada@example.com, lead@acme.example — 'Your refund is on its way'")
    expect(row.locator(".audit-actor")).to_have_text("owner")
    # Labelled details: a label per key, a readable value.
    permit = row.locator("[data-key=permit_id]")
    expect(permit.locator("dt")).to_have_text("Permit")
    expect(permit.locator("dd")).to_have_text(claim.details["permit_id"])
    expect(row.locator("[data-key=execution_id] dt")).to_have_text("Execution")
    expect(row.locator("dt", has_text="Digest")).to_be_visible()
    expect(row.get_by_text(proposal.digest, exact=True)).to_be_visible()
    # The time: local (in the reader's zone) beside UTC.
    local = claim.at.astimezone(ZoneInfo(ZONE))
    when = row.locator(".audit-head .when")
    expect(when.locator(".local-time")).to_have_text(f"{local:%Y-%m-%d %H:%M:%S} GMT+5:30")
    expect(when.locator("time")).to_have_text(f"{claim.at:%Y-%m-%d %H:%M:%S} UTC")
    assert datetime.fromisoformat(when.locator("time").get_attribute("datetime")) == claim.at

    # An approval's request shows its expiry the same way, local and UTC.
    asked = AuditEvent.objects.get(kind="approval.requested", proposal_id=proposal.id)
    requested = page.locator(f"#e-{asked.id}")
    expires = proposal.approval.expires_at.astimezone(ZoneInfo(ZONE))
    expect(requested.locator("[data-key=expires_at] dt")).to_have_text("Expires at")
    expect(requested.locator("[data-key=expires_at] .local-time")).to_have_text(
        f"{expires:%Y-%m-%d %H:%M:%S} GMT+5:30")

    # The links lead to the approval and to the operation.
    row.get_by_role("link", name=f"Approval {proposal.approval.id}").click()
    page.wait_for_url(f"**/console/approvals/{proposal.approval.id}/")
    expect(page.get_by_role("heading", name="email.send")).to_be_visible()
    page.go_back()
    page.locator(f"#e-{claim.id}").get_by_role("link", name=f"Operation {operation_id}").click()
    page.wait_for_url(f"**/console/operations/{operation_id}/")
    expect(page.get_by_role("heading", name="email.send")).to_be_visible()
    assert errors == []


@pytest.mark.parametrize(("user", "url", "name"), [
    ("admin", "/console/audit/", "audit-phone"),
    ("approver", "/console/decided/", "decided-phone"),
    ("approver", "/console/operations/", "operations-phone"),
])
def test_the_lists_fit_a_phone(
    world: World, page: Any, login: Any, screenshot: Any, user: str, url: str, name: str,
) -> None:
    errors = errors_of(page)
    in_zone(page, ZONE)  # both times shown, the widest a row's time gets
    a_working_day(world)
    page.set_viewport_size(PHONE)
    login(user, f"{user}-pw")
    page.goto(url)
    expect(page.locator(".local-time").first).to_be_visible()
    screenshot(name, full_page=False)
    fits_the_screen(page, scrolling=True)
    assert errors == []


def test_a_reader_in_utc_reads_each_time_once(world: World, page: Any, login: Any) -> None:
    in_zone(page, "UTC")
    proposal = a_working_day(world)
    login("approver", "approver-pw")
    page.goto("/console/decided/")
    decided = page.locator(f"#d-{proposal.approval.id} .when")
    expect(decided).to_have_text(f"{world.now:%Y-%m-%d %H:%M:%S} UTC")
    assert page.locator(".local-time").count() == 0
