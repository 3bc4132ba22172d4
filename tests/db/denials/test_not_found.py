"""`not_found`: forged ids, and other tenants' ids answered like forged ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatch.models import (
    Permit,
    Principal,
)
from dispatch.services.approvals import approval_decide
from dispatch.services.authority import grant_delegate, grant_revoke
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.resources import revision_create
from protocols.denials import DenialCode
from tests.conftest import MAILBOX, World
from tests.db.denials.support import (
    PAYLOAD,
    WRONG_DIGEST,
    decide,
    dispatch,
    email_arguments,
    grant_of,
    store,
    without_id,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


def _dispatch_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: proposal_dispatch(principal=world.owner, proposal_id=target, now=world.now,
                                     enqueue=False)


def _decide_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: approval_decide(approver=world.approver, approval_id=target,
                                   decision="grant", digest=WRONG_DIGEST, now=world.now)


def _resolve_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: operation_resolve(admin=world.admin, operation_id=target,
                                     outcome="completed", evidence="seen", now=world.now)


def _revise_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: revision_create(principal=world.owner, resource_id=target, base_revision=1,
                                   payload=PAYLOAD, now=world.now)


def _delegate_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: grant_delegate(actor=world.owner, grant_id=target, subject_name="approver",
                                  operations=["email.send"], scope={"mailbox": [MAILBOX]},
                                  expires_at=None, now=world.now)


def _revoke_call(world: World, target: Any) -> Callable[[], Any]:
    return lambda: grant_revoke(actor=world.admin, grant_id=target, now=world.now)


CALLS: dict[str, tuple[Callable[[World, Any], Callable[[], Any]], str, str]] = {
    # name: (call, kind in the details, the prefix of a forged id)
    "dispatch": (_dispatch_call, "proposal", "prp"),
    "decide": (_decide_call, "approval", "apr"),
    "resolve": (_resolve_call, "operation", "op"),
    "revise": (_revise_call, "resource", "res"),
    "delegate": (_delegate_call, "grant", "grt"),
    "revoke": (_revoke_call, "grant", "grt"),
}
FORGED = ["{prefix}_doesnotexist", "", "doesnotexist", "x" * 300, 123, None, ["x"],
          {"id": "x"}, True]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("forged", FORGED, ids=[f"forged{i}" for i in range(len(FORGED))])
def test_forged_id_is_not_found(world: World, call: str, forged: Any) -> None:
    make, kind, prefix = CALLS[call]
    target = forged.format(prefix=prefix) if isinstance(forged, str) else forged
    before = store()
    denial = refused(make(world, target))
    assert denial.code is DenialCode.NOT_FOUND
    assert denial.status == 404
    assert denial.details["kind"] == kind
    if isinstance(target, str):
        assert denial.details == {"kind": kind, "id": target}
    else:
        assert denial.details == {"kind": kind}
    assert store() == before


@pytest.mark.parametrize(
    ("call", "key"),
    [("dispatch", "proposal"), ("dispatch", "claimed_proposal"), ("decide", "approval"),
     ("resolve", "operation"), ("revise", "resource"), ("delegate", "grant"),
     ("revoke", "grant")],
)
def test_other_tenants_id_answers_like_a_forged_one(
    world: World, elsewhere: dict[str, Any], call: str, key: str,
) -> None:
    make, kind, prefix = CALLS[call]
    before = store()
    theirs = refused(make(world, elsewhere[key].id))
    forged = refused(make(world, f"{prefix}_doesnotexist"))
    assert theirs.code is DenialCode.NOT_FOUND
    assert theirs.details == {"kind": kind, "id": elsewhere[key].id}
    assert without_id(theirs) == without_id(forged)
    assert str(theirs).replace(elsewhere[key].id, "") == str(forged).replace(
        f"{prefix}_doesnotexist", "")
    assert store() == before


def test_other_tenants_resource_cannot_be_proposed(
    world: World, elsewhere: dict[str, Any],
) -> None:
    before = store()
    theirs = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(elsewhere["resource"]), now=world.now)
    forged = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments={"draft": {"id": "res_doesnotexist", "revision": 1}},
                     now=world.now)
    assert theirs.code is DenialCode.NOT_FOUND
    assert theirs.details == {"kind": "resource", "id": elsewhere["resource"].id}
    assert without_id(theirs) == without_id(forged)
    assert store() == before


def test_other_tenants_operator_cannot_decide(world: World) -> None:
    proposal = world.propose_email(world.draft())
    before = store()
    theirs = refused(decide, world=world, proposal=proposal, approver=world.outsider_operator)
    forged = refused(approval_decide, approver=world.outsider_operator,
                     approval_id="apr_doesnotexist", decision="grant",
                     digest=proposal.digest, now=world.now)
    assert theirs.code is DenialCode.NOT_FOUND
    assert without_id(theirs) == without_id(forged)
    assert store() == before


@pytest.mark.parametrize("source", ["other_tenant", "forged"])
def test_permit_of_another_tenant_is_not_found(
    world: World, elsewhere: dict[str, Any], source: str,
) -> None:
    proposal, permit = world.approved_email()
    target = elsewhere["permit"].id if source == "other_tenant" else "prm_doesnotexist"
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal, permit_id=target)
    assert denial.code is DenialCode.NOT_FOUND
    assert denial.details == {"kind": "permit", "id": target}
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"


def test_grant_of_a_colleague_is_not_found(world: World, colleague: Principal) -> None:
    theirs = grant_of(colleague, "email.send")
    before = store()
    denial = refused(_delegate_call(world, theirs.id))
    forged = refused(_delegate_call(world, "grt_doesnotexist"))
    assert denial.code is DenialCode.NOT_FOUND
    assert without_id(denial) == without_id(forged)
    assert store() == before


def test_delegation_to_another_tenants_principal_is_not_found(world: World) -> None:
    before = store()
    denial = refused(grant_delegate, actor=world.owner,
                     grant_id=grant_of(world.owner, "email.send").id,
                     subject_name=world.outsider.name, operations=["email.send"],
                     scope={"mailbox": [MAILBOX]}, expires_at=None, now=world.now)
    assert denial.code is DenialCode.NOT_FOUND
    assert denial.details == {"kind": "principal", "id": world.outsider.name}
    assert store() == before
