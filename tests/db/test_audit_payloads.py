"""The audit is self-contained and holds no payloads (docs/design.md#audit): the events of a claim,
its attempts and its outcomes carry the contract and policy fingerprints, the execution id and the
resource revisions; `proposal.created` keeps the proposal's id and digest, a reference to the
stored snapshot; and an export of the whole audit holds none of the arguments' values, not even
where a destination or an admin quoted one."""

from __future__ import annotations

import secrets
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from dispatch.models import AuditEvent, Operation, Proposal
from dispatch.services.cancellation import proposal_cancel
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import attempt_start
from dispatch.services.proposals import proposal_create
from dispatch.services.reconciliation import operation_resolve, reconcile_operations
from dispatch.services.resources import resource_create
from dispatch.services.worker import operation_execute
from tests.conftest import MAILBOX, World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

LATER = timedelta(seconds=16)  # past the demo contracts' 15 s timeout
BOUND = ("contract_fingerprint", "policy_fingerprint", "execution_id", "resources")


def dispatched(world: World, proposal: Proposal) -> Operation:
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def executed(world: World, proposal: Proposal) -> Operation:
    return operation_execute(operation_id=dispatched(world, proposal).id)


def email(world: World, values: list[str], *, to: str, approve: bool = True) -> Proposal:
    """An approved email whose recipient, subject and body are values no audit may hold."""
    subject, body = f"subject-{secrets.token_hex(6)}", f"body-{secrets.token_hex(6)}"
    values += [to, subject, body]
    draft, _ = resource_create(principal=world.owner, kind="email_draft", now=world.now,
                               payload={"from": MAILBOX, "to": [to], "subject": subject,
                                        "body": body})
    proposal = world.propose_email(draft)
    if approve:
        world.grant(proposal)
    return proposal


def transfer(world: World, values: list[str], *, memo: str | None = None) -> Proposal:
    to_account = f"acct-{secrets.token_hex(6)}"
    amount = f"{secrets.randbelow(9000) + 1000}.{secrets.randbelow(90) + 10}"
    values += [to_account, amount]
    if memo is None:
        memo = f"memo-{secrets.token_hex(6)}"
        values.append(memo)
    proposal = proposal_create(principal=world.owner, operation="payments.transfer",
                               arguments={"from_account": "acct-001", "to_account": to_account,
                                          "amount": amount, "currency": "EUR", "memo": memo},
                               now=world.now)
    world.grant(proposal)
    return proposal


def lifecycles(world: World) -> list[str]:
    """Every way an operation goes, each with values of its own; the values, for the check."""
    token = secrets.token_hex(6)
    values: list[str] = []
    executed(world, email(world, values, to=f"ada-{token}@example.com"))
    # A refusal at RCPT: the destination's error quotes the recipient.
    executed(world, email(world, values, to=f"bo-{token}@fail-before.test"))
    lost = executed(world, email(world, values, to=f"cy-{token}@lose-response.test"))
    resolved = executed(world, email(world, values, to=f"di-{token}@lose-response.test"))
    # An admin's note may quote a value too.
    operation_resolve(admin=world.admin, operation_id=resolved.id, outcome="no_effect",
                      evidence=f"di-{token}@lose-response.test bounced, checked by hand",
                      now=world.now)
    executed(world, transfer(world, values))
    executed(world, transfer(world, values, memo="lose-response-once.test"))
    orphan = dispatched(world, transfer(world, values))
    assert attempt_start(orphan, 1, world.now)  # the worker died in its attempt
    customer = f"cus-{token}"
    values.append(customer)
    missing = proposal_create(principal=world.owner, operation="crm.lookup",
                              arguments={"customer_id": customer}, now=world.now)
    assert executed(world, missing).state == "failed_no_effect"  # the handler quotes the id
    before = email(world, values, to=f"ed-{token}@example.com")
    proposal_cancel(actor=world.owner, proposal_id=before.id, now=world.now)
    after = email(world, values, to=f"fa-{token}@example.com")
    dispatched(world, after)
    proposal_cancel(actor=world.owner, proposal_id=after.id, now=world.now)
    pending = email(world, values, to=f"gu-{token}@example.com", approve=False)
    assert pending.approval is not None
    counts = reconcile_operations(now=world.now + LATER, enqueue=False)
    assert counts["reconciled"] >= 1 and counts["retried"] == 1, counts
    operation_execute(operation_id=orphan.id)
    assert Operation.objects.get(id=lost.id).state == "reconciled_completed"
    return values


def export(model: str) -> str:
    out = StringIO()
    call_command("dumpdata", model, stdout=out)
    return out.getvalue()


def test_an_export_of_the_audit_holds_no_argument_value(
    live: World, destinations: Destinations,
) -> None:
    values = lifecycles(live)
    assert len(set(values)) == len(values) == 30
    stored = export("dispatch.revision") + export("dispatch.proposal")
    assert all(value in stored for value in values)  # the values did flow, where they belong
    audit = export("dispatch.auditevent")
    kinds = {event["fields"]["kind"] for event in _events(audit)}
    assert {"proposal.created", "permit.claimed", "attempt.started", "operation.completed",
            "operation.failed_no_effect", "operation.unknown", "operation.reconciled",
            "operation.retried", "proposal.cancelled"} <= kinds
    assert [value for value in values if value in audit] == []


