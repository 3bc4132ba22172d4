"""The hot path's statement layer (dispatch.store.sql): every statement its owners
declare runs on this backend (CI runs this file on SQLite and on PostgreSQL), and what each
writes or loads reads back through the models exactly as the services hold it.

One action of each shape is driven through the services: an email with a resource (propose,
grant, the claim with attempt 1, the outcome), a transfer without one (the claim, attempt 1, an
uncertain attempt held for a retry, the retry, its failure that stays unknown, an admin's
resolution), and a lookup that needs no approval. After each step the instance the service
returned is compared, field by field, with the row the ORM loads. On PostgreSQL the one-round-trip
CTEs are also compared with the plain statements SQLite runs: the same action written both ways
leaves the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import Model

from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    Decision,
    Operation,
    Permit,
    Proposal,
    Resource,
    Vote,
)
from dispatch.runtime import get_runtime
from dispatch.services import claims
from dispatch.services.access import access_approval_for_decision
from dispatch.services.attempts import attempt_next
from dispatch.services.audit import audit_values
from dispatch.services.ceilings import Ceiling, scope_open
from dispatch.services.dispatcher import proposal_claim_and_start, proposal_dispatch
from dispatch.services.executions import execution_create
from dispatch.services.operations import attempt_hold, attempt_start, operation_move
from dispatch.services.principals import token_authenticate
from dispatch.services.proposals import proposal_create
from dispatch.services.reconciliation import operation_resolve
from dispatch.services.worker import _cancelled_probe, operation_execute
from dispatch.store import audit as audit_store
from dispatch.store import budgets as budgets_store
from dispatch.store import claims as claims_store
from dispatch.store import grants as grants_store
from dispatch.store import operations as operations_store
from dispatch.store import principals as principals_store
from dispatch.store import resources as resources_store
from dispatch.store.sql import STATEMENTS, insert, pipelined
from protocols.lifecycle import OperationEvent, OperationState
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def executed() -> Iterator[list[str]]:
    """Every SQL text this connection runs while the test does."""
    seen: list[str] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool,
               context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield seen


def reads_back(obj: Model) -> None:
    """The row of `obj`, loaded by the ORM, has every column value `obj` holds."""
    loaded = type(obj)._default_manager.get(pk=obj.pk)
    for field in obj._meta.concrete_fields:
        held, stored = getattr(obj, field.attname), getattr(loaded, field.attname)
        assert held == stored, (type(obj).__name__, field.attname, held, stored)


def email_action(world: World) -> Operation:
    """Propose, grant, claim with attempt 1 and complete an email with its draft; the agent
    is known by its token, as every API request knows it."""
    agent = token_authenticate(world.owner_token)
    assert agent is not None and agent.id == world.owner.id
    reads_back(agent)
    proposal = world.propose_email(world.draft())
    approval = access_approval_for_decision(world.approver, proposal.approval.id)
    reads_back(approval)
    reads_back(approval.proposal)
    reads_back(approval.proposal.principal)
    permit = world.grant(proposal)
    reads_back(permit)
    reads_back(Vote.objects.get(approval_id=permit.approval_id))
    reads_back(Decision.objects.get(approval_id=permit.approval_id))
    # Whom the worker of a `dispatch_on_approval` grant runs it as (`proposal_run_approved`).
    runs_as = principals_store.principal(id=world.owner.id)
    assert runs_as is not None
    reads_back(runs_as)
    operation, started = proposal_claim_and_start(principal=world.owner,
                                                  proposal_id=proposal.id, now=world.now)
    reads_back(operation)
    assert started.number == 1
    # What a handler asks right before its effect (its context's `cancelled`): not cancelled.
    assert not _cancelled_probe(proposal.id)()
    done = world.now + timedelta(seconds=1)
    assert operation_move(operation, OperationEvent.COMPLETE, attempt=1, now=done,
                          actor="dispatcher", end_attempt=Attempt.Outcome.COMPLETED,
                          result={"message_id": "<statement-layer@example.com>"})
    reads_back(operation)
    return operation


def transfer_action(world: World) -> Operation:
    """A transfer: claimed, attempt 1 uncertain and held, attempt 2 fails (stays unknown: an
    earlier attempt may have had its effect), then an admin resolves it."""
    proposal = world.propose_transfer()
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    reads_back(operation)
    assert attempt_start(operation, 1, world.now)
    reads_back(operation)
    assert attempt_hold(operation, 1, "the bank did not answer", world.now,
                        retry_at=world.now)
    reads_back(operation)
    contract = get_runtime().contract_for(operation.operation, operation.contract_fingerprint)
    later = world.now + timedelta(seconds=2)
    assert attempt_next(operation=operation, contract=contract, now=later)
    reads_back(operation)
    assert operation_move(operation, OperationEvent.FAIL_NO_EFFECT, attempt=2, now=later,
                          actor="dispatcher", end_attempt=Attempt.Outcome.FAILED_NO_EFFECT,
                          error="refused")
    assert operation.state == OperationState.UNKNOWN  # sticky
    reads_back(operation)
    resolved = operation_resolve(admin=world.admin, operation_id=operation.id,
                                 outcome="completed", evidence="the bank's statement shows it",
                                 now=later)
    reads_back(resolved)
    return resolved


def lookup_action(world: World) -> Operation:
    """A lookup that needs no approval, made by a run with ceilings: the claim locks the
    proposal, not a permit, and counts what the run's tree has in flight; a worker loads it
    and runs it."""
    run = execution_create(principal=world.owner, adapter="workflow:statements", now=world.now)
    scope_open(execution=run, name="run", ceiling=Ceiling(5, 5, 2), now=world.now)
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-001"}, execution_id=run.id,
                               now=world.now)
    claimed = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                enqueue=False)
    reads_back(claimed)
    operation = operation_execute(operation_id=claimed.id)
    assert operation.state == OperationState.COMPLETED
    reads_back(operation)
    return operation


@pytest.fixture
def built_afresh() -> None:
    """The derived statements this file needs are built (and declared) again by its actions:
    another test may have built one for other registered kinds or counters."""
    for builder in (resources_store._move_statement, budgets_store.upsert_sql,
                    grants_store._chain_sql):
        builder.cache_clear()


DERIVED_ON_THIS_PATH = {"resource.move.propose", "resource.move.grant", "resource.move.claim",
                        "resource.move.complete", "grant.chain_by_subject_id.locked"}


def test_every_declared_statement_runs_and_reads_back_as_written(
        live: World, built_afresh: None, executed: list[str], settings: Any) -> None:
    world = live
    settings.CONCURRENT_OPERATIONS_PER_PRINCIPAL = 10  # the claim counts what is in flight
    email_action(world)
    transfer_action(world)
    lookup_action(world)
    vendor = connection.vendor
    # Every fixed statement declared for this backend, and the members of the derived
    # families these actions need (other members, built by other tests, are theirs).
    ours = {name: declared.sql for name, declared in STATEMENTS.items()
            if declared.vendor in (None, vendor)
            and (not declared.derived or name in DERIVED_ON_THIS_PATH)}
    # Not blind: the layer declares the writes of each record kind the hot path touches.
    assert {"operation.insert", "operation.move", "attempt.end", "token.load",
            "operation.in_flight", "operation.in_flight_tree",
            "principal.approver_emails",
            "permit.claim", "permit.insert", "approval.move", "vote.insert",
            "decision.insert", "audit.insert", *DERIVED_ON_THIS_PATH} <= set(ours)
    # All of them ran. A plain statement that PostgreSQL only runs inside one of its CTEs
    # counts when a CTE holding it ran.
    missing = sorted(name for name, sql in ours.items()
                     if not any(sql in text for text in executed))
    assert missing == []


def _rows(operation_ids: list[str]) -> list[tuple[Any, ...]]:
    """What the hot path wrote for these operations, without ids, keys and clocks."""
    found: list[tuple[Any, ...]] = []
    for number, operation_id in enumerate(operation_ids):
        operation = Operation.objects.get(id=operation_id)
        found.append((number, operation.operation, operation.state, operation.attempts_made,
                      operation.uncertain, operation.result, operation.evidence))
        found.extend((number, a.number, a.outcome, a.error, a.ended_at is None)
                     for a in Attempt.objects.filter(operation_id=operation_id)
                     .order_by("number"))
        found.extend((number, e.kind, _masked(e.details))
                     for e in AuditEvent.objects.filter(operation_id=operation_id)
                     .order_by("id"))
        proposal = Proposal.objects.get(id=operation.proposal_id)
        found.extend((number, r.kind, r.state, r.current_revision) for r in
                     Resource.objects.filter(id__in=[ref["id"] for ref in
                                                     proposal.resource_refs]))
        found.extend((number, p.state, p.claimed_at is not None)
                     for p in Permit.objects.filter(proposal_id=proposal.id))
        found.extend((number, a.state) for a in
                     ApprovalRequest.objects.filter(proposal_id=proposal.id))
    return found


_VOLATILE = {"permit_id", "resource_id", "id", "digest", "approval_id", "grant_id",
             "authorized_by", "token_id", "execution_id"}


def _masked(details: Any) -> Any:
    if isinstance(details, dict):
        return {key: "…" if key in _VOLATILE else _masked(value)
                for key, value in details.items()}
    if isinstance(details, list):
        return [_masked(value) for value in details]
    return details


@pytest.mark.skipif(connection.vendor != "postgresql",
                    reason="the one-round-trip CTEs are PostgreSQL's")
def test_the_ctes_write_what_the_plain_statements_write(
        live: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world = live
    actions = (email_action, transfer_action, lookup_action)
    combined = [action(world).id for action in actions]
    monkeypatch.setattr(claims, "is_postgres", lambda: False)
    monkeypatch.setattr(operations_store, "is_postgres", lambda: False)
    monkeypatch.setattr(claims_store, "is_postgres", lambda: False)
    plain = [action(world).id for action in actions]
    assert _rows(combined) == _rows(plain)
    assert len(_rows(plain)) > 3 * len(actions)  # each action left its rows


def test_a_pipelined_block_reads_every_guard_and_fails_whole(world: World) -> None:
    """Inside `pipelined` the inserts are not waited for, but a guard's row count is the
    store's, and a failed insert is Django's `IntegrityError` that undoes the whole block."""
    proposal = world.propose_email(world.draft())
    vote = {"approval_id": proposal.approval.id, "approver": world.approver,
            "outcome": "grant", "digest": proposal.digest, "voted_at": world.now}
    before = AuditEvent.objects.count()
    with transaction.atomic(), pipelined():
        audit_store.append(audit_values(tenant_id=proposal.tenant_id, kind="test.pipelined",
                                        actor="test", at=world.now))
        assert claims_store.lock_uncancelled(proposal_id=proposal.id)
        assert not claims_store.lock_uncancelled(proposal_id="prp_none")
        transaction.set_rollback(True)
    with pytest.raises(IntegrityError), transaction.atomic(), pipelined():
        audit_store.append(audit_values(tenant_id=proposal.tenant_id, kind="test.pipelined",
                                        actor="test", at=world.now))
        insert(Vote(**vote))
        insert(Vote(**vote))  # one vote per approver
    assert AuditEvent.objects.count() == before
    assert not Vote.objects.filter(approval_id=proposal.approval.id).exists()
