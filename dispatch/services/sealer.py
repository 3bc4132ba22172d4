"""The sealer (docs/audit-seal.md#sealing): the only writer of the audit chain.

Rule. A pass takes, per tenant, the events that have no seal yet and whose `at` is at least
`AUDIT_SEAL_LAG` seconds old, in `(at, id)` order, gives them the next seqs and appends one block
(at most `AUDIT_SEAL_BATCH` events) signed with the current key. Only committed rows are visible
to it, and the lag (longer than any write transaction) makes an event that commits late with an
earlier `at` still be in its time window; whatever happens, selection is by "has no seal", never
by a watermark, so an event that commits after a pass is sealed by the next one and none is ever
skipped. One pass per tenant at a time, under the named lease `audit-seal:<tenant>`: two beats
never fork a chain, and the audit write path takes no lock at all.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dispatch.models import AuditBlock, AuditEvent, AuditSeal
from dispatch.services.leases import lease
from dispatch.signing import current_key
from protocols.auditseal import GENESIS, block_digest, event_digest, merkle_root, sign_block


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_record(event: AuditEvent, seq: int) -> dict[str, Any]:
    """The event's sealed fields, as they are hashed and exported."""
    return {"id": event.pk, "tenant": event.tenant_id, "seq": seq, "at": rfc3339(event.at),
            "kind": event.kind, "actor": event.actor, "operation_id": event.operation_id,
            "proposal_id": event.proposal_id, "digest": event.digest, "details": event.details}


def block_record(block: AuditBlock) -> dict[str, Any]:
    return {"tenant": block.tenant_id, "block": block.number, "from_seq": block.from_seq,
            "to_seq": block.to_seq, "root": block.root, "prev": block.prev,
            "sealed_at": block.sealed_at, "signature": block.signature}


def seal_lag() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "AUDIT_SEAL_LAG", 10)))


def seal_tenant(tenant_id: str, *, now: datetime | None = None) -> int:
    """Seal one batch of a tenant's ripe events; the number sealed (0 if busy or none)."""
    now = now or timezone.now()
    batch = int(getattr(settings, "AUDIT_SEAL_BATCH", 1000))
    with lease(f"audit-seal:{tenant_id}", ttl=60) as held:
        if not held:
            return 0
        sealed = AuditSeal.objects.filter(tenant_id=tenant_id).values("event_id")
        events = list(AuditEvent.objects.filter(tenant_id=tenant_id, at__lte=now - seal_lag())
                      .exclude(id__in=sealed).order_by("at", "id")[:batch])
        if not events:
            return 0
        last = AuditBlock.objects.filter(tenant_id=tenant_id).order_by("-number").first()
        number = last.number + 1 if last else 1
        first_seq = last.to_seq + 1 if last else 1
        digests = [event_digest(event_record(e, first_seq + i)) for i, e in enumerate(events)]
        record: dict[str, Any] = {
            "tenant": tenant_id, "block": number, "from_seq": first_seq,
            "to_seq": first_seq + len(events) - 1, "root": merkle_root(digests),
            "prev": block_digest(block_record(last)) if last else GENESIS,
            "sealed_at": rfc3339(timezone.now())}
        key = current_key()
        record["signature"] = sign_block(record, key.kid, key.private)
        with transaction.atomic():
            AuditBlock.objects.create(
                tenant_id=tenant_id, number=number, from_seq=record["from_seq"],
                to_seq=record["to_seq"], root=record["root"], prev=record["prev"],
                sealed_at=record["sealed_at"], signature=record["signature"])
            AuditSeal.objects.bulk_create([
                AuditSeal(event_id=e.pk, tenant_id=tenant_id, seq=first_seq + i, block=number,
                          digest=digests[i]) for i, e in enumerate(events)])
        return len(events)


def seal_all(*, now: datetime | None = None) -> int:
    """One pass over every tenant with ripe unsealed events, until none is left."""
    now = now or timezone.now()
    total = 0
    while True:
        sealed = AuditSeal.objects.values("event_id")
        tenants = (AuditEvent.objects.filter(at__lte=now - seal_lag())
                   .exclude(id__in=sealed).values_list("tenant_id", flat=True).distinct())
        done = sum(seal_tenant(t, now=now) for t in list(tenants))
        total += done
        if not done:
            return total
