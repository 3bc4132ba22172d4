"""`audit_prove EVENT_ID` (docs/audit-seal.md#merkle): an inclusion proof of one sealed event in
its block, checkable against the block's signed root with only the public keys."""

from __future__ import annotations

from typing import Any

from dispatch.models import AuditBlock, AuditEvent, AuditSeal
from dispatch.services.sealer import block_record, event_record
from protocols.auditseal import event_digest, merkle_proof


def event_proof(event_id: int) -> dict[str, Any] | None:
    """`{"event", "event_digest", "block", "proof"}`, or None for an event not (yet) sealed."""
    seal = AuditSeal.objects.filter(event_id=event_id).first()
    if seal is None:
        return None
    block = AuditBlock.objects.get(tenant_id=seal.tenant_id, number=seal.block)
    seals = list(AuditSeal.objects.filter(tenant_id=seal.tenant_id, seq__gte=block.from_seq,
                                          seq__lte=block.to_seq).order_by("seq"))
    events = AuditEvent.objects.in_bulk([s.event_id for s in seals])
    digests = [event_digest(event_record(events[s.event_id], s.seq)) for s in seals]
    record = event_record(AuditEvent.objects.get(pk=event_id), seal.seq)
    return {"event": record, "event_digest": event_digest(record), "block": block_record(block),
            "proof": merkle_proof(digests, seal.seq - block.from_seq)}
