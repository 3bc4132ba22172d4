"""Pages move from "what will run" to "what ran": an approval's page, left
open after its grant, follows the operation and, without a reload, heads its fields "What ran",
shows the operation's state in its title and drops Cancel; an operation's page follows a running
operation the same way, opens with the action's sentence, shows an email as an email, and says
a failing judgement in words rather than in raw JSON under a green badge."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations
from tests.support.research import Researcher

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

#: The live follow asks every 2 s; a second more for the request and the swap.
WITHIN = 4_000


def test_an_open_approval_page_moves_from_what_will_run_to_what_ran(
        live: World, destinations: Destinations, page: Any, login: Any) -> None:
    proposal = live.propose_email(live.draft())
    login("approver", "approver-pw")
    page.goto(f"/console/approvals/{proposal.approval.id}/")
    expect(page.locator("#fields-title")).to_have_text("What will run")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved. Permit")).to_be_visible()
    expect(page.locator("#approval-state")).to_have_text("granted")
    expect(page.get_by_role("button", name="Cancel this action")).to_be_visible()
    page.evaluate("window.stillThisPage = true")

    claimed = proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=live.now,
                                enqueue=False)
    operation_execute(operation_id=claimed.id)

    expect(page.locator("#fields-title")).to_have_text("What ran", timeout=WITHIN)
    expect(page.locator("#approval-state")).to_have_text("completed")
    expect(page.locator("#follow")).to_contain_text(f"Operation {claimed.id} completed")
    expect(page.get_by_role("button", name="Cancel this action")).to_have_count(0)
    assert page.evaluate("window.stillThisPage") is True


def test_an_operation_page_reads_as_the_action_and_follows_it(
        live: World, destinations: Destinations, page: Any, login: Any) -> None:
    proposal, _ = live.approved_email(to=["ada@example.com"])
    claimed = proposal_dispatch(principal=live.owner, proposal_id=proposal.id, now=live.now,
                                enqueue=False)
    login("approver", "approver-pw")
    page.goto(f"/console/operations/{claimed.id}/")
    expect(page.locator(".page-head .headline .sentence")).to_have_text(
        "Email ada@example.com — 'Your refund'")
    expect(page.locator("#fields-title")).to_have_text("What is running")
    # An email as an email: its headers and body, not draft.payload.* rows.
    message = page.locator("article.message")
    expect(message.locator("dt")).to_have_text(["From", "To", "Cc", "Subject"])
    expect(message.locator(".message-body")).to_have_text("We have refunded your order.")
    expect(page.locator("main")).not_to_contain_text("draft.payload")
    expect(page.get_by_role("button", name="Cancel this action")).to_be_visible()
    page.evaluate("window.stillThisPage = true")

    operation_execute(operation_id=claimed.id)

    expect(page.locator("#fields-title")).to_have_text("What ran", timeout=WITHIN)
    expect(page.locator("h1 .badge")).to_have_text("completed")
    expect(page.get_by_role("button", name="Cancel this action")).to_have_count(0)
    expect(page.locator("#following")).to_have_count(0)
    assert page.evaluate("window.stillThisPage") is True


def test_a_failing_attestation_is_said_on_its_operations_page(
        live: World, destinations: Destinations, page: Any, login: Any) -> None:
    researcher = Researcher.enrol(live, destinations.sources_url)
    live.now = datetime.now(UTC)
    question = researcher.question()
    tides = researcher.receipt_id(question, "tides")
    failing = researcher.report(question, [(tides, "The Moon is made of green cheese")])
    operation = researcher.attest(failing)
    assert operation.state == "completed"
    login("admin", "admin-pw")
    page.goto(f"/console/operations/{operation.id}/")
    expect(page.locator("h1 .badge-attestation-fail")).to_have_text("judged fail")
    judgement = page.locator("#judgement")
    expect(judgement.get_by_role("heading")).to_have_text("Judgement: fail")
    expect(judgement).to_contain_text("a failing judgement")
    expect(judgement.locator(".findings li")).to_contain_text(["quote not found in source"])
