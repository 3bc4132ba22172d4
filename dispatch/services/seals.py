"""The sealed audit read back from the database (docs/audit-seal.md), for `audit_verify`,
`audit_export` and `audit_prove`; the sealer (`dispatch.services.sealer`) is the only writer.

- verification (docs/audit-seal.md#verification): the first event or block changed, removed or
  inserted, per tenant; the chain held to its head row, and to the checkpoints given
  (`--checkpoint`).
- export (docs/audit-seal.md#export): a tenant's sealed events, then its blocks, as JSON Lines
  that `audit_verify --file F --keys K` checks with only the public keys
  (`dispatch.audit_offline`, which runs before Django is set up and so lives apart).
- proof (docs/audit-seal.md#merkle): an inclusion proof of one sealed event in its block,
  checkable against the block's signed root with only the public keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from dispatch.models import AuditBlock, AuditEvent, AuditHead, AuditSeal, Tenant
from dispatch.services.sealer import block_record, digest_of, event_record, rfc3339, seal_lag
from dispatch.signing import signing_keys
from protocols.auditseal import (
    GENESIS,
    block_digest,
    check_chain,
    check_checkpoints,
    event_digest,
    merkle_proof,
)

# --- verification ---


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


# --- export ---

FORMAT = "audit-seal/1"


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def export_lines(tenant_id: str, *, since: datetime | None = None) -> Iterator[str]:
    """The header, every sealed event of the blocks sealed at or after `since` (all when None)
    in seq order, then those blocks in order; one JSON object per line, no newline inside."""
    blocks = AuditBlock.objects.filter(tenant_id=tenant_id).order_by("number")
    if since is not None:
        blocks = blocks.filter(sealed_at__gte=rfc3339(since))
    records = [block_record(b) for b in blocks]
    header = {"type": "export", "format": FORMAT, "tenant": tenant_id,
              "since": rfc3339(since) if since else None,
              "prev": records[0]["prev"] if records else GENESIS}
    yield _line(header)
    if records:
        seals = AuditSeal.objects.filter(tenant_id=tenant_id, seq__gte=records[0]["from_seq"],
                                         seq__lte=records[-1]["to_seq"]).order_by("seq")
        for chunk_start in range(0, seals.count(), 500):
            chunk = list(seals[chunk_start:chunk_start + 500])
            events = AuditEvent.objects.in_bulk([s.event_id for s in chunk])
            for seal in chunk:
                event = events.get(seal.event_id)
                if event is not None:  # a removed event is left out: the verifier names it
                    yield _line({"type": "event", **event_record(event, seal.seq)})
    for record in records:
        yield _line({"type": "block", **record})


# --- proof ---


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
