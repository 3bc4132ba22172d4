"""Changes flagged (docs/design.md#changes): a proposal of a revised draft shows what changed
since the earlier proposal, an added recipient first among equals; the earlier, stale proposal
says so in the queue and offers only Deny, with the reason, on its page."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch.models import ApprovalRequest, Permit
from dispatch.services.resources import revision_create
from tests.conftest import MAILBOX, World
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

EXFIL = "exfil@evil.example"


def revise(world: World, draft: Any, **changes: Any) -> Any:
    payload = {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
               "body": "We have refunded your order.", **changes}
    revision_create(principal=world.owner, resource_id=draft.id,
                    base_revision=draft.current_revision, payload=payload, now=world.now)
    draft.refresh_from_db()
    return draft


def revised_pair(world: World) -> tuple[Any, Any]:
    """A proposal of a draft, then the draft revised with a cc and proposed again."""
    draft = world.draft()
    earlier = world.propose_email(draft)
    later = world.propose_email(revise(world, draft, cc=[EXFIL]))
    return earlier, later


def row_of(body: str, proposal: Any) -> str:
    """The queue's table row of `proposal`'s approval."""
    start = body.index(f'id="q-{proposal.approval.id}"')
    return body[body.rindex("<tr", 0, start):body.index("</tr>", start)]


def test_the_queue_flags_the_revision_and_the_stale_proposal(
        world: World, operator: Browser) -> None:
    earlier, later = revised_pair(world)
    unrelated = world.propose_email(world.draft())
    body = text(operator.get("/console/"))

    revised = row_of(body, later)
    assert 'badge-changed' in revised
    assert "badge-stale" not in revised
    assert f"since revision 1 (proposal {earlier.id})" in revised
    assert re.search(r'<li class="change change-added change-recipient">'
                     r'<strong class="recipient-flag">new recipient</strong> '
                     rf'<span class="mono">cc: \+ {re.escape(EXFIL)}</span></li>', revised)
    # Nothing but the cc: the digest and the revision number are bookkeeping.
    assert revised.count('<li class="change') == 1

    stale = row_of(body, earlier)
    assert 'class="row-stale"' in stale
    assert "badge-stale" in stale
    assert "in revision 2 (now current, not this proposal)" in stale
    assert f"cc: + {EXFIL}" in stale
    # What revision 2 adds is not in this proposal: listed, never its "new recipient".
    assert "change-recipient" not in stale and "new recipient" not in stale

    assert "badge-changed" not in row_of(body, unrelated)
    assert "badge-stale" not in row_of(body, unrelated)


def test_the_stale_proposal_offers_only_deny_with_the_reason(
        world: World, operator: Browser) -> None:
    earlier, later = revised_pair(world)
    body = text(operator.get(f"/console/approvals/{earlier.approval.id}/"))
    assert 'name="decision" value="deny"' in body
    assert 'name="decision" value="grant"' not in body
    assert "Only Deny is offered: this proposal is stale." in body
    assert (f"email_draft {earlier.resource_refs[0]['id']} was edited after this proposal: "
            "it is bound to revision 1, and revision 2 is now current") in body
    assert f'href="/console/approvals/{later.approval.id}/"' in body
    # Deny still works, with its reason.
    response = operator.post(f"/console/approvals/{earlier.approval.id}/decide/", {
        "digest": earlier.digest, "decision": "deny", "reason": "superseded by revision 2"})
    assert response.status_code == 302
    assert ApprovalRequest.objects.get(id=earlier.approval.id).state == "denied"


def test_a_stale_approval_posted_anyway_is_refused(world: World, operator: Browser) -> None:
    earlier, _ = revised_pair(world)
    operator.get(f"/console/approvals/{earlier.approval.id}/")
    response = operator.post(f"/console/approvals/{earlier.approval.id}/decide/", {
        "digest": earlier.digest, "decision": "grant", "reason": ""})
    assert response.status_code == 409
    assert "stale_revision" in text(response)
    assert not Permit.objects.filter(proposal_id=earlier.id).exists()


def test_the_revision_page_shows_the_changed_badge_and_can_be_approved(
        world: World, operator: Browser) -> None:
    _, later = revised_pair(world)
    body = text(operator.get(f"/console/approvals/{later.approval.id}/"))
    head = body[body.index('class="page-head"'):body.index('class="detail-grid"')]
    assert "badge-changed" in head
    assert f"cc: + {EXFIL}" in head
    assert "new recipient" in head
    assert 'name="decision" value="grant"' in body
    assert "Only Deny is offered" not in body


def test_a_row_lists_every_new_recipient_and_a_few_other_changes(
        world: World, operator: Browser) -> None:
    draft = world.draft(to=[f"{name}@example.com" for name in "abcd"])
    earlier = world.propose_email(draft)
    later = world.propose_email(revise(world, draft, to=["x@example.com"], cc=[EXFIL],
                                       subject="New subject", body="New body."))
    row = row_of(text(operator.get("/console/")), later)
    # 2 recipients added; 4 removed, subject and body changed: 6 others, of which 4 listed.
    assert row.count("change-recipient") == 2
    assert "to: + x@example.com" in row and f"cc: + {EXFIL}" in row
    assert row.count('<li class="change') == 7
    assert "and 2 more on its page" in row
    page = text(operator.get(f"/console/approvals/{later.approval.id}/"))
    head = page[page.index('class="page-head"'):page.index('class="detail-grid"')]
    assert head.count('<li class="change') == 8
    assert 'title="was: Your refund"' in head  # the old value of a changed leaf
    assert f'href="/console/approvals/{earlier.approval.id}/">its approval</a>' in head


def test_a_first_proposal_has_no_flag(world: World, operator: Browser) -> None:
    proposal = world.propose_email(world.draft())
    body = text(operator.get(f"/console/approvals/{proposal.approval.id}/"))
    assert "badge-changed" not in body
    assert "badge-stale" not in body
    assert 'name="decision" value="grant"' in body


def test_a_revision_proposed_without_an_earlier_proposal_has_no_flag(
        world: World, operator: Browser) -> None:
    """Only a proposal revises a proposal: a draft edited before its first proposal is new."""
    proposal = world.propose_email(revise(world, world.draft(), cc=[EXFIL]))
    body = text(operator.get("/console/"))
    assert "badge-changed" not in row_of(body, proposal)


def test_the_flags_cost_the_same_few_queries_for_any_number_of_rows(
        world: World, operator: Browser) -> None:
    revised_pair(world)
    operator.get("/console/")
    with CaptureQueriesContext(connection) as one:
        operator.get("/console/")
    for _ in range(4):
        revised_pair(world)
    with CaptureQueriesContext(connection) as five:
        body = text(operator.get("/console/"))
    assert body.count("badge-stale") == 5
    assert len(five) == len(one), [q["sql"] for q in five.captured_queries]


def test_changes_keep_the_argument_name_unless_one_resource_is_all_that_changed() -> None:
    from console.changes import change_view
    from dispatch.selectors.changes import Earlier, Lineage

    def snapshot(cc: list[str], note: str, *, second: bool = False) -> str:
        arguments: dict[str, Any] = {"draft": {"id": "res_d", "revision": 1 + len(cc),
                                               "digest": "sha256:d", "payload": {"cc": cc}},
                                     "note": note}
        if second:
            arguments["attachment"] = {"id": "res_a", "revision": 1, "digest": "sha256:a",
                                       "payload": {"name": "a.pdf"}}
        return json.dumps({"arguments": arguments})

    def labels(old: str, new: str) -> list[str]:
        earlier = Earlier(proposal_id="prp_1", approval_id="apr_1", resource_id="res_d",
                          revision=1, canonical=old)
        view = change_view(SimpleNamespace(canonical=new),  # type: ignore[arg-type]
                           Lineage(earlier=earlier))
        assert view is not None and not view.stale
        return [change.label for change in view.changes]

    assert labels(snapshot([], "a"), snapshot([EXFIL], "a")) == [f"cc: + {EXFIL}"]
    assert labels(snapshot([], "a"), snapshot([EXFIL], "b")) == [
        f"draft.cc: + {EXFIL}", "note changed"]
    assert labels(snapshot([], "a", second=True), snapshot([EXFIL], "a", second=True)) == [
        f"draft.cc: + {EXFIL}"]
