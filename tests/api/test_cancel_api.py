"""Cancellation over REST (docs/rest-api.md#calls): `POST operations/{id}/cancel/` and the
proposal's `POST proposals/{id}/cancel/`, by the agent that proposed, an operator or an admin of the
tenant; each answers what GET would, and every cancellation is audited with its actor."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client

from demo.destinations.runner import list_all
from dispatch.models import AuditEvent, Permit
from dispatch.services.principals import agent_create, human_create
from dispatch.services.worker import operation_execute
from tests.api.conftest import API, Caller, assert_error, schema_errors
from tests.api.test_calls import create_draft, propose_email
from tests.conftest import ALL_TOOLS, World
from tests.db.test_cancellation import waiting_for_attempt_two
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def cancelled_by(proposal_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.actor, e.details) for e in AuditEvent.objects.filter(
        kind="proposal.cancelled", proposal_id=proposal_id).order_by("id")]


def granted(owner: Caller, caller: Callable[[str | None], Caller]) -> dict[str, Any]:
    proposal = propose_email(owner, create_draft(owner))
    decision = caller("approver").post(f"approvals/{proposal['approval']['id']}/decision/",
                                       {"decision": "grant", "digest": proposal["digest"]})
    assert decision.status_code == 200, decision.content
    return proposal


def claimed(owner: Caller, caller: Callable[[str | None], Caller]) -> dict[str, Any]:
    """An approved email dispatched by its agent; its task never runs here (no eager
    worker): claimed, before attempt 1."""
    proposal = granted(owner, caller)
    response = owner.post(f"proposals/{proposal['id']}/dispatch/", {})
    assert response.status_code == 202, response.content
    return dict(owner.get(f"operations/{response.json()['operation_id']}/").json())


def test_the_agent_withdraws_its_proposal_before_the_claim(
    owner: Caller, caller: Callable[[str | None], Caller],
) -> None:
    proposal = granted(owner, caller)
    response = owner.post(f"proposals/{proposal['id']}/cancel/",
                          {"reason": "the customer already called"})
    assert response.status_code == 200, response.content
    assert response.json() == owner.get(f"proposals/{proposal['id']}/").json()
    assert response.json()["approval"]["state"] == "revoked"
    assert response.json()["operation_id"] is None
    assert_error(owner.post(f"proposals/{proposal['id']}/dispatch/", {}), 409,
                 "protocol_state_invalid")
    assert cancelled_by(proposal["id"]) == [("owner", {
        "before_claim": True, "reason": "the customer already called"})]


def test_deciding_an_approval_the_cancellation_withdrew_is_approval_revoked(
    owner: Caller, caller: Callable[[str | None], Caller],
) -> None:
    proposal = propose_email(owner, create_draft(owner))
    assert owner.post(f"proposals/{proposal['id']}/cancel/", {}).status_code == 200
    for decision in ("grant", "deny"):
        assert_error(caller("approver").post(
            f"approvals/{proposal['approval']['id']}/decision/",
            {"decision": decision, "digest": proposal["digest"]}), 403, "approval_revoked")
    # An approval decided before the cancellation was decided: a second decision is that.
    decided = granted(owner, caller)
    assert owner.post(f"proposals/{decided['id']}/cancel/", {}).status_code == 200
    assert_error(caller("approver").post(
        f"approvals/{decided['approval']['id']}/decision/",
        {"decision": "grant", "digest": decided["digest"]}), 409, "approval_decided")


def test_cancel_of_a_claimed_operation_before_attempt_one(
    owner: Caller, caller: Callable[[str | None], Caller],
) -> None:
    operation = claimed(owner, caller)
    assert operation["state"] == "claimed"
    response = caller("approver").post(f"operations/{operation['id']}/cancel/", {})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body == owner.get(f"operations/{operation['id']}/").json()
    assert (body["state"], body["attempts"]) == ("failed_no_effect", [])
    proposal = owner.get(f"proposals/{operation['proposal_id']}/").json()
    assert proposal["operation_state"] == "failed_no_effect"
    assert Permit.objects.get(id=proposal["approval"]["permit_id"]).state == "claimed"
    ((actor, details),) = cancelled_by(operation["proposal_id"])
    assert (actor, details["outcome"], details["attempt"]) == ("approver", "failed_no_effect", 0)


def test_cancel_between_attempts_over_the_api(
    live: World, destinations: Destinations, caller: Callable[[str | None], Caller],
) -> None:
    operation = waiting_for_attempt_two(live)
    response = caller("owner").post(f"operations/{operation.id}/cancel/", {"reason": "stop"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "failed_no_effect"
    assert [a["number"] for a in body["attempts"]] == [1]
    assert list_all(destinations.directory)["bank"] == []


def test_the_proposals_cancel_after_the_claim_cancels_the_operation(
    owner: Caller, caller: Callable[[str | None], Caller],
) -> None:
    operation = claimed(owner, caller)
    response = caller("admin").post(f"proposals/{operation['proposal_id']}/cancel/", {})
    assert response.status_code == 200, response.content
    assert response.json()["operation_state"] == "failed_no_effect"
    assert response.json() == owner.get(f"proposals/{operation['proposal_id']}/").json()


def test_a_repeated_or_late_cancellation_is_a_conflict_naming_the_state(
    owner: Caller, caller: Callable[[str | None], Caller],
) -> None:
    operation = claimed(owner, caller)
    path = f"operations/{operation['id']}/cancel/"
    assert owner.post(path, {}).status_code == 200
    for again in (owner.post(path, {}),
                  owner.post(f"proposals/{operation['proposal_id']}/cancel/", {})):
        details = assert_error(again, 409, "protocol_state_invalid")
        assert "already cancelled" in again.json()["error"]["message"]
        assert details == {"state": "failed_no_effect"}
    assert len(cancelled_by(operation["proposal_id"])) == 1

    lookup = owner.post("proposals/", {"operation": "crm.lookup",
                                       "arguments": {"customer_id": "cus-001"}}).json()
    settled = owner.post(f"proposals/{lookup['id']}/dispatch/", {}).json()
    operation_execute(operation_id=settled["operation_id"])
    refused = owner.post(f"operations/{settled['operation_id']}/cancel/", {})
    assert_error(refused, 409, "protocol_state_invalid")
    assert "already 'completed'" in refused.json()["error"]["message"]


@pytest.mark.parametrize("kind", ["operation", "proposal"])
def test_who_may_cancel(
    owner: Caller, caller: Callable[[str | None], Caller], world: World, kind: str,
) -> None:
    """The proposing agent, operators and admins of the tenant; another agent or a human
    without a role: `role_required`; another tenant: `not_found`, as a forged id."""
    _, other_agent = agent_create(name="other-agent", tenant="acme", tools=ALL_TOOLS)
    _, roleless = human_create(name="viewer", tenant="acme", role="", password="pw")
    operation = claimed(owner, caller)
    target = operation["id"] if kind == "operation" else operation["proposal_id"]
    for who, status, code in ((None, 401, "unauthenticated"),
                              ("outsider", 404, "not_found"),
                              ("outsider_operator", 404, "not_found"),
                              ("outsider_admin", 404, "not_found")):
        assert_error(caller(who).post(f"{kind}s/{target}/cancel/", {}), status, code)
    for token in (other_agent, roleless):
        assert_error(Caller(Client(), token).post(f"{kind}s/{target}/cancel/", {}), 403,
                     "role_required")
    assert owner.get(f"operations/{operation['id']}/").json()["state"] == "claimed"
    assert cancelled_by(operation["proposal_id"]) == []
    for who in ("owner", "approver", "admin"):
        operation = claimed(owner, caller)
        target = operation["id"] if kind == "operation" else operation["proposal_id"]
        response = caller(who).post(f"{kind}s/{target}/cancel/", {})
        assert response.status_code == 200, (who, response.content)
        assert [actor for actor, _ in cancelled_by(operation["proposal_id"])] == [
            world.owner.name if who == "owner" else getattr(world, who).name]


@pytest.mark.parametrize("kind", ["operations", "proposals"])
def test_forged_ids_and_bad_bodies(owner: Caller, caller: Any, kind: str) -> None:
    admin = caller("admin")
    for forged in ("op_missing", "prp_missing", "x" * 41, "a-b"):
        assert_error(admin.post(f"{kind}/{forged}/cancel/", {}), 404, "not_found")
    operation = claimed(owner, caller)
    path = f"{kind}/{operation['id'] if kind == 'operations' else operation['proposal_id']}/"
    path += "cancel/"
    assert [e["pointer"] for e in schema_errors(owner.post(path, {"reason": 5}))] == ["/reason"]
    assert [e["pointer"] for e in schema_errors(
        owner.post(path, {"reason": "x" * 1001}))] == ["/reason"]
    assert [e["pointer"] for e in schema_errors(owner.post(path, {"why": "x"}))] == ["/why"]
    assert_error(owner.post(path, raw=b""), 400, "malformed_request")
    assert_error(owner.post(path, raw=b'{"reason": "a", "reason": "b"}'), 400,
                 "malformed_request")
    assert_error(owner.post(path, raw=b"[]"), 422, "schema_invalid")
    assert owner.get(f"operations/{operation['id']}/").json()["state"] == "claimed"
    assert owner.post(path, {"reason": "x" * 1000}).status_code == 200


def test_a_session_cancel_needs_csrf(
    owner: Caller, caller: Callable[[str | None], Caller], world: World,
) -> None:
    operation = claimed(owner, caller)
    path = API + f"operations/{operation['id']}/cancel/"
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.approver.user)
    assert_error(client.post(path, json.dumps({}), content_type="application/json"), 401,
                 "unauthenticated")
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    response = client.post(path, json.dumps({"reason": "wrong customer"}),
                           content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "failed_no_effect"
