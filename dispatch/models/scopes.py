"""Nested ceilings (docs/design.md#budgets): a scope of a run reserves tool calls,
attempts and concurrency out of its enclosing scope when it starts; its owner is
`dispatch.services.ceilings`. What a scope may still spend lives in its `BudgetCounter` rows
(`scope:<id>:calls`, `…:attempts`, `…:concurrency`), never in a process."""

from __future__ import annotations

from django.db import models

from dispatch.models.base import Tenant, _id_field
from dispatch.models.executions import Execution


class Scope(models.Model):
    """One scope of an execution: the run itself (no parent) or a scope nested in another.

    Its ceilings were carved out of its parent's counters when it opened; `closed_at` is set
    once, by the close that gave its unused part back (`returned`). A scope whose `holder` is
    gone (its lease lapsed: the worker was killed) is closed by the sweep."""

    id = _id_field("scp")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="scopes")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="children")
    name = models.CharField(max_length=200)
    calls = models.PositiveIntegerField()
    attempts = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    holder = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    close_reason = models.CharField(max_length=200, blank=True, default="")
    returned = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["closed_at", "lease_expires_at"],
                                name="scope_open_lease")]
