"""The console's history: the Decided tab, the operations list by state, the live follow of an
approved action, a late decision, and the queue by time left."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from console import operation_views, views
from dispatch.models import ApprovalRequest
from dispatch.selectors.approvals import approval_list_expiring
from dispatch.services.approvals import approval_decide, approval_expire
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.console.conftest import Browser, text
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

OLDER = re.compile(r'<a class="btn" href="([^"]+)" rel="next">')
NEWER = re.compile(r'<a class="btn" href="([^"]+)" rel="prev">')


def decide(world: World, proposal: Any, *, by: Any, outcome: str, minutes: int) -> None:
    approval_decide(approver=by, approval_id=proposal.approval.id, decision=outcome,
                    digest=proposal.digest, reason="no" if outcome == "deny" else "",
                    now=world.now + timedelta(minutes=minutes))


def ids_in(body: str, prefix: str) -> list[str]:
    return re.findall(rf'<tr id="{prefix}-([a-z]+_[A-Za-z0-9]+)"', body)


def link(pattern: re.Pattern[str], body: str) -> str:
    found = pattern.search(body)
    assert found, "no such page link"
    return html.unescape(found.group(1))


# --- Decided -------------------------------------------------------------------------------------


def test_the_decided_tab_lists_every_decision_of_the_tenant_newest_first(
    world: World, operator: Browser,
) -> None:
    mine = world.propose_transfer(amount="12.00", memo="rent")
    theirs = world.propose_transfer(amount="30.00")
    decide(world, mine, by=world.approver, outcome="grant", minutes=1)
    decide(world, theirs, by=world.admin, outcome="deny", minutes=2)
    elsewhere = world.propose_transfer()  # still pending: not decided, not listed

    response = operator.get("/console/decided/")
    body = text(response)
    assert response.status_code == 200
    assert ids_in(body, "d") == [theirs.approval.id, mine.approval.id]
    assert elsewhere.approval.id not in body
    assert "you, approver" in body and "admin" in body
    assert "Pay €12.00 from acct-001 to acct-999 — 'rent'" in html.unescape(body)
    assert "Pay €30.00 from acct-001 to acct-999" in html.unescape(body)
    assert body.count('badge-granted">granted') == 1
    assert body.count('badge-denied">denied') == 1
    assert f'href="/console/approvals/{mine.approval.id}/"' in body
    assert "not dispatched" in body  # granted, no operation yet
    assert "did not run" in body  # denied


def test_the_decided_tab_links_the_operation_and_its_state(
    world: World, operator: Browser,
) -> None:
    proposal = world.propose_email(world.draft())
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    body = text(operator.get("/console/decided/"))
    assert f'<a href="/console/operations/{operation.id}/"><span class="badge badge-claimed">' \
           in body


def test_the_decided_tab_shows_no_other_tenants_decision(
    world: World, as_user: Any,
) -> None:
    proposal = world.propose_transfer()
    decide(world, proposal, by=world.approver, outcome="grant", minutes=1)
    outsider = as_user("outsider-operator", "pw")
    body = text(outsider.get("/console/decided/"))
    assert proposal.approval.id not in body
    assert "No decisions yet." in body


def test_the_decided_tab_pages_by_keyset(
    world: World, operator: Browser, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(views, "DECIDED_PAGE", 2)
    proposals = [world.propose_transfer(amount=f"{n}.00") for n in range(1, 6)]
    for minute, proposal in enumerate(proposals):
        decide(world, proposal, by=world.approver, outcome="grant", minutes=minute)
    newest_first = [p.approval.id for p in reversed(proposals)]

    first = text(operator.get("/console/decided/"))
    assert ids_in(first, "d") == newest_first[:2]
    second = text(operator.get(link(OLDER, first)))
    assert ids_in(second, "d") == newest_first[2:4]
    third = text(operator.get(link(OLDER, second)))
    assert ids_in(third, "d") == newest_first[4:]
    assert not OLDER.search(third)
    back = text(operator.get(link(NEWER, third)))
    assert ids_in(back, "d") == newest_first[2:4]


def test_the_decided_tab_is_in_its_own_section(world: World, operator: Browser) -> None:
    body = text(operator.get("/console/decided/"))
    assert '<a href="/console/decided/" aria-current="page">Decided</a>' in body


# --- operations ----------------------------------------------------------------------------------


def claimed(world: World, *, minutes: int) -> Any:
    proposal, _ = world.approved_email()
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                             now=world.now + timedelta(minutes=minutes), enqueue=False)


def test_the_operations_list_filters_by_state(
    live: World, destinations: Destinations, operator: Browser,
) -> None:
    waiting = claimed(live, minutes=1)
    done = operation_execute(operation_id=claimed(live, minutes=2).id)
    assert done.state == "completed"

    every = text(operator.get("/console/operations/"))
    assert ids_in(every, "o") == [done.id, waiting.id]
    completed = text(operator.get("/console/operations/?state=completed"))
    assert ids_in(completed, "o") == [done.id]
    assert f'href="/console/approvals/{done.proposal.approval.id}/"' in completed
    assert ids_in(text(operator.get("/console/operations/?state=claimed")), "o") == [waiting.id]
    assert ids_in(text(operator.get("/console/operations/?state=unknown")), "o") == []
    # A state that does not exist filters nothing out.
    assert ids_in(text(operator.get("/console/operations/?state=bogus")), "o") == [
        done.id, waiting.id]


def test_the_operations_list_pages_newest_first(
    world: World, operator: Browser, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(operation_views, "OPERATIONS_PAGE", 2)
    operations = [claimed(world, minutes=n) for n in range(3)]
    newest_first = [op.id for op in reversed(operations)]
    first = text(operator.get("/console/operations/?state=claimed"))
    assert ids_in(first, "o") == newest_first[:2]
    older = link(OLDER, first)
    assert "state=claimed" in older  # the filter stays on every page
    second = text(operator.get(older))
    assert ids_in(second, "o") == newest_first[2:]
    assert not OLDER.search(second)


def test_the_operations_list_is_for_the_tenant_only(world: World, as_user: Any) -> None:
    operation = claimed(world, minutes=0)
    outsider = as_user("outsider-operator", "pw")
    assert operation.id not in text(outsider.get("/console/operations/"))


def test_the_operations_list_is_for_operators_and_admins(
    world: World, client: Any, admin: Browser,
) -> None:
    operation = claimed(world, minutes=0)
    assert operation.id in text(admin.get("/console/operations/"))
    assert client.get("/console/operations/").status_code == 302  # to the login


# --- following an approved action ----------------------------------------------------------------


def follow(operator: Browser, proposal: Any) -> str:
    response = operator.get(f"/console/approvals/{proposal.approval.id}/follow/",
                            HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return text(response)


def test_a_granted_approval_not_dispatched_on_approval_says_who_dispatches_by_when(
    world: World, operator: Browser,
) -> None:
    proposal = world.propose_email(world.draft())
    permit = world.grant(proposal)
    body = text(operator.get(f"/console/approvals/{proposal.approval.id}/"))
    # The deadline in UTC, which the reader's browser puts beside their own zone.
    assert re.search(r"<strong>owner</strong> must dispatch it by <span class=\"when\"><time "
                     rf'datetime="[^"]+" data-local-time>{permit.expires_at:%Y-%m-%d %H:%M:%S} '
                     r"UTC</time></span>", body)
    assert 'hx-get="/console/approvals/' in body  # it follows until a claim


def test_the_follow_fragment_polls_until_the_operation_settles(
    live: World, destinations: Destinations, operator: Browser,
) -> None:
    proposal, _ = live.approved_email()
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=live.now, enqueue=False)
    running = follow(operator, proposal)
    assert 'badge-claimed' in running
    assert 'hx-trigger="every 2s"' in running
    assert 'data-settled="no"' in running

    operation_execute(operation_id=operation.id)
    settled = follow(operator, proposal)
    assert 'badge-completed' in settled
    assert "hx-get" not in settled
    assert 'data-settled="yes"' in settled


def test_a_denied_approval_has_nothing_to_follow(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer()
    decide(world, proposal, by=world.admin, outcome="deny", minutes=0)
    body = text(operator.get(f"/console/approvals/{proposal.approval.id}/"))
    assert 'id="follow"' not in body


def test_the_follow_fragment_is_not_found_for_another_tenant(
    world: World, as_user: Any,
) -> None:
    proposal, _ = world.approved_email()
    outsider = as_user("outsider-operator", "pw")
    response = outsider.get(f"/console/approvals/{proposal.approval.id}/follow/")
    assert response.status_code == 404


# --- expiry --------------------------------------------------------------------------------------


def test_a_decision_after_the_expiry_sweep_answers_expired_not_decided(
    world: World, operator: Browser,
) -> None:
    proposal = world.propose_transfer(approval_expires_in=60)
    operator.get(f"/console/approvals/{proposal.approval.id}/")
    assert approval_expire(approval_id=proposal.approval.id,
                           now=world.now + timedelta(seconds=61))
    response = operator.post(f"/console/approvals/{proposal.approval.id}/decide/",
                             {"digest": proposal.digest, "decision": "grant"})
    body = text(response)
    assert response.status_code == 403
    assert "The approval window has passed." in body
    assert "approval_expired" in body
    assert "decided by someone else" not in body
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "expired"


def test_the_decision_form_carries_its_closing_time(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer()
    body = text(operator.get(f"/console/approvals/{proposal.approval.id}/"))
    expires = proposal.approval.expires_at
    assert f'data-closes-at="{expires.isoformat()}"' in body


def test_the_queue_marks_only_what_expires_within_five_minutes(
    world: World, operator: Browser,
) -> None:
    soon = world.propose_transfer(amount="1.00", approval_expires_in=240)
    later = world.propose_transfer(amount="2.00", approval_expires_in=420)
    body = text(operator.get("/console/"))
    rows = {m.group(1): m.group(0)
            for m in re.finditer(r'id="q-(apr_\w+)".*?</tr>', body, flags=re.S)}
    assert "badge-expiring" in rows[soon.approval.id]
    assert "badge-expiring" not in rows[later.approval.id]


def test_the_queue_sorts_by_time_left(world: World, operator: Browser) -> None:
    # World time is fixed; the queue measures time left from the real clock.
    assert abs((timezone.now() - world.now).total_seconds()) < 60
    late = world.propose_transfer(amount="1.00", approval_expires_in=3000)
    early = world.propose_transfer(amount="2.00", approval_expires_in=600)
    middle = world.propose_transfer(amount="3.00", approval_expires_in=1200)
    newest = re.findall(r'id="q-(apr_\w+)"', text(operator.get("/console/")))
    assert sorted(newest) == sorted([middle.approval.id, early.approval.id, late.approval.id])
    by_time_left = text(operator.get("/console/?sort=expiring"))
    assert re.findall(r'id="q-(apr_\w+)"', by_time_left) == [
        early.approval.id, middle.approval.id, late.approval.id]
    assert 'aria-current="true">time left' in by_time_left


def test_the_queue_by_time_left_pages_on(
    world: World,
) -> None:

    approvals = [world.propose_transfer(amount=f"{n + 1}.00", approval_expires_in=600 + 60 * n)
                 for n in range(3)]
    page = approval_list_expiring(viewer=world.approver, limit=2)
    assert [a.id for a in page.rows] == [p.approval.id for p in approvals[:2]]
    rest = approval_list_expiring(viewer=world.approver, limit=2, after=page.older)
    assert [a.id for a in rest.rows] == [approvals[2].approval.id]
    assert rest.older is None
    back = approval_list_expiring(viewer=world.approver, limit=2, before=rest.newer)
    assert [a.id for a in back.rows] == [p.approval.id for p in approvals[:2]]
