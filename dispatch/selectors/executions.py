"""Read-only queries of executions (agent runs): the model usage one records
(docs/design.md#budgets).
"""

from __future__ import annotations

from decimal import Decimal

from dispatch.models import TranscriptEntry
from protocols.usage import Usage


def execution_usage(execution_id: str, *, principal_id: str) -> Usage:
    """The model usage an execution of `principal_id` records, summed over its turns
    (docs/design.md#budgets): what the adapter reported, accounting only. A proposal's
    `execution_id` is the caller's word, so only an execution of the proposal's own principal
    counts."""
    totals = {"input_tokens": 0, "output_tokens": 0}
    cost = Decimal(0)
    for payload in TranscriptEntry.objects.filter(
            execution_id=execution_id, execution__principal_id=principal_id,
            kind__in=[TranscriptEntry.Kind.TOOL_CALL, TranscriptEntry.Kind.FINAL],
    ).values_list("payload", flat=True):
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if usage:
            totals["input_tokens"] += int(usage.get("input_tokens", 0))
            totals["output_tokens"] += int(usage.get("output_tokens", 0))
            cost += Decimal(str(usage.get("cost", "0")))
    return Usage(**totals, cost=str(cost))
