"""`audit_export` (docs/audit-seal.md#export): a tenant's sealed events, then its blocks, as
JSON Lines that `audit_verify --file F --keys K` checks with only the public keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from dispatch.models import AuditBlock, AuditEvent, AuditSeal
from dispatch.services.sealer import block_record, event_record, rfc3339
from protocols.auditseal import GENESIS

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
