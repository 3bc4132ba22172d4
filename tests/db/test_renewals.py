"""Renewed approval for the same operation (docs/design.md#renewals): an operation
that stopped short gets a further attempt under the same operation id, so the same idempotency key,
after a new human decision: never a new operation for the same logical action."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from demo import contracts as demo_contracts
from demo.destinations.runner import list_all
from dispatch.models import Attempt, AuditEvent, Grant, Operation, Renewal
from dispatch.runtime import get_runtime
from dispatch.services.authority import grant_revoke
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.principals import agent_create, human_create
from dispatch.services.renewals import operation_reauthorize, renewal_decide, renewal_refusal
from dispatch.services.worker import operation_execute
from protocols.contracts import ApprovalRequirement, Idempotency, Reconciliation
from protocols.denials import DenialCode
from tests.conftest import ALL_TOOLS, World
from tests.support.claims import refused
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db

LATER = timedelta(hours=2)  # past the demo approval window: the permit lapsed


def PAST_FENCE(world: World) -> Any:
    """Three contract timeouts (15 s) after the world's attempts started, and a little: from
    the wall clock, since the attempts start on it (a loaded machine may be seconds past
    `world.now` by then)."""
    return max(world.now, timezone.now()) + timedelta(seconds=46)


def stopped_transfer(world: World, amount: str = "10.00",
                     approve: Callable[[Any], object] | None = None) -> Operation:
    """A transfer whose first answer was lost, and whose retry found its permit lapsed: unknown,
    with the bank holding the transfer once. `approve` grants the proposal (one operator's grant
    unless it says otherwise)."""
    proposal = world.propose_transfer(amount, memo="lose-response-once.test")
    (approve or world.grant)(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    operation = operation_execute(operation_id=operation.id, clock=lambda: world.now + LATER)
    assert operation.state == "unknown"
    assert "no retry: the approval is no longer valid" in Attempt.objects.get(
        operation=operation).error
    return operation


def grant(world: World, renewal: Renewal, approver: Any = None, **extra: Any) -> Renewal:
    return renewal_decide(approver=approver or world.approver, renewal_id=renewal.id,
                          decision="grant", digest=renewal.digest, now=world.now + LATER,
                          **extra)


def test_a_renewed_approval_runs_attempt_two_under_the_same_key(
    live: World, destinations: Destinations,
) -> None:
    operation = stopped_transfer(live)
    assert len(list_all(destinations.directory)["bank"]) == 1
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER, reason="the bank was down")
    assert (renewal.state, renewal.attempt, renewal.digest) == (
        "pending", 2, operation.proposal.digest)
    assert Operation.objects.get(id=operation.id).state == "unknown"  # a request moves nothing
    grant(live, renewal)
    assert Operation.objects.get(id=operation.id).state == "claimed"
    done = operation_execute(operation_id=operation.id, clock=lambda: live.now + LATER)
    assert (done.id, done.state) == (operation.id, "completed")
    assert list(Attempt.objects.filter(operation=operation).order_by("number").values_list(
        "number", "outcome")) == [(1, "uncertain"), (2, "completed")]
    # The same key both times: the bank holds one transfer.
    (transfer,) = list_all(destinations.directory)["bank"]
    assert transfer["key"] == operation.id
    assert Operation.objects.filter(proposal=operation.proposal).count() == 1
    kinds = list(AuditEvent.objects.filter(operation_id=operation.id).order_by("id")
                 .values_list("kind", flat=True))
    assert kinds.index("renewal.requested") < kinds.index("operation.retried") < kinds.index(
        "renewal.granted") < kinds.index("operation.completed")
    assert Renewal.objects.get(id=renewal.id).state == "granted"


def test_the_agent_may_ask_for_its_own_operation_only(live: World) -> None:
    operation = stopped_transfer(live)
    other, _ = agent_create(name="other-bot", tenant="acme", tools=ALL_TOOLS)
    # The tenant sees the operation (GET operations/{id}/): role_required, as for resolve.
    for principal in (other, live.approver):
        assert refused(operation_reauthorize, actor=principal, operation_id=operation.id,
                       now=live.now).code is DenialCode.ROLE_REQUIRED
    assert refused(operation_reauthorize, actor=live.outsider_operator,
                   operation_id=operation.id, now=live.now).code is DenialCode.NOT_FOUND
    renewal = operation_reauthorize(actor=live.owner, operation_id=operation.id, now=live.now)
    assert renewal.requested_by_id == live.owner.id
    # One renewal per further attempt.
    assert refused(operation_reauthorize, actor=live.admin, operation_id=operation.id,
                   now=live.now).code is DenialCode.APPROVAL_PENDING


def test_four_eyes_and_the_digest(live: World) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    assert refused(grant, world=live, renewal=renewal, approver=live.admin).code is (
        DenialCode.APPROVER_IS_REQUESTER)
    assert refused(grant, world=live, renewal=renewal, approver=live.owner).code is (
        DenialCode.ROLE_REQUIRED)
    assert refused(grant, world=live, renewal=renewal,
                   approver=live.outsider_operator).code is DenialCode.NOT_FOUND
    denial = refused(renewal_decide, approver=live.approver, renewal_id=renewal.id,
                     decision="grant", digest="sha256:" + "0" * 64, now=live.now + LATER)
    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert Renewal.objects.get(id=renewal.id).state == "pending"
    assert Operation.objects.get(id=operation.id).state == "unknown"


def test_a_denied_or_lapsed_renewal_leaves_the_operation_unknown(live: World) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    renewal_decide(approver=live.approver, renewal_id=renewal.id, decision="deny",
                   digest=renewal.digest, now=live.now + LATER, reason="resolve it instead")
    assert Renewal.objects.get(id=renewal.id).state == "denied"
    assert Operation.objects.get(id=operation.id).state == "unknown"
    assert refused(grant, world=live, renewal=renewal).code is DenialCode.APPROVAL_DECIDED
    # Denied is not "waiting": the attempt may be asked for again, and granted.
    again = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                  now=live.now + LATER)
    assert (again.state, again.attempt) == ("pending", renewal.attempt)
    assert grant(live, again).state == "granted"


def cancelled_while_running(world: World) -> Operation:
    """Attempt 1 started, the owner cancelled, the worker was lost: unknown, and cancelled."""
    from dispatch.services.cancellation import proposal_cancel
    from dispatch.services.operations import attempt_start
    from dispatch.services.reconciliation import reconcile_operations

    proposal = world.propose_transfer()
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    assert attempt_start(operation, 1, world.now)
    proposal_cancel(actor=world.owner, proposal_id=proposal.id, now=world.now)
    reconcile_operations(now=world.now + timedelta(seconds=16), enqueue=False)
    operation.refresh_from_db()
    assert operation.state == "unknown"
    return operation


def test_a_cancelled_action_is_never_renewed(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
    operation = cancelled_while_running(world)
    denial = refused(operation_reauthorize, actor=world.admin, operation_id=operation.id,
                     now=world.now + LATER)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert "cancelled" in denial.message
    assert not Renewal.objects.exists()


def test_a_renewal_past_its_window_expires(live: World) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id, now=live.now)
    denial = refused(renewal_decide, approver=live.approver, renewal_id=renewal.id,
                     decision="grant", digest=renewal.digest, now=live.now + LATER)
    assert denial.code is DenialCode.APPROVAL_EXPIRED
    assert Renewal.objects.get(id=renewal.id).state == "expired"
    assert Operation.objects.get(id=operation.id).state == "unknown"
    assert AuditEvent.objects.filter(kind="renewal.expired", operation_id=operation.id).exists()


def test_a_renewal_left_unanswered_past_its_window_can_be_asked_again(live: World) -> None:
    operation = stopped_transfer(live)
    first = operation_reauthorize(actor=live.admin, operation_id=operation.id, now=live.now)
    again = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                  now=live.now + LATER)
    assert Renewal.objects.get(id=first.id).state == "expired"
    assert (again.state, again.attempt) == ("pending", first.attempt)


def test_a_revocation_before_the_grant_refuses_it(live: World) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    root = Grant.objects.get(subject=live.owner, operations=["payments.transfer"], parent=None)
    grant_revoke(actor=live.admin, grant_id=root.id, now=live.now + LATER)
    assert refused(grant, world=live, renewal=renewal).code is DenialCode.AUTHORITY_REVOKED
    assert Renewal.objects.get(id=renewal.id).state == "pending"
    assert Operation.objects.get(id=operation.id).state == "unknown"


def test_only_an_unknown_operation_is_renewed(live: World) -> None:
    proposal = live.propose_transfer()
    live.grant(proposal)
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=live.owner, proposal_id=proposal.id, now=live.now, enqueue=False).id)
    assert operation.state == "completed"
    denial = refused(operation_reauthorize, actor=live.admin, operation_id=operation.id,
                     now=live.now)
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert renewal_refusal(operation, live.now) is not None


def test_an_email_whose_outcome_is_unknown_is_resolved_not_renewed(live: World) -> None:
    """The sink does not deduplicate and its lookup cannot prove an absence: a further attempt
    could be a second email (the draft's protocol itself now has its way back, for contracts
    where one is safe)."""
    proposal, _ = live.approved_email(to=["x@lose-response.test"])
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=live.owner, proposal_id=proposal.id, now=live.now, enqueue=False).id)
    assert operation.state == "unknown"
    denial = refused(operation_reauthorize, actor=live.admin, operation_id=operation.id,
                     now=live.now)
    assert denial.code is DenialCode.UNSAFE_RETRY
    assert "resolve it" in denial.message


@pytest.fixture
def transfers_without_dedup(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Call with a reconciliation: `payments.transfer` then neither deduplicates nor retries."""
    original = demo_contracts.CONTRACTS["payments.transfer"]

    def declare(reconciliation: Reconciliation) -> None:
        monkeypatch.setitem(demo_contracts.CONTRACTS, "payments.transfer", lambda fp: replace(
            original(fp), idempotency_contract=Idempotency.NONE, reconciliation=reconciliation))
        get_runtime.cache_clear()

    yield declare
    get_runtime.cache_clear()


