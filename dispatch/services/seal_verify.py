"""`audit_verify` against the database (docs/audit-seal.md#verification): the first event or
block changed, removed or inserted, per tenant."""

from __future__ import annotations

from datetime import datetime

from dispatch.models import AuditBlock, AuditEvent, AuditSeal, Tenant
from dispatch.services.sealer import block_record, event_record, seal_lag
from dispatch.signing import signing_keys
from protocols.auditseal import check_chain, event_digest


def verify_tenant(tenant_id: str) -> str | None:
    """None when the tenant's chain verifies; else what is wrong, first found first."""
    keys = {k.kid: k.public for k in signing_keys()}
    seals = list(AuditSeal.objects.filter(tenant_id=tenant_id).order_by("seq"))
    events = {e.pk: e for e in AuditEvent.objects.filter(tenant_id=tenant_id)}
    records = []
    for seal in seals:
        event = events.pop(seal.event_id, None)
        if event is None:
            return f"event {seal.event_id} (seq {seal.seq}, block {seal.block}): removed"
        record = event_record(event, seal.seq)
        if event_digest(record) != seal.digest:
            return f"event {seal.event_id} (seq {seal.seq}, block {seal.block}): changed"
        records.append(record)
    blocks = [block_record(b) for b in
              AuditBlock.objects.filter(tenant_id=tenant_id).order_by("number")]
    present = {b["block"] for b in blocks}
    for number in sorted({s.block for s in seals}):
        if number not in present:
            return f"block {number}: removed (its events' seals name it)"
    problem = check_chain(records, blocks, keys)
    if problem:
        return problem
    if blocks:
        # Every event at least the lag older than the last seal should be sealed by now.
        cutoff = datetime.fromisoformat(blocks[-1]["sealed_at"]) - seal_lag()
        for event in sorted(events.values(), key=lambda e: (e.at, e.pk)):
            if event.at <= cutoff:
                return f"event {event.pk}: inserted (older than block {len(blocks)} and unsealed)"
    return None


def verify_all(tenant_id: str | None = None) -> dict[str, str | None]:
    tenants = [tenant_id] if tenant_id else list(
        Tenant.objects.order_by("id").values_list("id", flat=True))
    return {t: verify_tenant(t) for t in tenants}