def _events(dump: str) -> list[dict[str, Any]]:
    import json

    found: list[dict[str, Any]] = json.loads(dump)
    return found


def test_a_quoted_value_is_masked_not_the_rest_of_the_message(
    live: World, destinations: Destinations,
) -> None:
    values: list[str] = []
    operation = executed(live, email(live, values, to="hu-quoted@fail-before.test"))
    assert "hu-quoted@fail-before.test" in operation.attempts.get().error  # the store keeps it
    event = AuditEvent.objects.get(kind="operation.failed_no_effect", operation_id=operation.id)
    assert "hu-quoted@fail-before.test" not in event.details["error"]
    assert event.details["error"].startswith("recipients refused at RCPT: {'[payload]'")


def test_every_operation_event_carries_the_binding(live: World, destinations: Destinations
                                                  ) -> None:
    proposal, permit = live.approved_email()
    operation = executed(live, proposal)
    assert operation.state == "completed"
    binding = {"contract_fingerprint": proposal.contract_fingerprint,
               "policy_fingerprint": proposal.policy_fingerprint,
               "execution_id": proposal.execution_id,
               "resources": [{"id": ref["id"], "revision": ref["revision"]}
                             for ref in proposal.resource_refs]}
    assert binding["execution_id"].startswith("exe_")
    assert binding["resources"] and binding["resources"][0]["revision"] == 1
    events = list(AuditEvent.objects.filter(operation_id=operation.id).order_by("id"))
    assert [e.kind for e in events] == ["permit.claimed", "attempt.started",
                                        "operation.completed"]
    for event in events:
        assert {k: event.details.get(k) for k in BOUND} == binding, event.kind
        assert (event.proposal_id, event.digest) == (proposal.id, proposal.digest), event.kind
    assert events[0].details["permit_id"] == permit.id


def test_a_claim_without_a_permit_carries_the_binding_too(world: World) -> None:
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-001"}, execution_id="exe-run-7",
                               now=world.now)
    operation = executed(world, proposal)
    for event in AuditEvent.objects.filter(operation_id=operation.id):
        assert event.details["execution_id"] == "exe-run-7", event.kind
        assert event.details["resources"] == [], event.kind
        assert event.details["policy_fingerprint"] == proposal.policy_fingerprint, event.kind
    claim = AuditEvent.objects.get(kind="permit.claimed", operation_id=operation.id)
    assert claim.details["permit_id"] is None


def test_proposal_created_keeps_the_reference_not_the_arguments(world: World) -> None:
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-002"}, now=world.now)
    event = AuditEvent.objects.get(kind="proposal.created", proposal_id=proposal.id)
    assert event.digest == proposal.digest
    assert event.details == {"operation": "crm.lookup",
                             "contract_fingerprint": proposal.contract_fingerprint,
                             "policy_fingerprint": proposal.policy_fingerprint,
                             "execution_id": proposal.execution_id, "resources": []}
    assert "cus-002" not in str(event.details)


@pytest.mark.parametrize("decision", ["grant", "deny"])
def test_a_decision_reason_quoting_an_argument_is_masked_in_the_audit(
    world: World, decision: str,
) -> None:
    from dispatch.models import Decision
    from dispatch.services.approvals import approval_decide

    memo = f"memo-{secrets.token_hex(6)}"
    proposal = world.propose_transfer(amount="12.34", memo=memo)
    reason = f"{memo} is the invoice, paid to acct-999 as agreed"
    approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                    decision=decision, digest=proposal.digest, reason=reason, now=world.now)
    assert Decision.objects.get(approval_id=proposal.approval.id).reason == reason  # kept
    kind = {"grant": "approval.granted", "deny": "approval.denied"}[decision]
    event = AuditEvent.objects.get(kind=kind, proposal_id=proposal.id)
    assert memo not in str(event.details) and "acct-999" not in str(event.details)
    assert event.details["reason"] == "[payload] is the invoice, paid to [payload] as agreed"


def test_a_renewal_decision_reason_quoting_an_argument_stays_out_of_the_audit(
    live: World, destinations: Destinations,
) -> None:
    from dispatch.services.renewals import operation_reauthorize, renewal_decide

    memo = "lose-response-once.test"
    proposal = live.propose_transfer(memo=memo)
    live.grant(proposal)
    later = live.now + timedelta(hours=2)  # past the approval window: the retry is refused
    operation = operation_execute(operation_id=dispatched(live, proposal).id,
                                  clock=lambda: later)
    assert operation.state == "unknown"
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id, now=later,
                                    reason=f"the bank lost {memo}")
    renewal_decide(approver=live.approver, renewal_id=renewal.id, decision="deny",
                   digest=renewal.digest, reason=f"{memo} to acct-999 was paid by hand",
                   now=later)
    events = AuditEvent.objects.filter(kind__startswith="renewal.", operation_id=operation.id)
    assert {e.kind for e in events} == {"renewal.requested", "renewal.denied"}
    assert all(memo not in str(e.details) and "acct-999" not in str(e.details) for e in events)
