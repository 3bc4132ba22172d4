"""Permits (spec §6.3): `permit_move` is the one owner of a permit's state.

A permit is issued by a grant (approvals), claimed once (the claim), or expires or is revoked
unused. Revoking a grant revokes the issued, unclaimed permits minted under it: the human's
decision stays what it was (granted), the authority to act on it is gone, and a dispatch
hears `authority_revoked`. A claimed permit has run; revocation never undoes it."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

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

#: The claim of a permit, in the claim's transaction (dispatch.services.claims): one-shot, only
#: an issued, unexpired permit bound to this proposal's digest moves, and records when.
_ISSUED = PermitState.ISSUED
_CLAIMED = transition(PERMIT_LIFECYCLE, _ISSUED, PermitEvent.CLAIM)
PERMIT_CLAIM = (
    f"UPDATE \"dispatch_permit\" SET \"state\" = '{_CLAIMED.value}', \"claimed_at\" = %s "
    'WHERE "id" = %s AND "proposal_id" = %s AND "digest" = %s '
    f"AND \"state\" = '{_ISSUED.value}' AND \"expires_at\" > %s"
)


def permit_move(*, event: PermitEvent, now: datetime, **match: Any) -> int:
    """Move the permits `match` selects by `event`, from the one state the table allows it
    from (every permit event leaves `issued`); returns how many moved, for the caller to read.

    A conditional update: of two movers of one permit (a claim and a revocation, say), exactly
    one finds it issued. A claim also records when (`claimed_at`).
    """
    (source,) = sources(PERMIT_LIFECYCLE, event)
    fields: dict[str, Any] = {"state": transition(PERMIT_LIFECYCLE, source, event)}
    if event is PermitEvent.CLAIM:
        fields["claimed_at"] = now
    return Permit.objects.filter(state=source, **match).update(**fields)


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
        if permit_move(event=PermitEvent.REVOKE, now=now, id=permit.id) != 1:
            continue  # claimed meanwhile: it ran, and revocation does not undo it
        resources_release(proposal=permit.proposal, event=ResourceEvent.EXPIRE, actor=actor,
                          now=now)
        audit_record(tenant_id=permit.tenant_id, kind="permit.revoked", actor=actor, at=now,
                     proposal_id=permit.proposal_id, digest=permit.digest,
                     details={"approval_id": permit.approval_id, "permit_id": permit.id,
                              "reason": f"grant {permit.grant_id} was revoked"})
        revoked.append(permit.id)
    return revoked
