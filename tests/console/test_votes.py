"""Four eyes in the console (docs/design.md#approval-policies): an approval needing two
operators shows "1 of 2 approvals", who approved and when; the operator whose approval is in
reads why they cannot vote again, with Approve and Deny disabled; the first approval is
announced as recorded, never as approved; the queue says "1 of 2" at a bounded query cost."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch.models import AuditEvent, Permit
from tests.conftest import World
from tests.console.conftest import Browser, text
from tests.support.quorum import four_eyes, second_operator

__all__ = ["four_eyes"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("four_eyes")]

LARGE = "25000.00"
RECORDED = ("Your approval is recorded: 1 of 2 approvals. No permit yet and nothing runs: "
            "a second operator must approve.")


def page_of(proposal: Any) -> str:
    return f"/console/approvals/{proposal.approval.id}/"


def decide(browser: Browser, proposal: Any, decision: str = "grant", reason: str = "") -> Any:
    browser.get(page_of(proposal))
    return browser.post(f"{page_of(proposal)}decide/", {
        "decision": decision, "digest": proposal.digest, "reason": reason})


def words(body: str) -> str:
    """The page's text: tags dropped, entities read, white space collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


def button(body: str, decision: str) -> str:
    found = re.search(rf'<button type="submit" name="decision" value="{decision}"[^>]*>', body)
    assert found, f"no {decision} button"
    return found.group(0)


def row_of(body: str, proposal: Any) -> str:
    start = body.index(f'id="q-{proposal.approval.id}"')
    return body[body.rindex("<tr", 0, start):body.index("</tr>", start)]


@pytest.fixture
def other(as_user: Any) -> Browser:
    second_operator()
    return as_user("approver2", "pw")


