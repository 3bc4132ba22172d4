"""In Chromium: a large transfer and an email with a cc say what they do, in the queue and on
their approval pages, with the red badges an operator should not miss."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.services.resources import resource_create
from tests.conftest import MAILBOX, World
from tests.support.quorum import four_eyes

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRANSFER = "Pay €99,999.99 from acct-001 to acct-999 — 'urgent wire'"
EMAIL = "Email ada@example.com, cc finance@example.com — 'About your renewal'"


def test_the_sentence_and_badges_in_the_queue_and_on_the_page(
        world: World, page: Any, login: Any, four_eyes: None) -> None:
    # "large amount" is the rules' verdict: the four-eyes rule (10,000.00 EUR) is deployed.
    small = world.propose_transfer(amount="12.5", memo="refund")
    large = world.propose_transfer(amount="99999.99", memo="urgent wire")
    draft, _ = resource_create(principal=world.owner, kind="email_draft", payload={
        "from": MAILBOX, "to": ["ada@example.com"], "cc": ["finance@example.com"],
        "subject": "About your renewal",
        "body": "Dear Ada,\n\nYour plan renews on 1 May.\nThe finance team is in copy."},
        now=world.now)
    email = world.propose_email(draft)
    login("approver", "approver-pw")

    def row(proposal: Any) -> Any:
        return page.locator("tr", has=page.locator(f"#q-{proposal.approval.id}"))

    expect(row(large).locator(".sentence")).to_have_text(TRANSFER)
    expect(row(large).locator(".badge-large")).to_have_text("large amount")
    expect(row(large).locator(".badge-financial-write")).to_be_visible()
    expect(row(small).locator(".sentence")).to_have_text(
        "Pay €12.50 from acct-001 to acct-999 — 'refund'")
    expect(row(small).locator(".badge-large")).to_have_count(0)
    expect(row(email).locator(".sentence")).to_have_text(EMAIL)
    expect(row(email).locator(".badge-external-write")).to_be_visible()
    expect(row(email).locator(".badge-financial-write")).to_have_count(0)

    page.locator(f"#q-{large.approval.id}").click()
    head = page.locator(".page-head")
    expect(head.locator(".sentence")).to_have_text(TRANSFER)
    expect(head.locator(".badge-large")).to_be_visible()
    expect(head.locator(".badge-financial-write")).to_be_visible()
    expect(head.locator(".badge-external-write")).to_be_visible()

    page.goto(f"/console/approvals/{email.approval.id}/")
    expect(page.locator(".page-head .sentence")).to_have_text(EMAIL)
    message = page.locator("article.message")
    expect(message.get_by_role("heading", name="Email")).to_be_visible()
    expect(message.locator("dt")).to_have_text(["From", "To", "Cc", "Subject"])
    expect(message.locator("dd").nth(2).locator("li")).to_have_text(["finance@example.com"])
    # The body keeps its line breaks as the reader sees them.
    body = message.locator(".message-body")
    assert body.inner_text() == "Dear Ada,\n\nYour plan renews on 1 May.\nThe finance team " \
                                "is in copy."
    # The reference's digest and revision are folded away until asked for.
    bookkeeping = message.locator("details.bookkeeping")
    expect(bookkeeping.get_by_text("draft.digest")).to_be_hidden()
    bookkeeping.locator("summary").click()
    expect(bookkeeping.get_by_text("draft.digest")).to_be_visible()
    expect(page.get_by_text("It goes to smtp_sink at")).to_be_visible()
    # What the permit binds is still there, and Approve confirms the digest.
    expect(page.locator("#digest")).to_have_text(email.digest)
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
