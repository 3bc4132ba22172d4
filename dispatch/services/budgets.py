"""Budget capacity, taken inside the claim's own transaction (docs/design.md#dispatcher steps 6-7,
docs/design.md#budgets).

One conditional upsert adds the action's cost to every counter it counts against, all or
nothing: a counter that would go over its limit is neither updated nor returned, and the claim
then rolls back as a whole, so a failed claim holds no capacity and needs no release. The
CheckConstraint on the table is the backstop. Work already attempted is not refunded; the
unused part of a reservation is (`budget_adjust`: a model call's maximum, reserved before the
call, less what it used).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Greatest, Least

from dispatch.models import BudgetCounter
from dispatch.store import budgets as store
from protocols.denials import Denial, DenialCode

Limits = Sequence[tuple[str, int]]


def budget_keys(*, principal_id: str, execution_id: str, now: datetime) -> list[tuple[str, int]]:
    return [
        (f"principal:{principal_id}:{now:%Y%m%d%H}", settings.BUDGET_TOOL_CALLS_PER_PRINCIPAL),
        execution_budget(principal_id=principal_id, execution_id=execution_id),
    ]


def attempt_budget(
    *, principal_id: str, execution_id: str, grant_id: str, grant_budget: int | None,
    now: datetime,
) -> list[tuple[str, int]]:
    """Every counter one attempt of an action counts against (docs/design.md#budgets: admission
    reserves tool calls, retries and concurrency): the principal's hour, its execution, and a
    delegated step's grant (docs/design.md#delegation), never more than was carved out for it. The
    claim takes it for the first attempt, `attempt_next` for every attempt after it."""
    keys = budget_keys(principal_id=principal_id, execution_id=execution_id, now=now)
    if grant_budget is not None:
        keys.append((grant_budget_key(grant_id), grant_budget))
    return keys


def execution_budget(*, principal_id: str, execution_id: str) -> tuple[str, int]:
    """The tool-call budget of one execution of a principal: its counter key and limit."""
    return f"execution:{principal_id}:{execution_id}", settings.BUDGET_TOOL_CALLS_PER_EXECUTION


def budget_take(*, limits: Limits, cost: int) -> None:
    """Add `cost` to every counter, or raise `budget_exhausted` naming the first full one.

    Must run inside the caller's transaction, whose rollback undoes it.
    """
    if cost < 0:
        raise ValueError(f"a budget cost is never negative, got {cost}")
    full = counters_take([(name, cost, cap) for name, cap in dict(limits).items()])
    if full is not None:
        raise Denial(DenialCode.BUDGET_EXHAUSTED, budget=full.split(":")[0])


def counters_take(charges: Sequence[tuple[str, int, int]], *, rebind: bool = False) -> str | None:
    """Add each `(key, cost, limit)`'s cost to its counter; the key of the first counter (in
    key order) that would go over its limit, or None when every one took its cost. A counter
    named twice counts once.

    Must run inside the caller's transaction, which rolls back on a full counter (the others
    may have taken their cost). Keys go in sorted order, so concurrent takers lock the counter
    rows in one order and never deadlock.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("budget_take runs inside the claim's transaction")
    counters = sorted({name: (name, cost, cap) for name, cost, cap in charges}.values())
    for name, cost, cap in counters:
        # A fresh counter row is inserted unconditionally: refuse a cost it could never hold.
        if cost > cap:
            return name
    if not counters:
        return None
    taken = store.take(charges=counters, rebind=rebind)
    return next((name for name, _, _ in counters if name not in taken), None)


def grant_budget_key(grant_id: str) -> str:
    """The counter of a budgeted grant (docs/design.md#delegation): every claim under it takes from
    it."""
    return f"grant:{grant_id}"


def budget_carve(*, parents: Limits, child: str, amount: int) -> None:
    """Reserve `amount` out of every counter in `parents` for a new counter `child` of that
    limit (a delegated grant's, docs/design.md#delegation), or raise `budget_exhausted` naming the
    first parent that has less than `amount` left. Inside the caller's transaction (the one that
    issues the child grant), whose rollback undoes it: the parents can never spend what the
    child holds, and the child can never hold more than its parents had left."""
    budget_take(limits=parents, cost=amount)
    BudgetCounter.objects.create(key=child, used=0, limit=amount)


def budget_release(*, parents: Sequence[str], child: str) -> int:
    """Close counter `child` and give its unused part back to each of `parents`; the units
    given back. Inside the transaction that ended the child's grant (so no claim under it is
    in flight: claims share-lock the grant that the revocation locked for update)."""
    found = BudgetCounter.objects.select_for_update().filter(key=child).values_list(
        "used", "limit").first()
    if found is None:
        return 0
    used, limit = found
    unused = limit - used
    budget_adjust(key=child, delta=unused)  # full: nothing more is ever taken from it
    for key in parents:
        budget_adjust(key=key, delta=-unused)
    return unused


def budget_adjust(*, key: str, delta: int) -> None:
    """Settle what was reserved on counter `key`: give back `-delta` (never below zero), or
    charge `delta` more, up to the counter's limit (the CheckConstraint's bound): a counter
    charged to its limit refuses the next reservation."""
    if delta == 0:
        return
    BudgetCounter.objects.filter(key=key).update(
        used=Greatest(Least(F("used") + delta, F("limit")), Value(0)))
