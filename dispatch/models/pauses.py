"""An admin's emergency stop (docs/design.md#approval-policies): its owner is
`dispatch.services.pauses`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from dispatch.models.base import Principal, Tenant, _id_field


class Pause(models.Model):
    """A tenant, one contract (`operation`) or one agent paused, from `paused_at` until
    `lifted_at`: while it is in force every claim and every attempt start in its scope is
    refused (`paused`). Blank `operation` and no `agent` pause the whole tenant; both set pause
    that agent's calls of that contract. Who paused and who resumed are kept as the audit names
    them. Written only by `dispatch.services.pauses`."""

    id = _id_field("pau")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    operation = models.CharField(max_length=200, blank=True, default="")
    agent = models.ForeignKey(Principal, null=True, blank=True, on_delete=models.PROTECT,
                              related_name="+")
    paused_by = models.CharField(max_length=150)
    paused_at = models.DateTimeField()
    reason = models.CharField(max_length=500, blank=True, default="")
    lifted_by = models.CharField(max_length=150, blank=True, default="")
    lifted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "lifted_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(lifted_at__isnull=True) | Q(lifted_at__gte=models.F("paused_at")),
                name="pause_lifted_after_set"),
        ]
