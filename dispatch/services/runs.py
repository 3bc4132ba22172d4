"""The worker-claim path (docs/design.md#write-transactions): the process that claims is the
process that runs the handler, so the claim and attempt 1 are one transaction, and the action
costs two commits where the handler runs (claim with attempt 1; the outcome).

A `dispatch_on_approval` grant commits the decision and the permit and enqueues
`proposal_run` (on commit); the worker claims with every re-check of the dispatcher, in one
transaction with attempt 1, runs the handler and records the outcome. A duplicate or
redelivered task loses the claim (`permit_claimed`, audited like any refused dispatch) and runs
nothing; a task lost before the claim leaves an issued permit, which reconciliation hands to
a worker again (`unclaimed_permits`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone

from dispatch.models import AuditEvent, Operation, Permit, Principal
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_claim_and_start
from dispatch.services.worker import Clock, operation_run
from dispatch.store import principals
from protocols.denials import Denial
from protocols.lifecycle import PermitState

log = logging.getLogger(__name__)


def proposal_run(
    *, principal: Principal, proposal_id: str, permit_id: str | None = None,
    now: datetime | None = None, clock: Clock = timezone.now,
) -> Operation:
    """Claim `proposal_id` for `principal` (at `now`, default the clock's) and run its handler
    here: two commits. Refusals are the dispatcher's (audited `dispatch.denied`), raised."""
    operation, started = proposal_claim_and_start(principal=principal, proposal_id=proposal_id,
                                                  permit_id=permit_id, now=now or clock())
    contract = get_runtime().registry.by_fingerprint(operation.contract_fingerprint)
    assert contract is not None  # the claim resolved it under this fingerprint
    return operation_run(operation, contract, started, clock=clock)


def proposal_run_approved(*, proposal_id: str, principal_id: str,
                          clock: Clock = timezone.now) -> Operation | None:
    """The worker's side of `dispatch_on_approval`: claim and run, or nothing when the claim
    is refused (the refusal is audited; the permit stays issued for the agent to dispatch and
    hear why)."""
    principal = principals.principal(id=principal_id)
    if principal is None:
        return None
    try:
        return proposal_run(principal=principal, proposal_id=proposal_id, clock=clock)
    except Denial as denial:
        log.info("dispatch on approval of %s refused: %s", proposal_id, denial.code.value)
        return None


def unclaimed_permits(*, now: datetime, grace: timedelta, limit: int) -> list[tuple[str, str]]:
    """(proposal id, principal id) of each `dispatch_on_approval` permit whose task was lost
    before its claim: issued at least `grace` ago, unexpired, its proposal not cancelled, no
    operation, and no refused dispatch since the permit was issued (a refusal waits for the
    agent, who hears why when it dispatches itself)."""
    refused = AuditEvent.objects.filter(proposal_id=OuterRef("proposal_id"),
                                        kind="dispatch.denied", at__gte=OuterRef("issued_at"))
    claimed = Operation.objects.filter(proposal_id=OuterRef("proposal_id"))
    found = Permit.objects.filter(
        state=PermitState.ISSUED, issued_at__lte=now - grace, expires_at__gt=now,
        proposal__dispatch_on_approval=True, proposal__cancelled_at__isnull=True,
    ).exclude(Exists(claimed)).exclude(Exists(refused)).order_by("issued_at")
    return list(found.values_list("proposal_id", "requester_id")[:limit])
