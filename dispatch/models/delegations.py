"""A delegated workflow step's record (docs/design.md#delegation, bounded delegation): its owner is
`dispatch.services.delegations`."""

from __future__ import annotations

from django.db import models

from dispatch.models.base import Grant, Principal, Tenant, _id_field
from dispatch.models.executions import Execution


class Delegation(models.Model):
    """One delegated workflow step (docs/design.md#delegation): the child grant its
    sub-agent runs under, the budget carved out for it, and who runs the step now.

    A running step holds the lease (`holder`, `lease_expires_at`, renewed every sub-agent
    turn); a step that waits for a human holds none. `ended_at` is set once, by whoever ends
    the step (the step itself, however it ends, or reconciliation for a step whose worker
    died or whose run ended), in the transaction that revokes the grant and returns the unused
    budget. Written only by `dispatch.services.delegations`."""

    id = _id_field("dlg")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    execution = models.ForeignKey(Execution, on_delete=models.PROTECT,
                                  related_name="delegations")
    step = models.CharField(max_length=80)  # the step key in the workflow's journal
    agent = models.CharField(max_length=100)
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    grant = models.OneToOneField(Grant, on_delete=models.PROTECT, related_name="delegation")
    agent_execution = models.OneToOneField(Execution, on_delete=models.PROTECT,
                                           related_name="delegated_by")
    budget = models.PositiveIntegerField()
    carved_from = models.JSONField(default=list)  # the budget counters the carve-out left
    started_at = models.DateTimeField()
    holder = models.CharField(max_length=40, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=20, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["execution", "step"],
                                    name="one_delegation_per_step"),
        ]
        indexes = [models.Index(fields=["ended_at", "lease_expires_at"])]
