"""In Chromium: a draft revised to add a cc recipient shows a "changed" badge naming it, in red,
on its queue row and its page; the earlier proposal, now stale, says so and offers only Deny,
with the reason."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.models import ApprovalRequest
from dispatch.services.resources import resource_create, revision_create
from tests.conftest import MAILBOX, World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EXFIL = "exfil@evil.example"
DRAFT = {"from": MAILBOX, "to": ["ada@example.com"], "subject": "About your renewal",
         "body": "Dear Ada,\n\nYour plan renews on 1 May."}
RED = "rgb(160, 28, 28)"  # --bad


def test_an_added_recipient_is_flagged_and_the_stale_proposal_only_denied(
        world: World, page: Any, login: Any, screenshot: Any) -> None:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    draft, _ = resource_create(principal=world.owner, kind="email_draft", payload=DRAFT,
                               now=world.now)
    earlier = world.propose_email(draft)
    draft, _ = revision_create(principal=world.owner, resource_id=draft.id, base_revision=1,
                               payload={**DRAFT, "cc": [EXFIL]}, now=world.now)
    later = world.propose_email(draft)
    login("approver", "approver-pw")

    def row(proposal: Any) -> Any:
        return page.locator("tr", has=page.locator(f"#q-{proposal.approval.id}"))

    # The revision's row names the new recipient, in red, beside the "changed" badge.
    revised = row(later)
    expect(revised.locator(".badge-changed")).to_have_text("changed")
    expect(revised.locator(".badge-stale")).to_have_count(0)
    recipient = revised.locator(".change-recipient")
    expect(recipient).to_have_text(f"new recipient cc: + {EXFIL}")
    expect(recipient).to_have_css("background-color", RED)
    expect(revised.locator(".changes-since")).to_have_text(
        f"since revision 1 (proposal {earlier.id})")

    # The earlier proposal's row no longer looks like the current one.
    stale = row(earlier)
    expect(stale).to_have_class("row-stale")
    expect(stale.locator(".badge-stale")).to_have_text("stale")
    expect(stale.locator(".changes-since")).to_have_text(
        "in revision 2 (now current, not this proposal)")
    # Revision 2's cc is listed, not flagged as a new recipient of this proposal.
    expect(stale.locator(".change-list")).to_contain_text(f"cc: + {EXFIL}")
    expect(stale.locator(".change-recipient")).to_have_count(0)
    screenshot("changed-queue", full_page=False)

    # Its page offers Deny only, and says why.
    page.locator(f"#q-{earlier.approval.id}").click()
    expect(page.locator(".page-head .badge-stale")).to_be_visible()
    reason = page.locator("#stale-reason")
    expect(reason).to_contain_text("Only Deny is offered: this proposal is stale.")
    expect(reason).to_contain_text(
        f"email_draft {draft.id} was edited after this proposal: it is bound to revision 1, "
        "and revision 2 is now current")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    # Deny with a reason of one's own, or deny as superseded in one click.
    expect(page.get_by_role("button", name="Deny", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Deny as superseded and open the new proposal")) \
        .to_be_visible()
    # It points at the approval of the revision that replaced it.
    expect(reason.get_by_role("link", name=later.approval.id)).to_be_visible()
    screenshot("changed-stale")

    page.get_by_label("Reason").fill("Superseded: revision 2 adds a recipient")
    page.get_by_role("button", name="Deny", exact=True).click()
    expect(page.get_by_text("Denied. The action will not run.")).to_be_visible()
    assert ApprovalRequest.objects.get(id=earlier.approval.id).state == "denied"

    # The revision's own page shows the same badge at its head, and Approve.
    page.goto(f"/console/approvals/{later.approval.id}/")
    head = page.locator(".page-head")
    expect(head.locator(".badge-changed")).to_be_visible()
    expect(head.locator(".change-recipient")).to_have_text(f"new recipient cc: + {EXFIL}")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert errors == [], errors


def test_a_stale_page_shows_what_the_current_revision_changes_and_denies_in_one_click(
        world: World, page: Any, login: Any) -> None:
    draft, _ = resource_create(principal=world.owner, kind="email_draft", payload=DRAFT,
                               now=world.now)
    earlier = world.propose_email(draft)
    draft, _ = revision_create(principal=world.owner, resource_id=draft.id, base_revision=1,
                               payload={**DRAFT, "cc": [EXFIL], "body": "Dear Ada,\n\nPaid."},
                               now=world.now)
    later = world.propose_email(draft)
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{earlier.approval.id}/")

    # Revision 2's changed fields against this proposal's revision 1; not revision 1 as new.
    diff = page.locator("#stale-diff")
    expect(diff.get_by_role("heading")).to_contain_text("What revision 2 of email_draft changes")
    fields = diff.locator("tbody th[scope=row]")
    # In the payload's field order, which is the store's (PostgreSQL's jsonb puts `cc` first).
    expect(fields).to_have_count(2)
    assert sorted(fields.all_inner_texts()) == ["body", "cc"]
    body = diff.locator("tr", has=page.locator("th", has_text="body"))
    expect(body.locator("td.old")).to_have_text("Dear Ada,\n\nYour plan renews on 1 May.")
    expect(body.locator("td.new")).to_have_text("Dear Ada,\n\nPaid.")
    expect(diff.locator("tr", has=page.locator("th", has_text="cc")).locator("td.new")) \
        .to_contain_text(EXFIL)
    expect(diff).to_contain_text("3 other fields are the same")
    expect(page.locator("main")).not_to_contain_text("every field is new")

    # One click denies it, with the reason, and opens the proposal of revision 2.
    page.get_by_role("button", name="Deny as superseded and open the new proposal").click()
    page.wait_for_url(f"**/console/approvals/{later.approval.id}/")
    expect(page.locator(".messages")).to_contain_text(
        f"{earlier.approval.id} was denied as superseded")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    denied = ApprovalRequest.objects.select_related("decision").get(id=earlier.approval.id)
    assert denied.state == "denied"
    assert denied.decision.reason == (
        f"Superseded: revision 2 of email_draft {draft.id} is current (its proposal waits in "
        f"approval {later.approval.id}).")
    page.goto(f"/console/approvals/{earlier.approval.id}/")
    expect(page.locator("#superseded-by").get_by_role("link", name=later.approval.id)) \
        .to_be_visible()