@pytest.mark.parametrize(("reconciliation", "answer", "allowed"), [
    (Reconciliation.PRESENCE, None, False),
    (Reconciliation.PRESENCE_AND_ABSENCE, None, True),
    (Reconciliation.PRESENCE_AND_ABSENCE, {"key": "found"}, False),
])
def test_without_dedup_only_an_authoritative_absence_allows_a_renewal(
    live: World, monkeypatch: pytest.MonkeyPatch, transfers_without_dedup: Any,
    reconciliation: Reconciliation, answer: Any, allowed: bool,
) -> None:
    transfers_without_dedup(reconciliation)
    operation = stopped_transfer_once(live)
    monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: answer)
    if allowed:
        # Within the fence the last request may still land: an absence proves nothing yet.
        early = refused(operation_reauthorize, actor=live.admin, operation_id=operation.id,
                        now=live.now + timedelta(seconds=30))
        assert early.code is DenialCode.UNSAFE_RETRY
        assert "may still be delivered" in early.details["reason"]
        renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                        now=PAST_FENCE(live))
        assert renewal.attempt == 2
        # Asked again at the grant: a presence found now refuses it.
        monkeypatch.setattr("demo.handlers.bank_lookup",
                            lambda base_url, key, timeout: {"key": key})
        denial = refused(renewal_decide, approver=live.approver, renewal_id=renewal.id,
                         decision="grant", digest=renewal.digest, now=PAST_FENCE(live))
        assert denial.code is DenialCode.UNSAFE_RETRY
        assert Operation.objects.get(id=operation.id).state == "unknown"
        monkeypatch.setattr("demo.handlers.bank_lookup", lambda base_url, key, timeout: None)
        assert renewal_decide(approver=live.approver, renewal_id=renewal.id, decision="grant",
                              digest=renewal.digest, now=PAST_FENCE(live)).state == "granted"
    else:
        denial = refused(operation_reauthorize, actor=live.admin, operation_id=operation.id,
                         now=PAST_FENCE(live))
        assert denial.code is DenialCode.UNSAFE_RETRY
        assert not Renewal.objects.exists()


