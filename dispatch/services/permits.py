"""Permits (docs/design.md#permits): `permit_move` is the one owner of a permit's state.

A permit is issued by a grant (approvals), claimed once (the claim), or expires or is revoked
unused. Revoking a grant revokes the issued, unclaimed permits minted under it: the human's
decision stays what it was (granted), the authority to act on it is gone, and a dispatch
hears `authority_revoked`. A claimed permit has run; revocation never undoes it."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from dispatch.models import Permit
from dispatch.services.audit import audit_record
from dispatch.services.resources import resources_release
from protocols.lifecycle import (
    PERMIT_LIFECYCLE,
    PermitEvent,
    PermitState,
    ResourceEvent,
    sources,
    transition,
)


def permit_move(
    permit: Permit, event: PermitEvent, *, now: datetime, actor: str, reason: str = "",
    within: str | None = None,
) -> bool:
    """THE one owner of a permit's state (but its claim, `dispatch.store.claims.PERMIT_CLAIM`,
    which the claim's own statement makes): move `permit` by `event`, from the one state the
    table allows it from (every permit event leaves `issued`). Returns whether it moved; the
    caller's `permit` is updated when it did.

    One conditional UPDATE: of two movers of one permit (a claim and a revocation, say),
    exactly one finds it issued. A revocation releases the permit's resources and writes
    `permit.revoked` with `reason`, in the caller's transaction. `within` names the event of
    another record's owner that records this move instead, in the same transaction (an
    approval's `approval.expired` expires its permit, a cancelled proposal's
    `proposal.cancelled` revokes it: the replay reads them so); that owner releases the
    resources, and nothing more is written here. An expiry is always such a move.
    """
    if within is None and event is not PermitEvent.REVOKE:
        raise ValueError(f"a permit's '{event.value}' is recorded by the event it is part of")
    (source,) = sources(PERMIT_LIFECYCLE, event)
    target = transition(PERMIT_LIFECYCLE, source, event)
    if Permit.objects.filter(id=permit.id, state=source).update(state=target) != 1:
        return False
    permit.state = target
    if within is None:
        resources_release(proposal=permit.proposal, event=ResourceEvent.EXPIRE, actor=actor,
                          now=now)
        audit_record(tenant_id=permit.tenant_id, kind="permit.revoked", actor=actor, at=now,
                     proposal_id=permit.proposal_id, digest=permit.digest,
                     details={"approval_id": permit.approval_id, "permit_id": permit.id,
                              "reason": reason})
    return True


def permits_revoke_resting_on(
    *, grant_ids: Collection[str], actor: str, now: datetime
) -> list[str]:
    """Inside the revocation's transaction: revoke every issued permit minted under one of
    `grant_ids` (`permit_move`, which releases its resources); return the permits' ids.

    The conditional update on `state=issued` serializes with the claim's own (a permit row
    lock on PostgreSQL, the write lock on SQLite): a claim that committed first keeps its
    permit, and one that comes later finds the permit revoked.
    """
    issued = list(Permit.objects.filter(grant_id__in=list(grant_ids), state=PermitState.ISSUED)
                  .select_related("proposal"))
    # A permit claimed meanwhile has run, and revocation does not undo it.
    return [permit.id for permit in issued
            if permit_move(permit, PermitEvent.REVOKE, now=now, actor=actor,
                           reason=f"grant {permit.grant_id} was revoked")]
