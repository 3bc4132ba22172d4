"""Another tenant sees nothing: every call by id answers `not_found`, exactly as for a forged
id, and lists hold nothing of the other tenant (docs/design.md#denials, STYLE "missing and
forbidden")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dispatch.models import ApprovalRequest, Grant, Operation, Permit
from dispatch.services.dispatcher import proposal_dispatch
from tests.api.conftest import Caller, assert_error, draft_payload
from tests.conftest import MAILBOX, World

pytestmark = pytest.mark.django_db

OUTSIDERS = ["outsider", "outsider_operator", "outsider_admin"]


@dataclass
class Targets:
    """Ids of the first tenant's objects, one of each kind."""

    resource: str
    proposal: str
    pending_approval: str
    digest: str
    operation: str
    grant: str


@pytest.fixture
def targets(world: World) -> Targets:
    pending = world.propose_email(world.draft())
    approved, _ = world.approved_email(subject="Approved")
    operation = proposal_dispatch(principal=world.owner, proposal_id=approved.id,
                                  now=world.now, enqueue=False)
    grant = Grant.objects.get(subject=world.owner, operations=["email.send"])
    return Targets(resource=world.draft(subject="Edit me").id, proposal=approved.id,
                   pending_approval=pending.approval.id, digest=pending.digest,
                   operation=operation.id, grant=grant.id)


# (kind of the id, method, path with {id}, body)
BY_ID: dict[str, tuple[str, str, str, Any]] = {
    "resource-detail": ("resource", "GET", "resources/{id}/", None),
    "revision-create": ("resource", "POST", "resources/{id}/revisions/",
                        {"base_revision": 1, "payload": draft_payload()}),
    "proposal-detail": ("proposal", "GET", "proposals/{id}/", None),
    "proposal-dispatch": ("proposal", "POST", "proposals/{id}/dispatch/", {}),
    "approval-decide": ("approval", "POST", "approvals/{id}/decision/",
                        {"decision": "grant", "digest": "{digest}"}),
    "operation-detail": ("operation", "GET", "operations/{id}/", None),
    "operation-resolve": ("operation", "POST", "operations/{id}/resolve/",
                          {"outcome": "completed", "evidence": "seen at the destination"}),
    "grant-delegate": ("grant", "POST", "grants/{id}/delegate/",
                       {"subject": "outsider", "operations": ["email.send"],
                        "scope": {"mailbox": ["ops@globex.example"]}}),
}

TARGET_OF = {"resource": "resource", "proposal": "proposal", "approval": "pending_approval",
             "operation": "operation", "grant": "grant"}
PREFIX = {"resource": "res", "proposal": "prp", "approval": "apr", "operation": "op",
          "grant": "grt"}


def _body(body: Any, targets: Targets) -> Any:
    if isinstance(body, dict) and body.get("digest") == "{digest}":
        return {**body, "digest": targets.digest}
    return body


@pytest.mark.parametrize("who", OUTSIDERS)
@pytest.mark.parametrize("call", list(BY_ID))
def test_other_tenants_ids_answer_like_forged_ones(
    caller: Any, targets: Targets, who: str, call: str,
) -> None:
    kind, method, path, body = BY_ID[call]
    outsider: Caller = caller(who)
    real = getattr(targets, TARGET_OF[kind])
    forged = f"{PREFIX[kind]}_{'Q' * 22}"

    seen = outsider.call(method, path.format(id=real), _body(body, targets))
    made_up = outsider.call(method, path.format(id=forged), _body(body, targets))

    assert assert_error(seen, 404, "not_found") == {"kind": kind, "id": real}
    assert assert_error(made_up, 404, "not_found") == {"kind": kind, "id": forged}
    assert seen.json()["error"]["message"] == made_up.json()["error"]["message"]
    assert seen.headers.keys() == made_up.headers.keys()


def test_nothing_moved_after_the_outsiders_tried(caller: Any, targets: Targets) -> None:
    for who in OUTSIDERS:
        for kind, method, path, body in BY_ID.values():
            real = getattr(targets, TARGET_OF[kind])
            caller(who).call(method, path.format(id=real), _body(body, targets))
    assert ApprovalRequest.objects.get(id=targets.pending_approval).state == "pending"
    assert Operation.objects.get(id=targets.operation).state == "claimed"
    assert Permit.objects.filter(proposal_id=targets.proposal, state="claimed").count() == 1
    assert Grant.objects.filter(parent_id=targets.grant).count() == 0
    owner = caller("owner")
    assert owner.get(f"resources/{targets.resource}/").json()["revision"] == 1


@pytest.mark.parametrize("call", list(BY_ID))
def test_the_owners_tenant_does_see_them(caller: Any, targets: Targets, call: str) -> None:
    kind, method, path, body = BY_ID[call]
    real = getattr(targets, TARGET_OF[kind])
    # Only a grant's own subject delegates it; the tenant's admin reads everything else.
    who = "owner" if kind == "grant" else "admin"
    response = caller(who).call(method, path.format(id=real), _body(body, targets))
    if response.status_code == 404:
        # e.g. the delegation's subject is of another tenant: not the id under test.
        assert response.json()["error"]["details"]["kind"] != kind, response.content


@pytest.mark.parametrize("who", OUTSIDERS)
def test_grant_lists_hold_only_the_callers_own(
    caller: Any, targets: Targets, world: World, who: str,
) -> None:
    ids = {g["id"] for g in caller(who).get("grants/").json()["results"]}
    mine = set(Grant.objects.filter(tenant_id=world.owner.tenant_id).values_list("id",
                                                                                  flat=True))
    assert not ids & mine
    assert targets.grant not in ids


@pytest.mark.parametrize("who", ["outsider", "outsider_operator"])
def test_audit_of_another_tenant_needs_its_own_admin(caller: Any, who: str) -> None:
    assert_error(caller(who).get("audit/"), 403, "role_required")


def test_an_outsider_admin_reads_only_its_own_audit(
    caller: Any, targets: Targets, world: World,
) -> None:
    admin: Caller = caller("outsider_admin")
    for query in ({}, {"proposal": targets.proposal}, {"operation": targets.operation},
                  {"kind": "permit.claimed"}):
        events = admin.get("audit/", **query).json()["results"]
        assert all(e["proposal_id"] != targets.proposal for e in events)
        assert all(e["operation_id"] != targets.operation for e in events)
        assert all(MAILBOX not in str(e["details"]) for e in events)
    assert admin.get("audit/", proposal=targets.proposal).json()["results"] == []
    # ...while the first tenant's admin does see them.
    own = caller("admin").get("audit/", proposal=targets.proposal).json()["results"]
    assert own
    assert world.owner.tenant_id != world.outsider.tenant_id


EVERY_CALL = [("GET", "contracts/"), ("POST", "resources/"), ("GET", "resources/res_x/"),
              ("POST", "resources/res_x/revisions/"), ("POST", "proposals/"),
              ("GET", "proposals/prp_x/"), ("POST", "proposals/prp_x/dispatch/"),
              ("POST", "approvals/apr_x/decision/"), ("GET", "operations/op_x/"),
              ("POST", "operations/op_x/resolve/"), ("GET", "grants/"),
              ("POST", "grants/grt_x/delegate/"), ("GET", "audit/")]


@pytest.mark.parametrize(("method", "path"), EVERY_CALL)
def test_anonymous_calls_are_401(caller: Any, method: str, path: str) -> None:
    response = caller(None).call(method, path, {})
    assert_error(response, 401, "unauthenticated")
