"""The approvals list (docs/rest-api.md#admin, docs/design.md#approval-policies): operators and
admins read the approvals they may decide, of their own tenant only, oldest first and paged;
each with the sentence the console shows, its quorum and its votes; one approval adds the
canonical snapshot, so that an approver outside the console can decide on the exact bytes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dispatch.models import ApprovalRequest
from tests.api.conftest import Caller, assert_error
from tests.conftest import World
from tests.support.caps import deploy

pytestmark = pytest.mark.django_db

ITEM_KEYS = {"id", "state", "proposal_id", "operation", "summary", "digest", "requested_by",
             "expires_at", "quorum", "votes"}


def pages(who: Caller, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of the list, following `next`."""
    found = []
    page = who.get("approvals/", **params)
    assert page.status_code == 200, page.content
    body = page.json()
    while True:
        assert set(body) == {"results", "next", "previous"}
        found.append(body["results"])
        if not body["next"]:
            return found
        body = who.client.get(body["next"], HTTP_AUTHORIZATION=f"Bearer {who.token}").json()


def test_pending_approvals_oldest_first_in_pages(caller: Any, world: World) -> None:
    made = []
    for n in range(5):
        world.now += timedelta(seconds=1)
        made.append(world.propose_email(world.draft(subject=f"Refund {n}")))
    listed = pages(caller("approver"), state="pending", page_size=2)
    assert [len(page) for page in listed] == [2, 2, 1]
    items = [item for page in listed for item in page]
    assert [item["id"] for item in items] == [p.approval.id for p in made]  # oldest first
    first = items[0]
    assert set(first) == ITEM_KEYS
    proposal = made[0]
    assert first == {
        "id": proposal.approval.id, "state": "pending", "proposal_id": proposal.id,
        "operation": "email.send", "digest": proposal.digest, "requested_by": "owner",
        "expires_at": first["expires_at"], "quorum": 1, "votes": [],
        "summary": first["summary"],
    }
    # The sentence of the console and of the webhooks (the demo's summary of an email).
    assert "Refund 0" in first["summary"]
    assert "customer@example.com" in first["summary"]
    # Without `state`, the list is the pending one.
    assert [item["id"] for page in pages(caller("admin")) for item in page] == [
        p.approval.id for p in made]


def test_decided_and_lapsed_approvals_leave_the_pending_list(caller: Any, world: World) -> None:
    granted, _ = world.approved_email(subject="Granted")
    lapsed = world.propose_email(world.draft(subject="Lapsed"))
    ApprovalRequest.objects.filter(id=lapsed.approval.id).update(
        expires_at=world.now - timedelta(seconds=1))
    waiting = world.propose_email(world.draft(subject="Waiting"))
    approver = caller("approver")
    assert [i["id"] for i in approver.get("approvals/").json()["results"]] == [
        waiting.approval.id]
    assert [i["id"] for i in approver.get("approvals/", state="granted").json()["results"]] == [
        granted.approval.id]
    expired = approver.get("approvals/", state="expired").json()["results"]
    assert [(i["id"], i["state"]) for i in expired] == [(lapsed.approval.id, "expired")]
    assert_error(approver.get("approvals/", state="open"), 400, "malformed_request")


def test_quorum_and_votes_follow_the_four_eyes_rules(
    caller: Any, world: World, settings: Any, fresh_runtime: None,
) -> None:
    from dispatch.services.principals import human_create

    deploy(settings, [{"operation": "payments.transfer", "quorum": 2, "when": {
        "amount": {"gte": "10000.00"}, "currency": {"eq": "EUR"}}}])
    large = world.propose_transfer(amount="25000.00")
    world.grant(large)
    human_create(name="second", tenant="acme", role="operator", password="pw")
    [item] = caller("admin").get("approvals/").json()["results"]
    assert (item["id"], item["quorum"]) == (large.approval.id, 2)
    assert [vote["by"] for vote in item["votes"]] == ["approver"]
    assert set(item["votes"][0]) == {"by", "at"}
    deploy(settings, [])


def test_one_approval_with_its_canonical_snapshot(caller: Any, world: World) -> None:
    proposal = world.propose_email(world.draft())
    response = caller("approver").get(f"approvals/{proposal.approval.id}/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == ITEM_KEYS | {"canonical"}
    assert body["canonical"] == proposal.canonical
    assert body["digest"] == proposal.digest
    [listed] = caller("approver").get("approvals/").json()["results"]
    assert {k: v for k, v in body.items() if k != "canonical"} == listed


def test_an_approver_outside_the_console_decides_from_the_list(
    caller: Any, world: World,
) -> None:
    proposal = world.propose_email(world.draft())
    approver = caller("approver")
    [item] = approver.get("approvals/").json()["results"]
    decided = approver.post(f"approvals/{item['id']}/decision/",
                            {"decision": "grant", "digest": item["digest"]})
    assert decided.status_code == 200, decided.content
    assert decided.json()["approval"]["state"] == "granted"
    assert approver.get("approvals/").json()["results"] == []
    assert proposal.approval.id == item["id"]


@pytest.mark.parametrize("who", ["owner", "outsider"])
def test_agents_cannot_list_or_read_approvals(caller: Any, world: World, who: str) -> None:
    proposal = world.propose_email(world.draft())
    assert assert_error(caller(who).get("approvals/"), 403, "role_required") == {
        "role": "operator"}
    assert_error(caller(who).get(f"approvals/{proposal.approval.id}/"), 403, "role_required")


@pytest.mark.parametrize("who", ["outsider_operator", "outsider_admin"])
def test_another_tenants_approvals_are_never_listed_and_are_not_found(
    caller: Any, world: World, who: str,
) -> None:
    proposal = world.propose_email(world.draft())
    outsider: Caller = caller(who)
    for state in ("pending", "granted", "denied", "expired", "revoked"):
        assert outsider.get("approvals/", state=state).json()["results"] == []
    real = outsider.get(f"approvals/{proposal.approval.id}/")
    forged = outsider.get(f"approvals/apr_{'Q' * 22}/")
    assert assert_error(real, 404, "not_found") == {"kind": "approval",
                                                    "id": proposal.approval.id}
    assert assert_error(forged, 404, "not_found")["kind"] == "approval"
    assert real.json()["error"]["message"] == forged.json()["error"]["message"]
    # ...while the tenant's own operator does see it.
    assert caller("approver").get(f"approvals/{proposal.approval.id}/").status_code == 200


def test_anonymous_and_bad_paging_are_refused(caller: Any, world: World) -> None:
    assert_error(caller(None).get("approvals/"), 401, "unauthenticated")
    assert_error(caller(None).get("approvals/apr_x/"), 401, "unauthenticated")
    approver = caller("approver")
    assert_error(approver.get("approvals/", cursor="bm9wZQ"), 400, "malformed_request")
    assert_error(approver.get("approvals/", page_size="0"), 400, "malformed_request")


def test_an_operator_lists_only_the_roles_it_holds(caller: Any, world: World) -> None:
    proposal = world.propose_email(world.draft())
    ApprovalRequest.objects.filter(id=proposal.approval.id).update(role="admin")
    assert caller("approver").get("approvals/").json()["results"] == []
    assert_error(caller("approver").get(f"approvals/{proposal.approval.id}/"), 404, "not_found")
    assert [i["id"] for i in caller("admin").get("approvals/").json()["results"]] == [
        proposal.approval.id]
