"""The runs of the embedded runtime (docs/design.md#outcomes): an execution and its journal, the
transcript entries written before the loop goes on. Workflow runs, agent loops and delegated
sub-agents each have one."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from dispatch.models.base import Principal, Tenant, _id_field


class Execution(models.Model):
    """An agent execution of the embedded runtime: the parent of its tool operations."""

    class State(models.TextChoices):
        RUNNING = "running"
        WAITING = "waiting"
        FINISHED = "finished"
        TIMED_OUT = "timed_out"
        CANCELLED = "cancelled"

    id = _id_field("exe")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    principal = models.ForeignKey(Principal, on_delete=models.PROTECT, related_name="+")
    adapter = models.CharField(max_length=100)
    # What rebuilds the model adapter (`ModelAdapter.config()`), and its digest with the
    # adapter's name: a resume under another script or model configuration is refused.
    adapter_config = models.JSONField(default=dict)
    adapter_fingerprint = models.CharField(max_length=71, blank=True, default="")
    state = models.CharField(max_length=10, choices=State.choices)
    final = models.TextField(blank=True, default="")
    # When the run times out, if it declared `deadline_s` (docs/workflows.md#deadlines).
    deadline_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # The tree of a run (docs/design.md#run-trees): the execution that opened this one (an
    # agent step's loop, a delegated sub-agent: the workflow run) and the tree's root; both
    # null for a root. Every check that keeps a run's promise walks this path.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="children")
    root = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                             related_name="+")
    # The authority this execution declares (a workflow's `authority:`, as
    # `[{"operations": [...], "scope": {...}}]`); null: it declares none, and only its grants
    # and its ancestors' declarations bound it.
    authority = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()


class TranscriptEntry(models.Model):
    """The adapter transcript, persisted before the loop continues (docs/design.md#outcomes)."""

    class Kind(models.TextChoices):
        TOOL_CALL = "tool_call"
        TOOL_RESULT = "tool_result"
        FINAL = "final"
        INPUT = "input"  # what a workflow gave a delegated sub-agent (its first entry)

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="entries")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    call_id = models.CharField(max_length=80, blank=True, default="")
    payload = models.JSONField()
    at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["execution", "seq"], name="one_entry_per_seq"),
            models.UniqueConstraint(fields=["execution", "call_id", "kind"],
                                    condition=~Q(call_id=""), name="one_entry_per_call_kind"),
        ]
