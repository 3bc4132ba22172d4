"""Evidence receipts and attestations (docs/design.md#evidence): records of the store that only the
dispatcher writes, in the transaction that records a fetch's or an attest's completion
(`dispatch.services.evidence`). Immutable: no state, never updated."""

from __future__ import annotations

from django.db import models

from dispatch.models.base import Operation, Resource, Tenant, _id_field


class Receipt(models.Model):
    """An evidence receipt (docs/design.md#evidence): issued by the dispatcher alone, in the
    transaction that records a `research.fetch` operation's completion. Immutable: never updated."""

    id = _id_field("evr")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    question = models.ForeignKey(Resource, on_delete=models.PROTECT, related_name="+")
    question_revision = models.PositiveIntegerField()
    source = models.CharField(max_length=2000)
    content_digest = models.CharField(max_length=71)
    retrieved_at = models.DateTimeField()
    operation = models.OneToOneField(Operation, on_delete=models.PROTECT,
                                     related_name="receipt")

    class Meta:
        indexes = [models.Index(fields=["question", "retrieved_at"], name="receipt_question")]


class ReceiptContent(models.Model):
    """The exact bytes a receipt's digest is over, kept beside the receipt (by reference),
    never in the audit."""

    receipt = models.OneToOneField(Receipt, primary_key=True, on_delete=models.PROTECT,
                                   related_name="content")
    content = models.BinaryField()


class Attestation(models.Model):
    """A trusted validator's judgement of one exact report revision under one policy
    (docs/design.md#evidence), issued in the transaction that records an `evidence.attest`
    operation's completion. A recorded judgement, never a universal "verified"; immutable."""

    class Result(models.TextChoices):
        PASS = "pass"  # noqa: S105 (a verdict, not a password)
        FAIL = "fail"

    id = _id_field("att")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    validator = models.CharField(max_length=120)
    policy = models.CharField(max_length=100)
    report = models.ForeignKey(Resource, on_delete=models.PROTECT, related_name="+")
    report_revision = models.PositiveIntegerField()
    report_digest = models.CharField(max_length=71)
    evidence = models.JSONField(default=list)  # the receipt ids inspected, in citation order
    result = models.CharField(max_length=4, choices=Result.choices)
    findings = models.JSONField(default=list)  # [{"citation", "message"}]
    issued_at = models.DateTimeField()
    operation = models.OneToOneField(Operation, on_delete=models.PROTECT,
                                     related_name="attestation")

    class Meta:
        indexes = [models.Index(fields=["report", "report_revision"],
                                name="attestation_report")]