def stopped_transfer_once(world: World) -> Operation:
    """Under a contract that does not retry: attempt 1's answer lost, unknown at once."""
    proposal = world.propose_transfer(memo="lose-response-once.test")
    world.grant(proposal)
    operation = operation_execute(operation_id=proposal_dispatch(
        principal=world.owner, proposal_id=proposal.id, now=world.now, enqueue=False).id)
    assert operation.state == "unknown"
    return operation


def test_a_human_operator_who_is_not_an_admin_may_decide(live: World) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    operator, _ = human_create(name="olive", tenant="acme", role="operator", password="pw")
    assert grant(live, renewal, approver=operator).state == "granted"


def test_a_granted_renewal_whose_task_was_lost_is_requeued_by_reconciliation(
    live: World, destinations: Destinations, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grant's enqueue never reached a worker: the operation is claimed with its last
    attempt closed. Reconciliation used to try to end an attempt that was not open, forever."""
    from dispatch.services.reconciliation import reconcile_operations

    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.admin, operation_id=operation.id,
                                    now=live.now + LATER)
    grant(live, renewal)  # on_commit never runs here: the task is "lost"
    queued: list[str] = []
    monkeypatch.setattr("dispatch.services.reconciliation.execute_now", queued.append)
    counts = reconcile_operations(now=live.now + LATER + timedelta(seconds=16))
    assert counts["requeued"] == 1
    assert queued == [operation.id]
    assert operation_execute(operation_id=operation.id).state == "completed"


@pytest.fixture
def transfers_approved_by(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Call with a role: `payments.transfer`'s approval requirement then names it."""
    original = demo_contracts.CONTRACTS["payments.transfer"]

    def declare(role: str) -> None:
        monkeypatch.setitem(demo_contracts.CONTRACTS, "payments.transfer", lambda fp: replace(
            original(fp), approval_requirement=ApprovalRequirement(role, 3600)))
        get_runtime.cache_clear()

    yield declare
    get_runtime.cache_clear()


@pytest.mark.parametrize("decision", ["grant", "deny"])
def test_a_renewal_is_decided_by_the_role_the_contract_names(
    live: World, transfers_approved_by: Any, decision: str,
) -> None:
    transfers_approved_by("admin")
    proposal = live.propose_transfer(memo="lose-response-once.test")
    live.grant(proposal, approver=live.admin)
    operation = proposal_dispatch(principal=live.owner, proposal_id=proposal.id,
                                  now=live.now, enqueue=False)
    operation = operation_execute(operation_id=operation.id, clock=lambda: live.now + LATER)
    assert operation.state == "unknown"
    renewal = operation_reauthorize(actor=live.owner, operation_id=operation.id,
                                    now=live.now + LATER)
    denial = refused(renewal_decide, approver=live.approver, renewal_id=renewal.id,
                     decision=decision, digest=renewal.digest, now=live.now + LATER)
    assert (denial.code, denial.details) == (DenialCode.ROLE_REQUIRED, {"role": "admin"})
    assert Renewal.objects.get(id=renewal.id).state == "pending"
    decided = renewal_decide(approver=live.admin, renewal_id=renewal.id, decision=decision,
                             digest=renewal.digest, now=live.now + LATER)
    assert decided.state == {"grant": "granted", "deny": "denied"}[decision]
