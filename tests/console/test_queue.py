"""The pending-approval queue: scoping, roles, filters, keyset pages, live fragment."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from dispatch.models import Principal
from dispatch.selectors.approvals import QueueFilter, _pending_approvals
from dispatch.selectors.paging import Count, count_capped
from dispatch.services.principals import human_create
from tests.conftest import World, make_world
from tests.console.conftest import Browser, text

pytestmark = pytest.mark.django_db

QUEUE = "/console/"
ROW_IDS = re.compile(r'id="q-(apr_[A-Za-z0-9]+)"')


def queue_ids(response: Any) -> list[str]:
    return ROW_IDS.findall(text(response))


def test_queue_shows_pending_approvals_of_own_tenant_newest_first(
    world: World, operator: Browser,
) -> None:
    first = world.propose_email(world.draft(subject="First"))
    world.now += timedelta(seconds=1)
    second = world.propose_transfer(amount="12.50")
    response = operator.get(QUEUE)
    assert response.status_code == 200
    assert queue_ids(response) == [second.approval.id, first.approval.id]
    body = text(response)
    assert "<strong>2</strong> pending" in body
    assert "First" in body  # the summary shows the subject
    assert "12.50" in body


def test_queue_never_shows_another_tenants_approvals(
    world: World, as_user: Any,
) -> None:
    ours = world.propose_email(world.draft())
    from dispatch.services.proposals import proposal_create
    from dispatch.services.resources import resource_create

    draft, _ = resource_create(principal=world.outsider, kind="email_draft", payload={
        "from": "ops@globex.example", "to": ["a@example.com"], "subject": "Globex",
        "body": "b"}, now=world.now)
    theirs = proposal_create(principal=world.outsider, operation="email.send",
                             arguments={"draft": {"id": draft.id, "revision": 1}},
                             now=world.now)
    assert queue_ids(as_user("approver", "approver-pw").get(QUEUE)) == [ours.approval.id]
    assert queue_ids(as_user("outsider-operator", "pw").get(QUEUE)) == [theirs.approval.id]
    # Another tenant's approval page answers like a forged id.
    operator = as_user("approver", "approver-pw")
    assert operator.get(f"/console/approvals/{theirs.approval.id}/").status_code == 404
    assert operator.get("/console/approvals/apr_forged/").status_code == 404


def test_lapsed_approval_awaiting_the_sweep_is_marked_expired(
    past_world: World, as_user: Any,
) -> None:
    proposal = past_world.propose_transfer()
    body = text(as_user("past-approver", "approver-pw").get(QUEUE))
    assert proposal.approval.id in body
    assert 'badge-expired">expired' in body


def test_anonymous_visitor_is_sent_to_login(client: Any) -> None:
    response = client.get(QUEUE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/console/")


def test_htmx_poll_without_session_redirects_the_whole_page(client: Any) -> None:
    response = client.get(QUEUE, headers={"HX-Request": "true"})
    assert response.status_code == 204
    assert response["HX-Redirect"] == "/accounts/login/"


def _user_for(principal: Principal, password: str = "pw") -> None:
    user = get_user_model().objects.create_user(username=principal.name, password=password)
    Principal.objects.filter(id=principal.id).update(user=user)


@pytest.mark.parametrize("url", [QUEUE, "/console/operations/unknown/", "/console/grants/",
                                 "/console/audit/"])
def test_agent_user_is_refused(world: World, as_user: Any, url: str) -> None:
    _user_for(world.owner)
    response = as_user("owner", "pw").get(url)
    assert response.status_code == 403
    assert "Not allowed" in text(response)


@pytest.mark.parametrize("url", [QUEUE, "/console/operations/unknown/", "/console/audit/"])
def test_human_without_role_is_refused(world: World, as_user: Any, url: str) -> None:
    human_create(name="viewer", tenant="acme", role="none", password="pw")
    response = as_user("viewer", "pw").get(url)
    assert response.status_code == 403
    assert "does not hold that role" in text(response)


def test_user_without_principal_is_refused(db: None, as_user: Any) -> None:
    get_user_model().objects.create_user(username="stray", password="pw")
    assert as_user("stray", "pw").get(QUEUE).status_code == 403


def test_role_refused_on_an_approval_page_too(world: World, as_user: Any) -> None:
    proposal = world.propose_transfer()
    human_create(name="viewer", tenant="acme", role="none", password="pw")
    viewer = as_user("viewer", "pw")
    assert viewer.get(f"/console/approvals/{proposal.approval.id}/").status_code == 403


def test_admin_sees_the_queue_and_the_admin_navigation(world: World, admin: Browser) -> None:
    proposal = world.propose_transfer()
    response = admin.get(QUEUE)
    assert queue_ids(response) == [proposal.approval.id]
    assert "Unknown outcomes" in text(response)


def test_operator_does_not_see_admin_navigation(world: World, operator: Browser) -> None:
    assert "Unknown outcomes" not in text(operator.get(QUEUE))


def test_filter_by_operation(world: World, operator: Browser) -> None:
    email = world.propose_email(world.draft())
    transfer = world.propose_transfer()
    assert queue_ids(operator.get(QUEUE + "?operation=email.send")) == [email.approval.id]
    assert queue_ids(operator.get(QUEUE + "?operation=payments.transfer")) == [
        transfer.approval.id]
    body = text(operator.get(QUEUE + "?operation=email.send"))
    assert "matching the filters, of 2 in your queue" in body


def test_filter_by_principal(world: World, operator: Browser) -> None:
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import agent_create
    from dispatch.services.proposals import proposal_create

    other, _ = agent_create(name="second-agent", tenant="acme", tools=["payments.transfer"])
    grant_issue(issuer="admin", subject=other, operations=["payments.transfer"],
                scope={"account": ["acct-002"]}, now=world.now - timedelta(minutes=1))
    theirs = proposal_create(principal=other, operation="payments.transfer", arguments={
        "from_account": "acct-002", "to_account": "acct-9", "amount": "1", "currency": "EUR"},
        now=world.now)
    ours = world.propose_transfer()
    assert queue_ids(operator.get(f"{QUEUE}?principal={other.id}")) == [theirs.approval.id]
    assert queue_ids(operator.get(f"{QUEUE}?principal={world.owner.id}")) == [ours.approval.id]


def test_filter_by_age(db: None, as_user: Any) -> None:
    world = make_world(timezone.now() - timedelta(minutes=40), prefix="aged-")
    old = world.propose_transfer(amount="1")
    world.now = timezone.now()
    new = world.propose_transfer(amount="2")
    operator = as_user("aged-approver", "approver-pw")
    assert queue_ids(operator.get(QUEUE + "?age=5m")) == [new.approval.id]
    assert queue_ids(operator.get(QUEUE + "?age=gt30m")) == [old.approval.id]
    assert queue_ids(operator.get(QUEUE + "?age=")) == [new.approval.id, old.approval.id]


def test_keyset_pages_cover_the_queue_once(world: World, operator: Browser) -> None:
    made = []
    for i in range(30):
        # Several share a timestamp: the id breaks ties, so no row is skipped or repeated.
        world.now += timedelta(seconds=i % 2)
        made.append(world.propose_transfer(amount=str(i + 1)).approval.id)
    first = operator.get(QUEUE)
    page_one = queue_ids(first)
    assert len(page_one) == 25
    older = re.search(r'href="([^"]+)" rel="next"', text(first))
    assert older
    second = operator.get(older.group(1).replace("&amp;", "&"))
    page_two = queue_ids(second)
    assert len(page_two) == 5
    assert set(page_one) | set(page_two) == set(made)
    assert not set(page_one) & set(page_two)
    assert 'rel="next"' not in text(second)
    newer = re.search(r'href="([^"]+)" rel="prev"', text(second))
    assert newer
    assert queue_ids(operator.get(newer.group(1).replace("&amp;", "&"))) == page_one


def test_a_bad_cursor_shows_the_first_page(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer()
    assert queue_ids(operator.get(QUEUE + "?after=%%%not-a-cursor")) == [proposal.approval.id]


def test_counts_are_capped(world: World) -> None:
    for i in range(7):
        world.propose_transfer(amount=str(i + 1))
    queryset = _pending_approvals(world.approver, QueueFilter())
    assert count_capped(queryset, cap=5) == Count(5, capped=True)
    assert count_capped(queryset, cap=10) == Count(7, capped=False)


def test_htmx_poll_gets_only_the_fragment(world: World, operator: Browser) -> None:
    proposal = world.propose_transfer()
    response = operator.get(QUEUE, headers={"HX-Request": "true"})
    body = text(response)
    assert response.status_code == 200
    assert "<html" not in body
    assert 'hx-trigger="every 5s"' in body
    assert proposal.approval.id in body
    assert "HX-Request" in response["Vary"]


def test_full_page_polls_the_fragment_with_its_filters(world: World, operator: Browser) -> None:
    body = text(operator.get(QUEUE + "?operation=email.send"))
    assert 'hx-get="/console/?operation=email.send"' in body
    assert "htmx-2.0.10.min.js" in body


def test_console_pages_carry_a_strict_csp(world: World, operator: Browser) -> None:
    policy = operator.get(QUEUE)["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy
