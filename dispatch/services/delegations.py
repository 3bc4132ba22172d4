"""Bounded delegation (docs/design.md#delegation): the one owner of `Delegation` records.

A workflow `agent` step with `delegate` runs its sub-agent under a child grant. Its record
lives from the step's start to its end, however it ends:

- `delegation_open`: in ONE transaction, the sub-agent principal, the child grant (only
  narrower than a grant of the workflow's principal: `grant_delegate_from_covering`), the budget
  carved out of the run's, the delegator's hourly budget and a budgeted parent grant's
  (`budget_carve`) and the tool calls of the run's innermost scope (`execution_scope_carve`),
  the sub-agent's execution with its input, and the
  record, whose opener holds the step's lease. Nothing of it exists unless all of it does, and
  one step of one execution has one record (a replay or a concurrent run finds it).
- `delegation_acquire`, `delegation_renew`, `delegation_park`: the step's lease. A running step
  renews it every sub-agent turn; a step that waits for a human parks it (holds none).
- One clock: leases, the grant's validity, the record's times and the sub-agent's checks are
  all the wall clock (the step passes `timezone.now()` as `now`), never the run's start time:
  reconciliation compares the grant's expiry and the lease with the wall clock.
- `delegation_end`: once, by whoever ends the step: revokes the grant (and anything delegated
  from it), gives the unused budget back, records when and why.
- `reconcile_delegations`: ends the open records whose run has finished, whose grant was
  revoked (it or a grant it was delegated from) or has expired, or whose lease lapsed (a worker
  killed mid-step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from dispatch.ids import new_id
from dispatch.models import Delegation, Execution, Grant, Principal, TranscriptEntry
from dispatch.services.authority import grant_delegate_from_covering, grant_revoke_tree
from dispatch.services.budgets import (
    budget_carve,
    budget_keys,
    budget_release,
    grant_budget_key,
)
from dispatch.services.ceilings import execution_scope_carve
from dispatch.services.executions import execution_create, journal_append
from dispatch.services.principals import subagent_create
from protocols.denials import Denial, DenialCode
from protocols.expiry import expiry_after
from protocols.jsontypes import JSONObject
from protocols.lifecycle_runs import EXECUTION_ENDED

#: Why a delegation ended (`Delegation.end_reason`).
FINISHED, RAISED, LEASE_LAPSED, RUN_ENDED, EXPIRED, REVOKED = (
    "finished", "raised", "lease_lapsed", "run_ended", "expired", "revoked")
INPUT_CALL = "input"  # the call id of the sub-agent's input entry


@dataclass(frozen=True)
class Bounds:
    """What a step delegates: `operations` over `scope` for `expires_in` seconds, with
    `budget` units of the delegator's tool-call budgets (the run's and the hour's)."""

    operations: list[str]
    scope: JSONObject = field(hash=False)
    expires_in: int
    budget: int


@dataclass(frozen=True)
class SubAgent:
    """Who the step's sub-agent is: its name in the workflow, its tools, and the model adapter
    that drives it (name, configuration and fingerprint, persisted for an exact resume)."""

    agent: str
    tools: list[str]
    adapter: str
    adapter_config: JSONObject = field(hash=False)
    adapter_fingerprint: str
    inputs: JSONObject = field(hash=False)


def _lease_until() -> datetime:
    return timezone.now() + timedelta(seconds=settings.DELEGATION_LEASE_SECONDS)


def delegation_for(*, execution_id: str, step: str) -> Delegation | None:
    """The record of the step `step` of the run `execution_id`, if it was ever opened."""
    return Delegation.objects.select_related("grant", "principal", "agent_execution").filter(
        execution_id=execution_id, step=step).first()


def delegations_of(*, execution_id: str) -> list[Delegation]:
    return list(Delegation.objects.select_related("agent_execution").filter(
        execution_id=execution_id))


def delegation_open(
    *, principal: Principal, execution_id: str, step: str, bounds: Bounds, sub: SubAgent,
    holder: str, now: datetime,
) -> Delegation:
    """Open the step's delegation, or find the one a replay or a concurrent run opened.

    The sub-agent principal is new for every delegated step: `<agent>@<delegation id>`, an
    agent of the tenant whose tool set is the step's tools and whose only authority is the
    child grant. Every refusal (`tool_not_permitted`, `authority_missing`,
    `delegation_widens`, `authority_revoked`, `authority_expired`, `budget_exhausted` when the
    run, the principal's hour or a budgeted parent grant has less than `bounds.budget` left,
    `schema_invalid` for an `expires_in` whose end no date can hold) is raised with nothing
    written.
    """
    try:
        expires_at = expiry_after(now, bounds.expires_in)
    except ValueError as exc:  # a validity no date can hold: refused, never an overflow
        raise Denial(DenialCode.SCHEMA_INVALID, errors=[
            {"pointer": "/delegate/expires_in", "message": str(exc)}]) from None
    delegation_id = new_id("dlg")
    try:
        with transaction.atomic():
            # Claim the step before anything is carved: the run's row is locked for update
            # (SQLite: the transaction holds the write lock from its start), so a concurrent
            # run of this execution waits here and then finds the record. Without it the
            # loser's carve-out, made before the record's insert, could find the run's budget
            # spent by the winner's and hear `budget_exhausted` for a step that is running.
            parent = Execution.objects.select_for_update().get(id=execution_id)
            found = delegation_for(execution_id=execution_id, step=step)
            if found is not None:
                return found
            subject = subagent_create(tenant_id=principal.tenant_id,
                                      name=f"{sub.agent[:100]}@{delegation_id}", tools=sub.tools)
            grant = grant_delegate_from_covering(
                principal=principal, subject=subject, operations=bounds.operations,
                scope=bounds.scope, expires_at=expires_at,
                budget=bounds.budget, now=now,
                details={"delegation_id": delegation_id, "execution_id": execution_id,
                         "step": step})
            # Out of the run's budget and the delegator's hourly one, by their exact keys (the
            # unused part goes back to the same hour's counter, whenever the step ends): the
            # sub-agent's claims count against counters of its own, so the carve-out is all
            # of the delegator's budgets they can ever spend (docs/design.md#delegation).
            parents = budget_keys(principal_id=principal.id, execution_id=execution_id, now=now)
            parent_budget = Grant.objects.filter(id=grant.parent_id).values_list(
                "budget", flat=True).first()
            if parent_budget is not None:  # a budgeted parent: its counter bounds the child
                parents.append((grant_budget_key(str(grant.parent_id)), parent_budget))
            budget_carve(parents=parents, child=grant_budget_key(grant.id), amount=bounds.budget)
            # And out of the run's innermost scope's tool calls: the run's ceilings bound the
            # sub-agent too (docs/workflows.md#ceilings). Last: its counter's key sorts last.
            carved_from = [key for key, _ in parents] + execution_scope_carve(
                execution_id=execution_id, principal_id=principal.id, calls=bounds.budget)
            run = execution_create(principal=subject, adapter=sub.adapter, now=now,
                                   adapter_config=sub.adapter_config,
                                   adapter_fingerprint=sub.adapter_fingerprint,
                                   parent=parent)
            journal_append(execution_id=run.id, kind=TranscriptEntry.Kind.INPUT,
                           call_id=INPUT_CALL, payload={"agent": sub.agent, "input": sub.inputs},
                           now=now)
            Delegation.objects.create(
                id=delegation_id, tenant_id=principal.tenant_id, execution_id=execution_id,
                step=step, agent=sub.agent[:100], principal=subject, grant=grant,
                agent_execution=run, budget=bounds.budget,
                carved_from=carved_from, started_at=now, holder=holder,
                lease_expires_at=_lease_until())
    except IntegrityError:
        # The backstop (one record per step): a concurrent run of this execution opened it
        # first, and all of this transaction (its grant, its carve-out) rolled back.
        found = delegation_for(execution_id=execution_id, step=step)
        if found is None:
            raise
        return found
    opened = delegation_for(execution_id=execution_id, step=step)
    assert opened is not None  # committed just now
    return opened


def delegation_acquire(*, delegation_id: str, holder: str) -> bool:
    """Take the lease of an open step that nobody runs (parked, or its holder's lease lapsed:
    a worker died and reconciliation has not ended it yet). False: someone runs it, or it
    ended."""
    return Delegation.objects.filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=timezone.now()),
        id=delegation_id, ended_at__isnull=True,
    ).update(holder=holder, lease_expires_at=_lease_until()) == 1


def delegation_renew(*, delegation_id: str, holder: str) -> bool:
    """Extend `holder`'s lease; False when it lost it (ended, or taken over)."""
    return Delegation.objects.filter(id=delegation_id, holder=holder, ended_at__isnull=True) \
        .update(lease_expires_at=_lease_until()) == 1


def delegation_park(*, delegation_id: str, holder: str) -> bool:
    """The step waits for a human: `holder` lets go of the lease; the grant stays live (within
    its expiry) for the sub-agent to go on when the run is resumed."""
    return Delegation.objects.filter(id=delegation_id, holder=holder, ended_at__isnull=True) \
        .update(holder="", lease_expires_at=None) == 1


def delegation_end(
    *, delegation: Delegation, reason: str, actor: str, now: datetime,
    holder: str | None = None, only: Q | None = None,
) -> bool:
    """End the step's delegation once: revoke its grant with everything delegated from it and
    the unclaimed permits resting on them, give the unused budget back to the counters it was
    carved from, record `reason`. `holder`: only while that holder has the lease; `only`: only
    while the record still matches (reconciliation's condition, from `_stale_because`). False:
    it had ended already, or the condition no longer held; nothing was done."""
    with transaction.atomic():
        rows = Delegation.objects.filter(id=delegation.id, ended_at__isnull=True)
        if holder is not None:
            rows = rows.filter(holder=holder)
        if only is not None:
            rows = rows.filter(only)
        # One table in the UPDATE, so its WHERE is the row's own: a concurrent renewal or end
        # holds the row lock, and once it commits PostgreSQL evaluates `ended_at`, `holder`
        # and `lease_expires_at` again on the row as it now is (READ COMMITTED). A condition on
        # a joined table would make Django emit `id IN (subquery)` instead, which is
        # re-checked against the old snapshot only: reconciliation would end a renewed step,
        # or one its step had just ended (two revocations, the reason overwritten).
        if rows.update(ended_at=now, end_reason=reason, holder="", lease_expires_at=None) != 1:
            return False
        if reason != REVOKED:  # else revoked already, with its whole tree: one event
            # Locks the grant for update: a claim under it either committed before (and its
            # budget is counted below) or waits and then sees the revocation.
            grant_revoke_tree(grant=delegation.grant, actor_name=actor, now=now)
        budget_release(parents=list(delegation.carved_from),
                       child=grant_budget_key(delegation.grant_id))
    return True


def _stale_because(now: datetime) -> dict[str, Q]:
    """Why reconciliation may end an open record, as of `now`, first reason first. The run's
    and the grant's conditions are `EXISTS` subqueries, never joins (see `delegation_end`).
    The grant's revocation covers its ancestors': a revocation revokes the whole tree."""
    grant = Grant.objects.filter(id=OuterRef("grant_id"))
    return {
        RUN_ENDED: Q(Exists(Execution.objects.filter(
            id=OuterRef("execution_id"), state__in=[str(s) for s in EXECUTION_ENDED]))),
        REVOKED: Q(Exists(grant.filter(revoked_at__isnull=False))),
        EXPIRED: Q(Exists(grant.filter(expires_at__lte=now))),
        LEASE_LAPSED: Q(lease_expires_at__lte=now),
    }


def reconcile_delegations(*, now: datetime) -> int:
    """End every open delegation whose step can no longer end by itself: its run finished, its
    grant was revoked or expired, or its lease lapsed (the worker running the step was
    killed), as of `now` (the wall clock). How many were ended. Safe beside running steps: each
    end is a conditional update on the reason it names, so a step renewed or ended meanwhile
    is left alone."""
    because = _stale_because(now)
    stale = Q()
    for condition in because.values():
        stale |= condition
    ended = 0
    for delegation in Delegation.objects.filter(stale, ended_at__isnull=True).select_related(
            "grant", "execution").order_by("started_at")[:settings.RECONCILE_BATCH]:
        if delegation.execution.state == Execution.State.FINISHED:
            reason = RUN_ENDED
        elif delegation.grant.revoked_at is not None:
            reason = REVOKED
        elif delegation.grant.expires_at is not None and delegation.grant.expires_at <= now:
            reason = EXPIRED
        else:
            reason = LEASE_LAPSED
        if delegation_end(delegation=delegation, reason=reason, actor="reconciler", now=now,
                          only=because[reason]):
            ended += 1
    return ended
