"""Revocation wins every race (docs/design.md#dispatcher), across OS processes on the real database.

Each race is forced with a failpoint: the other process has made all its checks and stands
just before its transaction while the revocation commits. Whatever it checked before, its own
transaction must see the revocation. The delegation race is also run free, 100 rounds.
"""

from __future__ import annotations

import json
import multiprocessing
from datetime import datetime
from pathlib import Path

import pytest
from django.utils import timezone

from dispatch.models import AuditEvent, Grant, Operation, Permit, Principal
from dispatch.services.authority import grant_issue, grant_revoke
from dispatch.services.principals import agent_create
from tests.conftest import ALL_TOOLS, MAILBOX, World, make_world
from tests.support.paused import PausedChild
from tests.support.processes import child_env
from tests.support.race import delegate_or_revoke

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCOPE = json.dumps({"mailbox": [MAILBOX]})


def grant_of(principal: Principal, operation: str) -> Grant:
    return Grant.objects.get(subject=principal, operations=[operation])


def revoke(world: World, grant: Grant) -> None:
    grant_revoke(actor=world.admin, grant_id=grant.id, now=timezone.now())


@pytest.fixture
def world(now: datetime) -> World:
    return make_world(now)


@pytest.fixture
def colleague() -> Principal:
    return agent_create(name="colleague", tenant="acme", tools=ALL_TOOLS)[0]


def test_a_delegation_checked_before_a_revocation_is_refused_after_it(
    world: World, colleague: Principal, tmp_path: Path,
) -> None:
    parent = grant_of(world.owner, "email.send")
    with PausedChild(tmp_path, "delegate", world.owner.id, parent.id, colleague.name,
                     "email.send", SCOPE, pause="delegation.before_transaction") as child:
        child.reached()  # the parent was live when the child checked it
        revoke(world, parent)
        assert child.result() == {"denied": "authority_revoked"}
    assert not Grant.objects.filter(parent=parent).exists()


def test_no_live_child_of_a_revoked_parent_over_100_free_rounds(
    world: World, colleague: Principal,
) -> None:
    parents = [grant_issue(issuer="admin", subject=world.owner, operations=["email.send"],
                           scope={"mailbox": [MAILBOX]}, now=world.now).id for _ in range(100)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=delegate_or_revoke,
                         args=(child_env(), role, world.owner.id, world.admin.id, parents,
                               {"mailbox": [MAILBOX]}, barrier, results))
             for role in ("delegate", "revoke")]
    for proc in procs:
        proc.start()
    answers = [results.get(timeout=300) for _ in range(2 * len(parents))]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert not [a for a in answers if a[1].startswith("error")], answers
    assert {a for a in answers if a[0] == "revoke"} == {("revoke", "ok")}
    assert {a[1] for a in answers if a[0] == "delegate"} <= {"ok", "authority_revoked"}
    # However the rounds fell, every delegated child is revoked with its parent.
    children = Grant.objects.filter(parent_id__in=parents)
    assert children.filter(revoked_at__isnull=True).count() == 0
    assert Grant.objects.filter(id__in=parents, revoked_at__isnull=True).count() == 0


@pytest.mark.parametrize("operation", ["crm.lookup", "email.send"])
def test_a_revocation_committed_before_the_claim_stops_the_dispatch(
    world: World, tmp_path: Path, operation: str,
) -> None:
    if operation == "email.send":
        proposal, _ = world.approved_email()
    else:
        from dispatch.services.proposals import proposal_create

        proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                                   arguments={"customer_id": "cus-001"}, now=world.now)
    with PausedChild(tmp_path, "dispatch", world.owner.id, proposal.id,
                     pause="dispatch.before_claim") as child:
        child.reached()  # every check of the dispatch passed, authority included
        revoke(world, grant_of(world.owner, operation))
        assert child.result() == {"denied": "authority_revoked"}
    assert not Operation.objects.exists()
    assert not AuditEvent.objects.filter(kind="permit.claimed").exists()
    if operation == "email.send":
        assert Permit.objects.get(proposal=proposal).state == "revoked"


def test_a_revocation_committed_before_the_decision_refuses_the_grant(
    world: World, tmp_path: Path,
) -> None:
    proposal = world.propose_email(world.draft())
    with PausedChild(tmp_path, "decide", world.approver.id, proposal.approval.id,
                     proposal.digest, pause="decision.before_transaction") as child:
        child.reached()
        revoke(world, grant_of(world.owner, "email.send"))
        assert child.result() == {"denied": "authority_revoked"}
    proposal.approval.refresh_from_db()
    assert proposal.approval.state == "pending"
    assert not Permit.objects.exists()


@pytest.mark.parametrize("operation", ["crm.lookup", "email.send"])
def test_a_revocation_during_the_claim_waits_for_it_and_never_undoes_it(
    world: World, tmp_path: Path, operation: str,
) -> None:
    """The claim's transaction holds the grants it read (a share lock on PostgreSQL, the write
    lock on SQLite): a revocation started while it runs commits after it, and the action,
    claimed first, stands. `crm.lookup` has no permit for the revocation to contend on: only
    the lock on the grant makes it wait."""
    import threading

    if operation == "email.send":
        proposal, _ = world.approved_email()
    else:
        from dispatch.services.proposals import proposal_create

        proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                                   arguments={"customer_id": "cus-001"}, now=world.now)
    grant = grant_of(world.owner, operation)
    with PausedChild(tmp_path, "dispatch", world.owner.id, proposal.id,
                     pause="claim.before_commit") as child:
        child.reached()  # every row of the claim written, not committed
        done = threading.Event()

        def revoke_now() -> None:
            from django.db import connection

            try:
                revoke(world, grant)
            finally:
                connection.close()
                done.set()

        revoking = threading.Thread(target=revoke_now)
        revoking.start()
        assert not done.wait(1.0), "the revocation did not wait for the claim"
        answer = child.result()
        revoking.join(timeout=60)
    assert done.is_set()
    assert "operation_id" in answer
    assert Grant.objects.get(id=grant.id).revoked_at is not None
    assert Operation.objects.filter(proposal=proposal).count() == 1
    if operation == "email.send":
        assert Permit.objects.get(proposal=proposal).state == "claimed"
