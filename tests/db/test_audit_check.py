"""`manage.py audit_check` (docs/design.md#dispatcher): the audit the real services write, through
full lifecycles, replays through the transition tables with no violation; a corrupted trace is
reported, event by event, and fails the command. (Every other database test's audit is
replayed at its end too: `tests/conftest.py`.)"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from dispatch.models import AuditEvent, Operation
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import attempt_start
from dispatch.services.proposals import proposal_create
from dispatch.services.reconciliation import operation_resolve, reconcile_operations
from dispatch.services.worker import operation_execute
from tests.conftest import World, make_world
from tests.support.claims import LATER
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

def audit_check(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("audit_check", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def report(*args: str) -> dict[str, Any]:
    out, _ = audit_check("--json", *args)
    found: dict[str, Any] = json.loads(out)
    return found


def dispatched(world: World, proposal: Any) -> Operation:
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def executed(world: World, proposal: Any) -> Operation:
    return operation_execute(operation_id=dispatched(world, proposal).id)


def run_lifecycles(world: World) -> dict[str, Operation]:
    """One of each way an operation goes, through the real services and destinations."""
    done: dict[str, Operation] = {}
    done["completed"] = executed(world, world.approved_email()[0])
    done["failed"] = executed(world, world.approved_email(to=["x@fail-before.test"])[0])
    lost = executed(world, world.approved_email(to=["x@lose-response.test"])[0])
    resolved = executed(world, world.approved_email(to=["y@lose-response.test"])[0])
    operation_resolve(admin=world.admin, operation_id=resolved.id, outcome="no_effect",
                      evidence="bounced, checked by hand", now=world.now)
    once = world.propose_transfer(amount="25", memo="lose-response-once.test")
    world.grant(once)
    done["retried by the worker"] = executed(world, once)
    # A worker that died after its attempt started: the reconciler makes it unknown, finds no
    # transfer at the bank and retries with the same key.
    orphan = world.propose_transfer(amount="7")
    world.grant(orphan)
    stale = dispatched(world, orphan)
    assert attempt_start(stale, 1, world.now)
    lookup = proposal_create(principal=world.owner, operation="crm.lookup",
                             arguments={"customer_id": "cus-001"}, now=world.now)
    done["no approval"] = executed(world, lookup)
    unknown_lookup = proposal_create(principal=world.owner, operation="crm.lookup",
                                     arguments={"customer_id": "cus-404"}, now=world.now)
    done["no approval, failed"] = executed(world, unknown_lookup)
    # Cancelled before the claim (nothing claims it later), and after it, before any attempt.
    before, _ = world.approved_email()
    proposal_cancel(actor=world.owner, proposal_id=before.id, now=world.now)
    after, _ = world.approved_email()
    claimed = dispatched(world, after)
    proposal_cancel(actor=world.owner, proposal_id=after.id, now=world.now)
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    assert counts["reconciled"] >= 1 and counts["retried"] == 1, counts
    done["retried by the reconciler"] = operation_execute(operation_id=stale.id)
    for name, operation in {"reconciled": lost, "resolved": resolved,
                            "cancelled": claimed}.items():
        done[name] = Operation.objects.get(id=operation.id)
    return done


def test_full_lifecycles_replay_with_no_violation(live: World, destinations: Destinations
                                                  ) -> None:
    done = run_lifecycles(live)
    assert {name: op.state for name, op in done.items()} == {
        "completed": "completed", "failed": "failed_no_effect",
        "retried by the worker": "completed", "no approval": "completed",
        "no approval, failed": "failed_no_effect", "retried by the reconciler": "completed",
        "reconciled": "reconciled_completed", "resolved": "reconciled_no_effect",
        "cancelled": "failed_no_effect"}
    out, error = audit_check()
    assert error is None, out
    assert "no violation" in out
    found = report()
    assert found["violations"] == []
    assert found["operations"] == Operation.objects.count() == len(done)
    assert found["events"] == AuditEvent.objects.count()
    assert found["states"] == {"completed": 4, "failed_no_effect": 3,
                               "reconciled_completed": 1, "reconciled_no_effect": 1}


def test_the_tenant_filter_replays_one_tenant(live: World, destinations: Destinations) -> None:
    other = make_world(live.now, prefix="o-")
    executed(other, other.approved_email(sender="support@acme.example")[0])
    executed(live, live.approved_email()[0])
    executed(live, live.approved_email()[0])
    assert report("--tenant", "acme")["operations"] == 2
    assert report("--tenant", "o-acme")["operations"] == 1
    assert report()["operations"] == 3


def test_an_unknown_tenant_is_refused(world: World) -> None:
    _, error = audit_check("--tenant", "nobody")
    assert error is not None
    assert "nobody" in str(error)


@pytest.mark.audit_corrupted
def test_an_attempt_without_its_claim_is_reported_and_fails(
    live: World, destinations: Destinations,
) -> None:
    operation = executed(live, live.approved_email()[0])
    claim = AuditEvent.objects.get(kind="permit.claimed", operation_id=operation.id)
    claim.delete()  # the corruption: the trace loses the claim before the attempt
    out, error = audit_check()
    assert error is not None
    assert "2 violations" in str(error)
    started = AuditEvent.objects.get(kind="attempt.started", operation_id=operation.id)
    assert f"event {started.id} {operation.id} attempt.started: attempt_unclaimed" in out
    first, then = report()["violations"]
    assert first == {"event_id": started.id, "operation_id": operation.id,
                     "kind": "attempt.started", "code": "attempt_unclaimed",
                     "message": first["message"]}
    assert (then["kind"], then["code"]) == ("operation.completed", "event_unclaimed")


@pytest.mark.audit_corrupted
def test_a_move_out_of_its_table_is_reported(world: World) -> None:
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-001"}, now=world.now)
    operation = executed(world, proposal)
    assert operation.state == "completed"
    AuditEvent.objects.create(tenant_id=operation.tenant_id, at=world.now,
                              kind="operation.reconciled", actor="forger",
                              operation_id=operation.id, proposal_id=proposal.id,
                              details={"attempt": 1, "outcome": "reconciled_completed"})
    out, error = audit_check()
    assert error is not None
    assert "transition_invalid" in out
    assert "'completed'" in out


# --- resources and approvals: each move in its own table --------------------------------------


def test_resources_and_approvals_of_a_normal_flow_replay_with_no_violation(
    live: World, destinations: Destinations,
) -> None:
    """Proposed, granted, claimed, sent; denied; lapsed; revised and proposed again;
    cancelled; revoked with its grant: every resource and approval move replays clean."""
    from dispatch.services.approvals import approval_decide, approvals_expire_stale
    from dispatch.services.authority import grant_revoke
    from dispatch.services.resources import revision_create

    executed(live, live.approved_email()[0])
    denied = live.propose_email(live.draft())
    approval_decide(approver=live.approver, approval_id=denied.approval.id, decision="deny",
                    digest=denied.digest, reason="no", now=live.now)
    live.propose_email(live.draft(subject="lapses"))
    assert approvals_expire_stale(now=live.now + timedelta(hours=2)) == 1
    draft = live.draft(subject="first wording")
    live.propose_email(draft)
    revised, _ = revision_create(principal=live.owner, resource_id=draft.id, base_revision=1,
                                 payload={"from": "support@acme.example", "to": ["a@example.com"],
                                          "subject": "second wording", "body": "b"},
                                 now=live.now)
    live.grant(live.propose_email(revised))
    cancelled, _ = live.approved_email(subject="cancelled")
    proposal_cancel(actor=live.owner, proposal_id=cancelled.id, now=live.now)
    live.approved_email(subject="revoked")
    grant_revoke(actor=live.admin, grant_id=live.owner.grants.get(
        operations=["email.send"]).id, now=live.now)
    found = report()
    assert found["violations"] == []
    assert (found["resources"], found["approvals"]) == (6, 7)
    kinds = set(AuditEvent.objects.filter(details__has_key="resource_moves")
                .values_list("kind", flat=True))
    assert kinds == {"proposal.created", "approval.granted", "resource.released",
                     "permit.claimed", "operation.completed"}
    released = AuditEvent.objects.filter(kind="resource.released")
    assert sorted(e.details["resource_moves"][0]["event"] for e in released) == [
        "deny", "expire", "expire", "expire", "expire"]  # lapsed, cancelled, two revoked


def _plant(world: World, kind: str, *, proposal_id: str = "", operation_id: str = "",
           **details: Any) -> AuditEvent:
    """A row the runtime never wrote, appended as if it had been (the corruption)."""
    event: AuditEvent = AuditEvent.objects.create(
        tenant_id=world.owner.tenant_id, at=world.now, kind=kind, actor="forger",
        operation_id=operation_id, proposal_id=proposal_id, details=details)
    return event


def _violations() -> list[tuple[str, str]]:
    out, error = audit_check()
    assert error is not None, out
    return [(v["kind"], v["code"]) for v in report()["violations"]]


@pytest.mark.audit_corrupted
def test_a_resource_move_out_of_its_table_is_reported(
    live: World, destinations: Destinations,
) -> None:
    proposal, _ = live.approved_email()
    executed(live, proposal)  # the draft is `sent`
    [ref] = proposal.resource_refs
    planted = _plant(live, "proposal.created", proposal_id="prp_forged",
                     resource_moves=[{"id": ref["id"], "revision": 1, "event": "propose"}])
    assert _violations() == [("proposal.created", "transition_invalid")]
    [violation] = report()["violations"]
    assert violation["event_id"] == planted.id
    assert violation["message"] == (f"resource {ref['id']} (email_draft): 'propose' is not "
                                    "allowed in state 'sent'")


@pytest.mark.audit_corrupted
def test_an_edit_of_a_sent_draft_is_reported(live: World, destinations: Destinations) -> None:
    proposal, _ = live.approved_email()
    executed(live, proposal)
    [ref] = proposal.resource_refs
    _plant(live, "resource.revised", resource_id=ref["id"], revision=2)
    assert _violations() == [("resource.revised", "transition_invalid")]


@pytest.mark.audit_corrupted
def test_a_resource_moved_at_a_revision_not_its_current_is_reported(world: World) -> None:
    from dispatch.services.resources import revision_create

    draft = world.draft()
    revision_create(principal=world.owner, resource_id=draft.id, base_revision=1,
                    payload={"from": "support@acme.example", "to": ["a@example.com"],
                             "subject": "s", "body": "b"}, now=world.now)
    _plant(world, "proposal.created", proposal_id="prp_forged",
           resource_moves=[{"id": draft.id, "revision": 1, "event": "propose"}])
    assert _violations() == [("proposal.created", "resource_stale")]
    assert "of revision 1; its current revision is 2" in report()["violations"][0]["message"]


@pytest.mark.audit_corrupted
def test_an_approval_move_out_of_its_table_is_reported(world: World) -> None:
    from dispatch.services.approvals import approval_decide

    proposal = world.propose_email(world.draft())
    approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                    decision="deny", digest=proposal.digest, now=world.now)
    _plant(world, "approval.granted", proposal_id=proposal.id,
           approval_id=proposal.approval.id, permit_id="prm_forged")
    assert _violations() == [("approval.granted", "transition_invalid")]
    assert f"approval {proposal.approval.id}: 'grant' is not allowed in state 'denied'" in \
        report()["violations"][0]["message"]


@pytest.mark.audit_corrupted
def test_a_claim_without_a_permit_of_an_action_that_needs_approval_is_reported(
    world: World,
) -> None:
    proposal = world.propose_email(world.draft())  # its contract asks an operator
    planted = _plant(world, "permit.claimed", proposal_id=proposal.id, operation_id="op_forged",
                     permit_id=None)
    assert _violations() == [("permit.claimed", "permit_missing")]
    [violation] = report()["violations"]
    assert (violation["event_id"], violation["operation_id"]) == (planted.id, "op_forged")
    assert proposal.approval.id in violation["message"]


def test_a_claim_without_a_permit_of_an_action_that_needs_none_is_no_violation(
    world: World,
) -> None:
    lookup = proposal_create(principal=world.owner, operation="crm.lookup",
                             arguments={"customer_id": "cus-001"}, now=world.now)
    assert dispatched(world, lookup).state == "claimed"
    assert report()["violations"] == []
