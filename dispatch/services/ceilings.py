"""Nested ceilings (docs/design.md#budgets: a child scope never spends more than its parent has
left, however it nests; docs/workflows.md#ceilings).

A `Scope` of an execution holds three ceilings: tool calls, attempts and concurrency (attempts
in flight at once). When a scope opens, its ceilings are reserved out of its parent's remaining
capacity, in the parent's own `BudgetCounter` rows, by the conditional upsert every budget uses
(`dispatch.services.budgets.counters_take`): a child that asks for more than its parent has left
is refused with `budget_exhausted` naming the parent scope and the ceiling, and nothing is
reserved. A scope then spends only out of its own counters, so however deeply scopes nest, a
child never spends more than its parent had left when it opened.

A scope closes once (`scope_close`, under its row lock): its open children close first, then
what it did not use goes back to its parent's counters (calls and attempts not spent; the
concurrency slots not held by an attempt still in flight, which give their slot back when that
attempt ends, `scope_leave`). Work already attempted is never refunded. A scope's holder keeps a
lease (`scope_renew`); the sweep (`scopes_sweep`, on the beat) closes scopes whose holder is
gone (a killed worker) and those of runs that ended. Everything is in the store: a crash loses
no capacity and frees none twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F

from dispatch.models import BudgetCounter, Delegation, Execution, Operation, Scope
from dispatch.services.budgets import budget_adjust, counters_take
from dispatch.services.run_tree import Node, execution_path, path_stop_refusal
from dispatch.store import ceilings as store
from protocols.denials import Denial, DenialCode
from protocols.lifecycle_runs import EXECUTION_ENDED

DIMENSIONS = ("calls", "attempts", "concurrency")


@dataclass(frozen=True)
class Ceiling:
    """What a scope may spend: tool calls, attempts (each retry counts) and attempts in flight
    at once."""

    calls: int
    attempts: int
    concurrency: int

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            amount = getattr(self, name)
            if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
                raise ValueError(f"a ceiling's {name} is a count >= 0, not {amount!r}")


def counter_key(scope_id: str, dimension: str) -> str:
    return f"scope:{scope_id}:{dimension}"


def scope_open(
    *, execution: Execution, name: str, ceiling: Ceiling, now: datetime,
    parent_id: str | None = None, holder: str = "", lease: timedelta | None = None,
) -> Scope:
    """Open a scope of `execution` with `ceiling`, reserved out of `parent_id`'s remaining
    capacity (a root scope, without a parent, is given its ceiling). `budget_exhausted` naming
    the parent scope and the first ceiling it has too little left of; `protocol_state_invalid`
    for a parent already closed. `holder` and `lease`: the scope is the holder's until the lease
    lapses without `scope_renew` (then the sweep closes it)."""
    with transaction.atomic():
        if parent_id is not None:
            parent = Scope.objects.select_for_update().filter(
                id=parent_id, execution_id=execution.id).first()
            if parent is None:
                raise Denial(DenialCode.NOT_FOUND, kind="scope", id=parent_id)
            if parent.closed_at is not None:
                raise Denial(DenialCode.PROTOCOL_STATE_INVALID,
                             f"The scope '{parent.name}' is closed; nothing opens inside it.",
                             scope=parent.name)
            charges = [(counter_key(parent.id, d), getattr(ceiling, d), getattr(parent, d))
                       for d in DIMENSIONS]
            full = counters_take(charges)
            if full is not None:
                dimension = full.rsplit(":", 1)[1]
                left = _remaining(parent.id, dimension, getattr(parent, dimension))
                raise Denial(DenialCode.BUDGET_EXHAUSTED, budget=dimension, scope=parent.name,
                             scope_id=parent.id, asked=getattr(ceiling, dimension),
                             remaining=left)
        scope = Scope.objects.create(
            tenant_id=execution.tenant_id, execution=execution, parent_id=parent_id, name=name,
            calls=ceiling.calls, attempts=ceiling.attempts, concurrency=ceiling.concurrency,
            holder=holder, lease_expires_at=now + lease if lease is not None else None,
            opened_at=now)
        BudgetCounter.objects.bulk_create([
            BudgetCounter(key=counter_key(scope.id, d), used=0, limit=getattr(ceiling, d))
            for d in DIMENSIONS])
    return scope


def _remaining(scope_id: str, dimension: str, limit: int) -> int:
    used = BudgetCounter.objects.filter(key=counter_key(scope_id, dimension)).values_list(
        "used", flat=True).first()
    return limit - (used or 0)


def scope_remaining(scope_id: str) -> dict[str, int]:
    """What the scope has left of each ceiling, as the store says now."""
    scope = Scope.objects.get(id=scope_id)
    return {d: _remaining(scope.id, d, getattr(scope, d)) for d in DIMENSIONS}


def scope_take(scope_id: str, *, calls: int = 0, attempts: int = 0) -> None:
    """Spend `calls` tool calls and `attempts` attempts out of the scope, all or nothing, or
    raise `budget_exhausted` naming the scope and the ceiling. Inside the caller's transaction
    when there is one (the claim's: its rollback undoes it), else in its own."""
    with transaction.atomic():
        scope = _open_scope(scope_id)
        charges = [(counter_key(scope.id, d), cost, getattr(scope, d))
                   for d, cost in (("calls", calls), ("attempts", attempts)) if cost]
        full = counters_take(charges)
        if full is not None:
            raise Denial(DenialCode.BUDGET_EXHAUSTED, budget=full.rsplit(":", 1)[1],
                         scope=scope.name, scope_id=scope.id)


def execution_scope_take(*, execution_id: str | None, principal_id: str, calls: int,
                         attempts: int, now: datetime, claim: Operation | None = None) -> None:
    """Inside a claim's (or a retry's) transaction: spend out of the nearest open scope on the
    action's path to its run's root (docs/design.md#run-trees): its own execution's innermost
    open scope, else its parent's, up to the run's; so an action of a run, or of an agent step
    or a sub-agent inside it, never spends past the ceilings the run was given; nothing for an
    action outside a run or a run without scopes. `budget_exhausted` naming the scope and the
    ceiling. A claim also takes a slot of that scope's concurrency (`_run_concurrency_take`),
    counted over the whole tree.

    A delegated sub-agent's tool calls were carved out of the run's scope when its delegation
    opened (`execution_scope_carve`): its claims charge the run's scope attempts and slots,
    never its calls a second time.

    A claim or an attempt of an action whose path holds an execution that timed out or was
    cancelled is refused (`protocol_state_invalid`): the stop's `execution_move` updates the
    rows this reads share-locked, so a stop committed first is seen here, and one that comes
    after waits for this commit and then finds the action claimed, to cancel through its
    context. This decides that refusal whatever else the stop has done yet (a process that died
    after ending the run and before withdrawing its actions leaves them issued; a retry waking
    from its backoff while the stop withdraws the tree's actions one by one)."""
    if not execution_id:
        return
    # The action's execution, share-locked, with its innermost open scope: one statement.
    run = store.run_and_scope(execution_id=execution_id, principal_id=principal_id, lock=True)
    if run is None:
        return
    own = Node(execution_id, run.state, principal_id, run.parent_id, None,
               _aware(run.deadline_at))
    refusal = path_stop_refusal([own], now=now)
    if refusal is not None:
        raise refusal
    tree, scope = run.root_id or execution_id, run.scope
    if run.parent_id is not None:
        # Inside a run's tree: its ancestors' stops refuse it, and the nearest open scope on
        # the path is the one charged.
        path = execution_path(run.parent_id, lock=True)
        refusal = path_stop_refusal(path, now=now)
        if refusal is not None:
            raise refusal
        if scope is None:
            if _delegated(execution_id):
                calls = 0
            for node in path:
                nearest = store.run_and_scope(execution_id=node.id,
                                              principal_id=node.principal_id)
                if nearest is not None and nearest.scope is not None:
                    scope = nearest.scope
                    break
    if scope is None:
        return
    full = counters_take([(counter_key(scope.id, "calls"), calls, scope.calls),
                          (counter_key(scope.id, "attempts"), attempts, scope.attempts)])
    if full is not None:
        raise Denial(DenialCode.BUDGET_EXHAUSTED, budget=full.rsplit(":", 1)[1],
                     scope=scope.name, scope_id=scope.id)
    if claim is not None:
        _run_concurrency_take(claim, tree=tree, scope_id=scope.id, name=scope.name,
                              limit=scope.concurrency)


def _aware(value: datetime | str | None) -> datetime | None:
    """A timestamp a raw statement read: SQLite gives it naive (in UTC, as Django stores it)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def execution_slot_free(execution_id: str) -> bool:
    """Whether an action of the execution could take a concurrency slot now: the actions in
    flight in its run's tree are below the concurrency of the nearest open scope on its path
    (no such scope: no ceiling). A read, for a waiting lane to know it should not wait."""
    for node in execution_path(execution_id):
        found = store.run_and_scope(execution_id=node.id, principal_id=node.principal_id)
        if found is not None and found.scope is not None:
            tree = found.root_id or node.id
            return store.in_flight_tree(tree=tree, operation_id="") < int(found.scope.concurrency)
    return True


def _delegated(execution_id: str) -> bool:
    """Whether the execution is a delegated step's sub-agent (its calls carved already)."""
    return Delegation.objects.filter(agent_execution_id=execution_id).exists()


def execution_scope_carve(*, execution_id: str, principal_id: str, calls: int) -> list[str]:
    """A delegated step's budget, carved out of the tool calls of its run's innermost open scope
    too (docs/design.md#budgets: a child cannot evade its parent's budget by starting a pipeline
    of its own), inside the delegation's transaction: `budget_exhausted` naming the scope, with
    what was asked and what is left, when the scope has less than `calls` left. The counter keys
    carved from, for the delegation to give its unused part back to when it ends
    (`budget_release`); none for a run without scopes."""
    found = store.run_and_scope(execution_id=execution_id, principal_id=principal_id)
    if found is None or found.scope is None:
        return []
    scope = found.scope
    key = counter_key(scope.id, "calls")
    if counters_take([(key, calls, scope.calls)]) is not None:
        raise Denial(DenialCode.BUDGET_EXHAUSTED, budget="calls", scope=scope.name,
                     scope_id=scope.id, asked=calls,
                     remaining=_remaining(scope.id, "calls", scope.calls))
    return [key]


def _run_concurrency_take(claim: Operation, *, tree: str, scope_id: str, name: str,
                          limit: int) -> None:
    """The claim of an action of a run, after it took its attempt out of the nearest open scope
    on its path: the actions claimed and not settled anywhere in the run's tree (`tree`, its
    root: the run's own, its agent steps' and its sub-agents') stay below that scope's
    concurrency ceiling, or the claim is `budget_exhausted` naming the scope and
    `concurrency`, and rolls back whole. The count is the store's own, as for the
    per-principal limit: a slot goes back when the action settles, however it settles, and a
    killed worker's action keeps its slot until reconciliation settles it. Two claims of the
    run cannot both see the last free slot: each holds the scope's `attempts` counter row,
    locked by the upsert above, until it commits (on SQLite, BEGIN IMMEDIATE). A run's actions
    are not attributed to nested scopes, so the count is the whole tree's against the nearest
    scope's ceiling: never more in flight than that scope allows. A retry of an uncertain
    action is not counted again (it was counted when first claimed)."""
    in_flight = store.in_flight_tree(tree=tree, operation_id=claim.id)
    if in_flight >= limit:
        raise Denial(DenialCode.BUDGET_EXHAUSTED, budget="concurrency", scope=name,
                     scope_id=scope_id, limit=limit, in_flight=in_flight)


def run_ceiling() -> Ceiling:
    """The ceilings a workflow run is given when it does not say (`run_workflow(ceiling=...)`):
    the deployment's per-execution budgets."""
    return Ceiling(calls=int(settings.BUDGET_TOOL_CALLS_PER_EXECUTION),
                   attempts=int(settings.BUDGET_ATTEMPTS_PER_EXECUTION),
                   concurrency=int(settings.CONCURRENCY_PER_EXECUTION))


def scope_enter(scope_id: str) -> None:
    """One attempt of the scope starts: it holds one concurrency slot until `scope_leave`, or
    `budget_exhausted` (naming the scope, `concurrency`) when every slot is held."""
    with transaction.atomic():
        scope = _open_scope(scope_id)
        if counters_take([(counter_key(scope.id, "concurrency"), 1, scope.concurrency)]):
            raise Denial(DenialCode.BUDGET_EXHAUSTED, budget="concurrency", scope=scope.name,
                         scope_id=scope.id)


def scope_leave(scope_id: str) -> None:
    """The attempt that `scope_enter` admitted ended: its slot goes back. A scope that closed
    meanwhile counted the slot as still held, and so did each closed ancestor: the slot goes
    back through each of them to the first open one."""
    with transaction.atomic():
        scope = Scope.objects.select_for_update().get(id=scope_id)
        budget_adjust(key=counter_key(scope.id, "concurrency"), delta=-1)
        while scope.closed_at is not None and scope.parent_id is not None:
            budget_adjust(key=counter_key(scope.parent_id, "concurrency"), delta=-1)
            scope = Scope.objects.get(id=scope.parent_id)


def _open_scope(scope_id: str) -> Scope:
    scope = Scope.objects.filter(id=scope_id).first()
    if scope is None:
        raise Denial(DenialCode.NOT_FOUND, kind="scope", id=scope_id)
    if scope.closed_at is not None:
        raise Denial(DenialCode.BUDGET_EXHAUSTED, budget="closed", scope=scope.name,
                     scope_id=scope.id)
    return scope


def scope_renew(scope_id: str, *, holder: str, lease: timedelta, now: datetime) -> bool:
    """The holder is still there: extend its lease. False if the scope closed or is another's."""
    return Scope.objects.filter(id=scope_id, holder=holder, closed_at__isnull=True).update(
        lease_expires_at=now + lease) == 1


def scope_close(scope_id: str, *, now: datetime, reason: str) -> dict[str, int] | None:
    """Close the scope (its open children first) and give what it did not use back to its
    parent; what went back, by ceiling (empty for a root scope), or None when it was closed
    already. Finished, failed or abandoned alike: `reason` says which."""
    with transaction.atomic():
        parent_id = Scope.objects.filter(id=scope_id).values_list("parent_id", flat=True).first()
        if parent_id is not None:
            # Ancestors' rows before the scope's: the order scope_open takes them in.
            Scope.objects.select_for_update().filter(id=parent_id).first()
        return _close(scope_id, now=now, reason=reason)


def _close(scope_id: str, *, now: datetime, reason: str) -> dict[str, int] | None:
    scope = Scope.objects.select_for_update().filter(id=scope_id).first()
    if scope is None or scope.closed_at is not None:
        return None
    for child in list(Scope.objects.filter(parent_id=scope.id, closed_at__isnull=True)
                      .order_by("opened_at").values_list("id", flat=True)):
        _close(child, now=now, reason=f"its parent closed: {reason}"[:200])
    counters = {row.key.rsplit(":", 1)[1]: row for row in BudgetCounter.objects
                .select_for_update().filter(key__in=[counter_key(scope.id, d)
                                                     for d in DIMENSIONS])}
    returned: dict[str, int] = {}
    for dimension in DIMENSIONS:
        row = counters[dimension]
        unused = row.limit - row.used
        returned[dimension] = unused
        # Nothing more is ever taken from a closed scope: its counter is full. (The slots of
        # attempts still in flight are not given back here: each goes back when its attempt
        # ends, `scope_leave`.)
        BudgetCounter.objects.filter(key=row.key).update(used=F("limit"))
        if scope.parent_id is not None and unused:
            budget_adjust(key=counter_key(scope.parent_id, dimension), delta=-unused)
    Scope.objects.filter(id=scope.id).update(closed_at=now, close_reason=reason[:200],
                                             returned=returned if scope.parent_id else {})
    return returned if scope.parent_id else {}


def scopes_close_for(*, execution_id: str, now: datetime, reason: str) -> int:
    """Close every open root scope of the execution (and so everything inside it)."""
    roots = list(Scope.objects.filter(execution_id=execution_id, parent__isnull=True,
                                      closed_at__isnull=True).values_list("id", flat=True))
    return sum(scope_close(root, now=now, reason=reason) is not None for root in roots)


def scopes_sweep(*, now: datetime, limit: int = 100) -> int:
    """The beat: close scopes whose holder's lease lapsed (a killed worker) and the open scopes
    of runs that ended. Answers how many it closed."""
    lapsed = list(Scope.objects.filter(closed_at__isnull=True, lease_expires_at__lt=now)
                  .order_by("opened_at").values_list("id", flat=True)[:limit])
    closed = sum(scope_close(scope_id, now=now, reason="its holder's lease lapsed") is not None
                 for scope_id in lapsed)
    ended = list(Scope.objects.filter(
        closed_at__isnull=True, parent__isnull=True,
        execution__state__in=[str(s) for s in EXECUTION_ENDED]).values_list("id", flat=True)[
            :limit])
    closed += sum(scope_close(scope_id, now=now, reason="its run ended") is not None
                  for scope_id in ended)
    return closed


#: The limit of a principal's `claims:` counter: it only counts, and is the row every claim of the
#: principal locks (docs/workflows.md#ceilings), so it never fills.
CLAIMS_UNBOUNDED = 2**62


def principal_claims_counter(principal_id: str) -> list[tuple[str, int]]:
    """The counter the claim adds to its budget's counters while the per-principal concurrency
    limit is on: `claims:<principal>` counts the principal's claims, and its row, locked by the
    budget's own upsert (no round trip of its own), is what serializes the principal's claims
    for `principal_concurrency_take`. Nothing while the limit is off."""
    if int(settings.CONCURRENT_OPERATIONS_PER_PRINCIPAL) <= 0:
        return []
    return [(f"claims:{principal_id}", CLAIMS_UNBOUNDED)]


def principal_concurrency_take(*, principal_id: str, operation_id: str) -> None:
    """The per-principal concurrency limit (`CONCURRENT_OPERATIONS_PER_PRINCIPAL`, 0: off),
    inside the claim's transaction, after the budget's counters (with
    `principal_claims_counter`) are taken: the principal's operations claimed and not settled
    (attempts in flight, or between attempts) stay below it, or the claim is `budget_exhausted`
    naming `concurrency` and rolls back whole. The count is the store's own (`claimed`
    operations), so a slot goes back when the operation settles, however it settles, and a
    killed worker's operation keeps its slot until reconciliation settles it (its effect may
    still be under way). Two claims cannot both see the last free slot: each holds the
    principal's `claims:` counter row, locked by the budget's upsert, until it commits (on
    SQLite the claim's BEGIN IMMEDIATE serializes them anyway). One statement when on."""
    limit = int(settings.CONCURRENT_OPERATIONS_PER_PRINCIPAL)
    if limit <= 0:
        return
    in_flight = store.in_flight(principal_id=principal_id, operation_id=operation_id)
    if in_flight >= limit:
        raise Denial(DenialCode.BUDGET_EXHAUSTED, budget="concurrency", scope="principal",
                     limit=limit, in_flight=in_flight)