def test_the_first_approval_is_recorded_as_one_of_two_and_not_offered_again(
        world: World, operator: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    before = text(operator.get(page_of(proposal)))
    assert "0 of 2 approvals" in before
    # The large-amount question says this approval alone runs nothing.
    assert "Your approval counts as 1 of 2: no permit yet" in html.unescape(
        button(before, "grant"))

    response = decide(operator, proposal)
    assert response.status_code == 302
    body = text(operator.get(response["Location"]))
    assert RECORDED in body
    assert "Approved. Permit" not in body
    assert not Permit.objects.exists()

    read = words(body)
    assert "1 of 2 approvals" in read
    assert "you, approver approved" in read
    reason = re.search(r'<div [^>]*id="voted-reason">(.*?)</div>', body, re.S)
    assert reason
    assert re.match(r"You approved this at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC; a second "
                    r"operator must approve\.", re.sub(r"<[^>]+>", "", reason.group(1)))
    # The permit will not bind this viewer: the last approval is someone else's.
    assert "Approver the operator who gives approval 2 of 2" in read
    for decision in ("grant", "deny"):
        assert " disabled " in button(body, decision) + " "
        assert 'aria-describedby="voted-reason"' in button(body, decision)
    # The vote's time is a moment console.js shows in local time beside the UTC.
    assert re.search(r'<li>you, <strong>approver</strong> approved <span class="when"><time '
                     r'datetime="[^"]+" data-local-time>', body)


def test_a_second_click_is_refused_as_the_viewers_own_vote(
        world: World, operator: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    decide(operator, proposal)
    # A second tab still shows the buttons enabled: its post is refused.
    response = operator.post(f"{page_of(proposal)}decide/", {
        "decision": "grant", "digest": proposal.digest, "reason": ""})
    assert response.status_code == 409
    read = words(text(response))
    assert "You already approved this; a second operator must approve." in read
    assert "decided by someone else" not in read


def test_the_second_operator_sees_the_first_vote_and_completes_the_quorum(
        world: World, operator: Browser, other: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    decide(operator, proposal)

    body = text(other.get(page_of(proposal)))
    read = words(body)
    assert "1 of 2 approvals" in read
    assert " approver approved" in read and "you, approver approved" not in read
    assert "You approved this" not in read
    assert "disabled" not in button(body, "grant") + button(body, "deny")
    # Their approval is the last: the usual large-amount question, the permit it mints.
    assert "This mints a one-shot permit" in html.unescape(button(body, "grant"))

    response = decide(other, proposal)
    done = text(other.get(response["Location"]))
    permit = Permit.objects.get()
    assert f"Approved. Permit {permit.id} is bound" in done
    read = words(done)
    assert "2 of 2 approvals" in read
    assert "approver approved" in read and "you, approver2 approved" in read


def test_another_operator_may_still_deny_after_one_approval(
        world: World, operator: Browser, other: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    decide(operator, proposal)
    response = decide(other, proposal, "deny", "Not this supplier")
    assert "Denied. The action will not run." in text(other.get(response["Location"]))
    proposal.approval.refresh_from_db()
    assert proposal.approval.state == "denied"


def test_one_approver_approvals_show_no_count(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer("10.00")
    body = text(operator.get(page_of(proposal)))
    assert "approvals" not in words(body).replace("Approvals", "")
    assert 'id="votes"' not in body


def test_the_follow_fragment_of_a_partly_approved_action_says_it_is_not_running(
        world: World, operator: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    decide(operator, proposal)
    body = text(operator.get(f"{page_of(proposal)}follow/"))
    assert "Not running: it waits for 2 approvals, and nothing runs before the last one." in body
    assert "Dispatching" not in body
    assert 'data-settled="yes"' in body and "hx-trigger" not in body


def test_the_queue_counts_approvals_on_quorum_rows_at_a_bounded_cost(
        world: World, operator: Browser, other: Browser) -> None:
    small = world.propose_transfer("10.00")
    voted = world.propose_transfer(LARGE)
    decide(operator, voted)

    mine = text(operator.get("/console/"))
    assert re.search(r'badge-votes">1 of 2</span> <span class="muted">you approved',
                     row_of(mine, voted))
    assert "badge-votes" not in row_of(mine, small)
    theirs = row_of(text(other.get("/console/")), voted)
    assert 'badge-votes">1 of 2</span>' in theirs and "you approved" not in theirs

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator.get("/console/").status_code == 200
        return len(captured)

    one = queries()
    for _ in range(5):
        decide(other, world.propose_transfer(LARGE))
    # Six rows needing two approvals, some with votes in, cost what one did.
    assert text(operator.get("/console/")).count("badge-votes") == 6
    assert queries() == one


def test_the_decided_tab_lists_a_decision_never_a_vote(
        world: World, operator: Browser, other: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    decide(operator, proposal)
    pending = operator.get("/console/decided/")
    assert pending.status_code == 200
    assert f'id="d-{proposal.approval.id}"' not in text(pending)
    # The voter finds their approval among those waiting for others; nobody else does.
    waiting = re.search(rf'<li id="w-{proposal.approval.id}">(.*?)</li>', text(pending), re.S)
    assert waiting
    read = words(waiting.group(1))
    assert "payments.transfer" in read and "1 of 2 approvals" in read
    assert "you approved" in read and "a second operator must approve." in read
    assert 'id="waiting-votes"' not in text(other.get("/console/decided/"))

    decide(other, proposal)
    body = text(operator.get("/console/decided/"))
    assert 'id="waiting-votes"' not in body
    row = body[body.index(f'id="d-{proposal.approval.id}"'):]
    row = row[:row.index("</tr>")]
    assert "approver2" in row and "the last of 2 approvals" in row


def test_the_audit_page_reads_a_vote_in_words(
        world: World, operator: Browser, admin: Browser) -> None:
    proposal = world.propose_transfer(LARGE)
    decide(operator, proposal)
    event = AuditEvent.objects.get(kind="approval.voted")
    body = text(admin.get("/console/audit/"))
    item = re.search(rf'<li class="audit-event" id="e-{event.id}">(.*?)</li>', body, re.S)
    assert item
    read = words(item.group(1))
    assert "Approval vote recorded" in read
    assert "Approvals so far 1" in read and "Approvals needed 2" in read
