"""Permits that stop resting on authority (spec §6.3): revoking a grant revokes the issued,
unclaimed permits minted under it. The human's decision stays what it was (granted); the
authority to act on it is gone, and a dispatch hears `authority_revoked`. A claimed permit has
run; revocation never undoes it."""

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
    transition,
)

PERMIT_REVOKED = transition(PERMIT_LIFECYCLE, PermitState.ISSUED, PermitEvent.REVOKE)


def permits_revoke_resting_on(
    *, grant_ids: Collection[str], actor: str, now: datetime
) -> list[str]:
    """Inside the revocation's transaction: revoke every issued permit minted under one of
    `grant_ids` and release its resources; return the permits' ids.

    The conditional update on `state=issued` serializes with the claim's own (a permit row
    lock on PostgreSQL, the write lock on SQLite): a claim that committed first keeps its
    permit, and one that comes later finds the permit revoked.
    """
    issued = list(Permit.objects.filter(grant_id__in=list(grant_ids), state=PermitState.ISSUED)
                  .select_related("proposal"))
    revoked: list[str] = []
    for permit in issued:
        moved = Permit.objects.filter(id=permit.id, state=PermitState.ISSUED).update(
            state=PERMIT_REVOKED)
        if moved != 1:
            continue  # claimed meanwhile: it ran, and revocation does not undo it
        resources_release(proposal=permit.proposal, event=ResourceEvent.EXPIRE, now=now)
        audit_record(tenant_id=permit.tenant_id, kind="permit.revoked", actor=actor, at=now,
                     proposal_id=permit.proposal_id, digest=permit.digest,
                     details={"approval_id": permit.approval_id, "permit_id": permit.id,
                              "reason": f"grant {permit.grant_id} was revoked"})
        revoked.append(permit.id)
    return revoked
