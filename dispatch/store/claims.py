"""The claim's locks and, on PostgreSQL, its one round trip (docs/design.md#dispatcher steps 6-7,
docs/design.md#permits).

The winner of a claim is decided by a conditional UPDATE whose row count is read: the permit's
one-shot claim (only an issued, unexpired permit bound to this proposal's digest moves, and
records when), or, for an action without a permit, the proposal's row locked while it is not
cancelled (what every attempt after the first contends on with a cancellation, too).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatch.models import Permit
from dispatch.store import audit, operations
from dispatch.store.sql import is_postgres, rows, run, statement, value
from protocols.lifecycle import PERMIT_LIFECYCLE, PermitEvent, PermitState, transition

_ISSUED = PermitState.ISSUED
_CLAIMED = transition(PERMIT_LIFECYCLE, _ISSUED, PermitEvent.CLAIM)
PERMIT_CLAIM = statement(
    "permit.claim",
    f"UPDATE \"dispatch_permit\" SET \"state\" = '{_CLAIMED.value}', \"claimed_at\" = %(now)s "
    'WHERE "id" = %(permit_id)s AND "proposal_id" = %(proposal_id)s AND "digest" = %(digest)s '
    f"AND \"state\" = '{_ISSUED.value}' AND \"expires_at\" > %(now)s")
LOCK_UNCANCELLED = statement(
    "proposal.lock_uncancelled",
    'UPDATE "dispatch_proposal" SET "cancelled_at" = NULL '
    'WHERE "id" = %(proposal_id)s AND "cancelled_at" IS NULL')
#: PostgreSQL, an action without resources to move: the lock (of the permit, or of the
#: uncancelled proposal), the intent and its audit row in one round trip, each written only if
#: the one before it was.
_PG_CLAIM = ("WITH lock AS ({lock} RETURNING 1), "
             f"op AS ({operations.insert_if('lock')}), au AS ({audit.insert_if('op')}) "
             "SELECT count(*) FROM lock")
_PG_CLAIM_PERMIT = statement("claim.permit", vendor="postgresql",
                             sql=_PG_CLAIM.format(lock=PERMIT_CLAIM))
_PG_CLAIM_UNCANCELLED = statement("claim.uncancelled", vendor="postgresql",
                                  sql=_PG_CLAIM.format(lock=LOCK_UNCANCELLED))
#: PostgreSQL, an action whose resources move: after the lock and the resources'
#: compare-and-swaps (each answered on its own), the intent and its audit row in one round trip.
_PG_RECORD = statement("claim.record", vendor="postgresql",
                       sql=f"WITH op AS ({operations.INSERT} RETURNING 1) "
                       f"{audit.insert_if('op')}")


def lock_uncancelled(*, proposal_id: str) -> bool:
    """Lock proposal `proposal_id`'s row while it is not cancelled; False: it is cancelled."""
    return run(LOCK_UNCANCELLED, {"proposal_id": proposal_id}) == 1


def _lock(*, proposal_id: str, permit_id: str | None, digest: str,
          now: datetime) -> tuple[str, str, dict[str, Any]]:
    params = {"proposal_id": proposal_id, "permit_id": permit_id, "digest": digest,
              "now": value(Permit, "claimed_at", now)}
    if permit_id is None:
        return LOCK_UNCANCELLED, _PG_CLAIM_UNCANCELLED, params
    return PERMIT_CLAIM, _PG_CLAIM_PERMIT, params


def lock(*, proposal_id: str, permit_id: str | None, digest: str, now: datetime) -> bool:
    """Claim permit `permit_id` (None: lock the uncancelled proposal); whether it held."""
    sql, _, params = _lock(proposal_id=proposal_id, permit_id=permit_id, digest=digest, now=now)
    return run(sql, params) == 1


def claim(*, operation: dict[str, Any], digest: str, now: datetime,
          event: audit.AuditRow) -> bool:
    """PostgreSQL, in one round trip: the lock (`lock`), then the operation (`operations.
    claimed`) and its audit `event`, each only if the one before it was written; whether the
    lock held. An `IntegrityError` if the proposal has an operation already."""
    _, sql, params = _lock(proposal_id=operation["proposal_id"],
                           permit_id=operation["permit_id"], digest=digest, now=now)
    ((locked,),) = rows(sql, {**operation, **params, **event.params})
    return bool(locked == 1)


def record(*, operation: dict[str, Any], event: audit.AuditRow) -> None:
    """Write the claim's operation (`operations.claimed`) and its audit `event`; an
    `IntegrityError` if the proposal has an operation already. One round trip on PostgreSQL."""
    if is_postgres():
        run(_PG_RECORD, {**operation, **event.params})
        return
    operations.insert(operation)
    audit.append(event)
