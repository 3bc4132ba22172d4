"""The audit kinds the runtime writes and the trace replays (docs/design.md#audit): what each
operation event is called, the events that note an operation without moving it, and the detail
that lists a transaction's resource moves. Writers (`dispatch.services`) and the replay
(`protocols.trace`) both name them from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import OperationEvent, ResourceEvent

#: The audit kind each operation event writes: `operation_move` and the claim write these,
#: the replay reads them back.
OPERATION_EVENT_KINDS: Final[Mapping[OperationEvent, str]] = {
    OperationEvent.CLAIM: "permit.claimed",
    OperationEvent.COMPLETE: "operation.completed",
    OperationEvent.FAIL_NO_EFFECT: "operation.failed_no_effect",
    OperationEvent.UNCERTAIN: "operation.unknown",
    OperationEvent.RETRY: "operation.retried",
    OperationEvent.RECONCILE_COMPLETED: "operation.reconciled",
    OperationEvent.RECONCILE_NO_EFFECT: "operation.reconciled",
}

ATTEMPT_STARTED: Final = "attempt.started"
#: An attempt ended uncertain while its operation stays claimed for a retry under the same key.
ATTEMPT_UNCERTAIN: Final = "attempt.uncertain"
#: The evidence records a completion issues (docs/design.md#evidence), each in the outcome's
#: transaction.
RECEIPT_ISSUED: Final = "receipt.issued"
ATTESTATION_ISSUED: Final = "attestation.issued"
#: A publication's completion answers the report's question (a resource move of its own).
QUESTION_ANSWERED: Final = "question.answered"

#: Events of an operation that move none of its states; they need its claim before them. A
#: renewal's grant moves the operation by its own `operation.retried`, written beside it.
OPERATION_NOTES: Final = frozenset({"attempt.ignored", "operation.evidence",
                                    "renewal.requested", "renewal.voted", "renewal.granted",
                                    "renewal.denied",
                                    "renewal.expired", "renewal.withdrawn", RECEIPT_ISSUED,
                                    ATTESTATION_ISSUED, QUESTION_ANSWERED})

#: The detail of an event that lists the resource moves its transaction made, each
#: `{"id", "revision", "event"}` (the revision the move's compare-and-swap named): written by
#: the event's writer, replayed here through each resource's own table.
RESOURCE_MOVES: Final = "resource_moves"
#: A resource starts in its table's initial state at revision 1; a revision is its `edit`.
RESOURCE_CREATED: Final = "resource.created"
RESOURCE_REVISED: Final = "resource.revised"


def audit_moves(refs: Iterable[Mapping[str, JSONValue]], event: ResourceEvent) -> JSONObject:
    """What an event carries of the resource moves its transaction made, each of `refs` by
    `event` (the revision its compare-and-swap named): `protocols.trace` replays them through
    each resource's table. Nothing when there are none."""
    moves = [{"id": ref["id"], "revision": ref["revision"], "event": event.value}
             for ref in refs]
    return {RESOURCE_MOVES: moves} if moves else {}
