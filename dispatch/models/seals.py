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


class AuditHead(models.Model):
    """A tenant's head as the sealer left it: its last block's number and digest (0 and the
    genesis digest before the first). The sealer never seals when the chain's last block is not
    this head (docs/audit-seal.md#head); `mismatch` says what its last pass refused, "" when
    nothing (`console_audit_head_mismatch` counts the rows where it is not empty)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, primary_key=True,
                                  related_name="+")
    block = models.PositiveBigIntegerField()
    digest = models.CharField(max_length=71)
    mismatch = models.TextField(blank=True, default="")


class AuditCheckpoint(models.Model):
    """A signed checkpoint the sealer published (docs/audit-seal.md#checkpoints): the serving
    copy of `GET /api/v1/audit/checkpoints/`. The checkpoint log outside the database, and each
    witness's copy, are what an attacker of the database cannot reach."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    block = models.PositiveBigIntegerField()
    digest = models.CharField(max_length=71)
    sealed_at = models.CharField(max_length=32)
    kid = models.CharField(max_length=100)
    signature = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "block"],
                                               name="audit_checkpoint_block")]
