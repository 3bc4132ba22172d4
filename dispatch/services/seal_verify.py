"""`audit_verify` against the database (docs/audit-seal.md#verification): the first event or
block changed, removed or inserted, per tenant; the chain held to its head row, and to the
checkpoints given (`--checkpoint`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dispatch.models import AuditBlock, AuditEvent, AuditHead, AuditSeal, Tenant
from dispatch.services.sealer import block_record, digest_of, event_record, seal_lag
from dispatch.signing import signing_keys
from protocols.auditseal import (
    GENESIS,
    block_digest,
    check_chain,
    check_checkpoints,
    event_digest,
)


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
    last_number = blocks[-1]["block"] if blocks else 0
    last_digest = block_digest(blocks[-1]) if blocks else GENESIS
    head = AuditHead.objects.filter(tenant_id=tenant_id).first()
    if head is None and blocks:
        return f"block {last_number}: the chain has no head (its head row was removed)"
    if head is not None and (head.block != last_number or head.digest != last_digest):
        return f"block {head.block}: the head names it with digest {head.digest}, the chain's " \
               f"last block is block {last_number} (blocks removed or rewritten)"
    if blocks:
        # Every event at least the lag older than the last seal should be sealed by now.
        cutoff = datetime.fromisoformat(blocks[-1]["sealed_at"]) - seal_lag()
        for event in sorted(events.values(), key=lambda e: (e.at, e.pk)):
            if event.at <= cutoff:
                return f"event {event.pk}: inserted (older than block {len(blocks)} and unsealed)"
    return None


def verify_checkpoints(checkpoints: Sequence[Mapping[str, Any]]) -> str | None:
    """The first checkpoint not signed by the deployment's keys, or whose block the database's
    chain lacks or holds with another digest; None when the chain holds them all."""
    keys = {k.kid: k.public for k in signing_keys()}

    def chain_digest(tenant_id: str, number: int) -> str | None:
        block = AuditBlock.objects.filter(tenant_id=tenant_id, number=number).first()
        return digest_of(block) if block is not None else None

    return check_checkpoints(checkpoints, keys, chain_digest)


def verify_all(tenant_id: str | None = None) -> dict[str, str | None]:
    tenants = [tenant_id] if tenant_id else list(
        Tenant.objects.order_by("id").values_list("id", flat=True))
    return {t: verify_tenant(t) for t in tenants}
