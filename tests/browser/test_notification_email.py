"""An approver's email (docs/design.md#notifications), end to end in Chromium: it arrives in the
real SMTP sink with the link to the approval page; the link, opened, asks for a login and lands
on that page, where the approver approves."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from demo.destinations.runner import list_all
from dispatch.models import ApprovalRequest, Notification
from dispatch.services.notifications import notification_deliver
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_emailed_link_opens_the_approval_to_approve(
    live: World, destinations: Destinations, live_server: Any, page: Any, settings: Any,
) -> None:
    settings.CONSOLE_PUBLIC_URL = live_server.url
    get_user_model().objects.filter(username="approver").update(email="approver@acme.example")
    proposal = live.propose_transfer(amount="420.00", memo="Invoice 88")
    (notification,) = Notification.objects.filter(proposal_id=proposal.id)
    assert notification_deliver(notification_id=notification.id, enqueue=False) == "delivered"

    (email,) = list_all(destinations.directory)["email"]
    assert email["to"] == ["approver@acme.example"]
    links = re.findall(r"https?://\S+", str(email["body"]))
    approval_page = f"{live_server.url}/console/approvals/{proposal.approval.id}/"
    assert links == [approval_page]

    page.goto(links[0])
    page.wait_for_url("**/accounts/login/**")
    page.get_by_label("Username").fill("approver")
    page.get_by_label("Password").fill("approver-pw")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(approval_page)
    expect(page.get_by_text(proposal.digest, exact=True).first).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "granted"


def test_an_admin_reads_the_delivery_log(
    live: World, destinations: Destinations, page: Any, login: Any, screenshot: Any,
) -> None:
    from tests.browser.test_pages import PHONE, fits_the_screen

    get_user_model().objects.filter(username="approver").update(email="approver@acme.example")
    proposal = live.propose_transfer(amount="420.00", memo="Invoice 88")
    (notification,) = Notification.objects.filter(proposal_id=proposal.id)
    assert notification_deliver(notification_id=notification.id, enqueue=False) == "delivered"

    login("admin", "admin-pw")
    page.get_by_role("link", name="Notifications").click()
    page.wait_for_url("**/console/notifications/")
    row = page.locator(f"#n-{notification.id}")
    expect(row).to_contain_text("approval.requested")
    expect(row).to_contain_text("approver@acme.example")
    expect(row).to_contain_text("delivered")
    screenshot("notifications")
    page.set_viewport_size(PHONE)
    page.reload()
    fits_the_screen(page, scrolling=False)
