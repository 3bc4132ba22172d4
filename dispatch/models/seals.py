"""The sealed audit chain (docs/audit-seal.md): blocks and per-event seals, written only by the
sealer (dispatch/services/sealer.py).

Seals live in their own table rather than as columns of `AuditEvent`: the audit table stays
append-only and hot (every write path inserts into it and nothing updates it), the sealer only
inserts rows here, and a tamper with either table is visible against the other. References are
plain integers without database constraints on purpose: deleting an event by raw SQL must leave
its seal to name it, and removing a block must leave the seals that name it.
"""

from __future__ import annotations

from django.db import models

from dispatch.models.base import Tenant


class AuditBlock(models.Model):
    """One signed block of a tenant's chain: events `from_seq..to_seq` under a Merkle root."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    number = models.PositiveBigIntegerField()
    from_seq = models.PositiveBigIntegerField()
    to_seq = models.PositiveBigIntegerField()
    root = models.CharField(max_length=71)
    prev = models.CharField(max_length=71)
    # The exact string that was signed (RFC 3339 UTC, microseconds), not a re-rendered datetime.
    sealed_at = models.CharField(max_length=32)
    signature = models.JSONField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "number"],
                                               name="audit_block_number")]


class AuditSeal(models.Model):
    """An event's place in the chain: its per-tenant seq, its block and its digest when sealed."""

    event_id = models.BigIntegerField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    seq = models.PositiveBigIntegerField()
    block = models.PositiveBigIntegerField()
    digest = models.CharField(max_length=71)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "seq"], name="audit_seal_seq")]
