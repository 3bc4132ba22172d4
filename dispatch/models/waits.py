"""A workflow step that waits, parked in the store (docs/workflows.md#waiting-steps): its owner is
`dispatch.workflows.waits`."""

from __future__ import annotations

from django.db import models

from dispatch.models.base import ApprovalRequest, Tenant, _id_field
from dispatch.models.executions import Execution


class WorkflowWait(models.Model):
    """One parked step of a workflow execution: what it waits on (an approval's decision, a
    host input, an `approve` answer) and who resumes it now.

    `parked` until a wake-up claims it with one conditional UPDATE (`resuming`, `claimed_at`):
    of two wake-ups exactly one resumes the run. A resumed run that waits again on this step
    parks it again; one that passed it leaves it `resumed`. A `receive` or `approve` step's
    answer is `value`, written once (`delivered_at`) by the input service."""

    class Kind(models.TextChoices):
        APPROVAL = "approval"   # `request_approval`: the approval resolver decides
        RECEIVE = "receive"     # `receive`: a host message (JSON)
        APPROVE = "approve"     # `approve`: a human's yes or no (a Bool, never a permit)
        JOIN = "join"           # `parallel`, `race`, a parallel loop: its branches on workers
        SLOT = "slot"           # a dispatch at the run's concurrency ceiling: a slot to free

    class State(models.TextChoices):
        PARKED = "parked"
        RESUMING = "resuming"
        RESUMED = "resumed"
        REFUSED = "refused"     # the store cannot resume it (see `note`); its caller can

    id = _id_field("wwt")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    execution = models.ForeignKey(Execution, on_delete=models.PROTECT, related_name="waits")
    step = models.CharField(max_length=80)  # the step key in the workflow's journal
    kind = models.CharField(max_length=10, choices=Kind.choices)
    approval = models.ForeignKey(ApprovalRequest, null=True, blank=True,
                                 on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=10, choices=State.choices)
    value = models.JSONField(null=True, blank=True)
    delivered_by = models.CharField(max_length=150, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    parked_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["execution", "step"], name="one_wait_per_step"),
        ]
        indexes = [models.Index(fields=["state", "approval"])]
