"""The emergency stop (docs/design.md#approval-policies): an admin pauses a tenant, one contract
or one agent, and from that commit on every claim and every attempt start in its scope is
refused with `paused`. Pending approvals stay, and can still be decided; a claimed operation
keeps its claim and waits; resuming lets it go on. Both moves are audited (`pause.set`,
`pause.lifted`).

`pause_check` is the one place that decides the refusal. It runs inside the claim's and the
attempt start's own transaction and reads the tenant's `pauses` share-locked, the row that
`pause_set` and `pause_lift` update: a pause that commits before the claim does is seen by
it, and a claim that read first holds the pause back until it commits (PostgreSQL). SQLite's
transactions begin IMMEDIATE, so no pause commits in between at all.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q, QuerySet

from dispatch.failpoints import failpoint
from dispatch.models import Attempt, Execution, Operation, Pause, Principal, Tenant
from dispatch.queue import execute_on_commit
from dispatch.runtime import get_runtime
from dispatch.services.audit import audit_record
from dispatch.services.authority import require_role
from dispatch.store import pauses as store
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONObject
from protocols.lifecycle import OperationState
from protocols.roles import Role

log = logging.getLogger(__name__)

#: At most this many waiting operations are handed back to the workers by one resume;
#: reconciliation requeues any others (a claim with no attempt running, past its timeout).
RESUME_BATCH = 500


def pause_check(*, tenant_id: str, operation: str, agent_id: str,
                execution_id: str | None = None) -> None:
    """Raise `paused` if a pause in force covers `agent_id`'s `operation` in `tenant_id`, or the
    `operation` of the agent whose run encloses `execution_id` (a sub-agent's action pauses with
    its run's agent: docs/design.md#run-trees).

    Inside the transaction of the claim or the attempt start it guards, before it writes."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("pause_check runs inside the claim's or attempt's transaction")
    # The tenant's row, share-locked: a pause or resume that committed first is read here
    # (PostgreSQL re-reads a row it waited for); one that comes later waits for this commit.
    if not store.tenant_pauses(tenant_id=tenant_id):
        return  # the usual case: one read, nothing paused
    agents = {agent_id}
    if execution_id:
        agents |= set(Execution.objects.filter(id=execution_id, principal_id=agent_id,
                                               root__isnull=False)
                      .values_list("root__principal_id", flat=True))
    pause = (_in_force(tenant_id)
             .filter(Q(operation="") | Q(operation=operation))
             .filter(Q(agent__isnull=True) | Q(agent_id__in=sorted(agents)))
             .select_related("agent").order_by("paused_at", "id").first())
    if pause is not None:
        raise Denial(DenialCode.PAUSED, **pause_details(pause))


def attempt_paused(operation: Operation) -> bool:
    """Whether a pause in force holds back the next attempt of `operation`: it is not started,
    and the operation keeps its claim, waiting for the resume. Inside the attempt start's
    transaction, as `pause_check`."""
    try:
        pause_check(tenant_id=operation.tenant_id, operation=operation.operation,
                    agent_id=operation.principal_id, execution_id=operation.execution_id)
    except Denial as refusal:
        log.info("attempt %d of %s held back: paused (%s)", operation.attempts_made + 1,
                 operation.id, refusal.details.get("scope"))
        return True
    return False


def pause_details(pause: Pause) -> JSONObject:
    """What a refusal, the audit and the console's banner say of a pause."""
    return {"pause_id": pause.id, "scope": pause_scope(pause), "paused_by": pause.paused_by,
            "paused_at": pause.paused_at.isoformat(),
            **({"reason": pause.reason} if pause.reason else {})}


def pause_scope(pause: Pause) -> str:
    """`the tenant`, `contract payments.transfer`, `agent support-bot`, or both of the last."""
    parts = []
    if pause.operation:
        parts.append(f"contract {pause.operation}")
    if pause.agent is not None:
        parts.append(f"agent {pause.agent.name}")
    return " of ".join(parts) if parts else "the tenant"


def pause_set(
    *, actor: str | Principal, tenant: Tenant, operation: str = "",
    agent: Principal | None = None, reason: str = "", now: datetime,
) -> tuple[Pause, bool]:
    """Pause `tenant`, or its `operation`, or its `agent` (or that agent's `operation`), and
    audit it; the pause in force for exactly that scope and whether this call set it (a
    second pause of one scope changes nothing). `actor`: an admin of the tenant (checked), or
    the name the host's own commands act under."""
    name = _authorized(actor, tenant, operation, agent)
    failpoint("pause.before_transaction")
    with transaction.atomic(durable=True):
        _lock(tenant)  # two pauses of one scope cannot both be set
        existing = _exactly(tenant, operation, agent).first()
        if existing is not None:
            return existing, False
        Tenant.objects.filter(id=tenant.id).update(pauses=F("pauses") + 1)
        pause = Pause.objects.create(tenant=tenant, operation=operation, agent=agent,
                                     paused_by=name, paused_at=now, reason=reason[:500])
        audit_record(tenant_id=tenant.id, kind="pause.set", actor=name, at=now,
                     details=pause_details(pause))
    return pause, True


def pause_lift(
    *, actor: str | Principal, tenant: Tenant, operation: str = "",
    agent: Principal | None = None, now: datetime,
) -> Pause:
    """Resume exactly the scope one pause named, audited; `not_found` if none is in force.
    Once it commits, the operations it held back (claimed, no attempt running) go back to the
    workers; another pause still in force over them refuses them again."""
    name = _authorized(actor, tenant, operation, agent)
    with transaction.atomic(durable=True):
        _lock(tenant)
        pause = _exactly(tenant, operation, agent).first()
        if pause is None:
            raise Denial(DenialCode.NOT_FOUND, f"Nothing is paused with exactly this scope "
                         f"({_described(operation, agent)}); resume names what pause named.",
                         kind="pause", id=_described(operation, agent))
        Tenant.objects.filter(id=tenant.id).update(pauses=F("pauses") - 1)
        Pause.objects.filter(id=pause.id).update(lifted_by=name, lifted_at=now)
        pause.lifted_by, pause.lifted_at = name, now
        audit_record(tenant_id=tenant.id, kind="pause.lifted", actor=name, at=now,
                     details={**pause_details(pause), "lifted_by": name})
        for operation_id in _waiting(pause)[:RESUME_BATCH]:
            execute_on_commit(operation_id)
    return pause


def _authorized(actor: str | Principal, tenant: Tenant, operation: str,
                agent: Principal | None) -> str:
    """The actor's name, once it may pause this scope; the scope's names checked."""
    if isinstance(actor, Principal):
        require_role(actor, Role.ADMIN)
        if actor.tenant_id != tenant.id:
            raise Denial(DenialCode.NOT_FOUND, kind="tenant", id=tenant.name)
        actor = actor.name
    if operation:
        get_runtime().require_operations([operation])
    if agent is not None and (agent.tenant_id != tenant.id
                              or agent.kind != Principal.Kind.AGENT):
        raise Denial(DenialCode.NOT_FOUND, kind="agent", id=agent.name)
    return actor


def _lock(tenant: Tenant) -> None:
    """The tenant's row, locked for update until the pause or resume commits: claims that
    read it first finish first, and every later one sees the change (`pause_check`)."""
    list(Tenant.objects.select_for_update().filter(id=tenant.id).values_list("id"))


def _in_force(tenant_id: str) -> QuerySet[Pause]:
    return Pause.objects.filter(tenant_id=tenant_id, lifted_at__isnull=True)


def _exactly(tenant: Tenant, operation: str, agent: Principal | None) -> QuerySet[Pause]:
    return _in_force(tenant.id).filter(operation=operation, agent=agent)


def _described(operation: str, agent: Principal | None) -> str:
    return " of ".join([*([f"contract {operation}"] if operation else []),
                        *([f"agent {agent.name}"] if agent else [])]) or "the tenant"


def _waiting(pause: Pause) -> QuerySet[Operation, str]:
    """The ids of the claimed operations in the pause's scope with no attempt running."""
    waiting = Operation.objects.filter(tenant_id=pause.tenant_id,
                                       state=OperationState.CLAIMED).exclude(
        id__in=Attempt.objects.filter(ended_at__isnull=True).values("operation_id"))
    if pause.operation:
        waiting = waiting.filter(operation=pause.operation)
    if pause.agent_id is not None:
        # The agent's own, and its sub-agents' (their runs are its: docs/design.md#run-trees).
        trees = Execution.objects.filter(root__principal_id=pause.agent_id).values("id")
        waiting = waiting.filter(Q(principal_id=pause.agent_id) | Q(execution_id__in=trees))
    return waiting.order_by("updated_at").values_list("id", flat=True)
