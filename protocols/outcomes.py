"""The plan of one outcome (docs/design.md#outcomes): everything a move of an operation writes,
computed from what was loaded before the store is touched, so that
`dispatch.services.operations.operation_move` only applies it, in one transaction.

Two pure steps. `outcome_step` decides, from the operation as loaded (`Loaded`) and the event
asked for, the target state by the operation's transition table, and stickiness: once an
attempt was uncertain, a definite failure (`fail_no_effect`: a later attempt's, a cancellation,
a refused retry) moves the operation to `unknown`, never to `failed_no_effect`, until an
authoritative lookup proves the key absent (`absence_proven`). The caller then asks the runtime
and the store what that target needs (`Facts`: what the contract's outcome hook issues, the
resources' event, the agent who may hear of it, the audit's masked texts), and `outcome_plan`
puts it together: whether the answer replaces the kept result (an attempt's answer does; a
cancellation or a reconciliation keeps it), which resources move (every one but those it only
reads), the audit event, the notice the agent's endpoints hear (one outbox row each,
`Notice.rows`), and whether the move frees a slot of the operation's run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from protocols.audit_kinds import OPERATION_EVENT_KINDS, audit_moves
from protocols.jsontypes import JSONObject
from protocols.lifecycle import (
    OPERATION_LIFECYCLE,
    OperationEvent,
    OperationState,
    ResourceEvent,
    transition,
)

#: An attempt's outcome (the attempt row's `outcome`) and the operation event it asks for.
ATTEMPT_OUTCOMES: Mapping[str, OperationEvent] = {
    "completed": OperationEvent.COMPLETE,
    "failed_no_effect": OperationEvent.FAIL_NO_EFFECT,
    "uncertain": OperationEvent.UNCERTAIN,
}
#: The events that carry an attempt's answer: the answer replaces the operation's result.
_ANSWERS = frozenset(ATTEMPT_OUTCOMES.values())
STICKY = "an earlier attempt may have had its effect"


@dataclass(frozen=True)
class Loaded:
    """The operation as its caller loaded it, with what its proposal binds."""

    id: str
    proposal_id: str
    operation: str  # the contract's qualified name
    state: OperationState
    uncertain: bool
    refs: tuple[JSONObject, ...]  # the proposal's resource references
    binding: JSONObject  # what every event of the action carries (`audit_binding`)

    @property
    def moved(self) -> tuple[JSONObject, ...]:
        """The resources the operation moves: every one but those it only reads."""
        return tuple(ref for ref in self.refs if not ref.get("read"))


@dataclass(frozen=True)
class Step:
    """Where the move goes (`outcome_step`)."""

    event: OperationEvent  # the event applied: `uncertain` where stickiness turned a failure
    target: OperationState
    sticky: bool
    uncertain: bool  # the operation's uncertainty after the move


#: What an outcome hook issues: the result the operation keeps, and the write of its record.
Issued = tuple[JSONObject | None, Callable[[], None]]


@dataclass(frozen=True)
class Facts:
    """What the runtime and the store answer about a step's target: what the outcome hook
    issues, the event that moves the resources (None: none moves), the agent who may hear of
    it (None: no agent hears of this target), the error and evidence as the audit may hold
    them (the action's values masked)."""

    issued: Issued | None = None
    resource_event: ResourceEvent | None = None
    hearer: str | None = None
    audit_error: str = ""
    audit_evidence: str | None = None


@dataclass(frozen=True)
class OutboxRow:
    """One outcome notification: `event` to `endpoint` (as the caller of `Notice.rows` gave
    it)."""

    event: str
    endpoint: object
    data: JSONObject


@dataclass(frozen=True)
class Notice:
    """What agent `hearer`'s endpoints that take `event` hear of the move. Whether the agent
    holds any is answered by the move's own statement, so the endpoints are read, and the
    rows made, only where it does."""

    event: str
    hearer: str
    operation_id: str
    proposal_id: str
    operation: str
    state: str

    def rows(self, endpoints: Sequence[object], summary: str) -> tuple[OutboxRow, ...]:
        """One row per endpoint, each carrying the action's sentence `summary`."""
        data: JSONObject = {"operation_id": self.operation_id, "proposal_id": self.proposal_id,
                            "operation": self.operation, "summary": summary,
                            "state": self.state}
        return tuple(OutboxRow(self.event, endpoint, data) for endpoint in endpoints)


@dataclass(frozen=True)
class OutcomePlan:
    source: OperationState
    target: OperationState
    attempt: int
    uncertain: bool  # the operation's uncertainty after the move
    answers: bool  # `result` replaces the kept result
    result: JSONObject | None
    evidence: str | None
    end_attempt: str | None  # the attempt row's outcome, None: the row is not ended here
    error: str
    moved: tuple[JSONObject, ...]  # the resources that move, by `resource_event`
    resource_event: ResourceEvent | None
    audit_kind: str
    audit_details: JSONObject
    issue: Callable[[], None] | None  # the hook's record, written where the move holds
    notice: Notice | None  # None: no agent hears of the target

    @property
    def settles(self) -> bool:
        """It leaves `claimed`: a slot of the operation's run is free."""
        return self.source is OperationState.CLAIMED and self.target is not OperationState.CLAIMED


def outcome_step(loaded: Loaded, event: OperationEvent, *, end_attempt: str | None = None,
                 absence_proven: bool = False) -> Step:
    """Where moving `loaded` by `event` goes. `end_attempt`: the outcome the settled attempt's
    row ends with. A move the table does not allow raises `protocol_state_invalid`
    (`protocols.lifecycle.transition`)."""
    sticky = event is OperationEvent.FAIL_NO_EFFECT and loaded.uncertain
    if sticky:
        event = OperationEvent.UNCERTAIN
    target = transition(OPERATION_LIFECYCLE, loaded.state, event)
    uncertain = (loaded.uncertain or target is OperationState.UNKNOWN
                 or end_attempt == "uncertain") and not absence_proven
    return Step(event, target, sticky, uncertain)


def outcome_plan(
    loaded: Loaded, step: Step, facts: Facts, *, attempt: int, end_attempt: str | None = None,
    error: str = "", result: JSONObject | None = None, evidence: str | None = None,
    details: JSONObject | None = None, absence_proven: bool = False,
) -> OutcomePlan:
    """What moving `loaded` by `step`, as the settlement of attempt `attempt`, writes.
    `end_attempt`: that attempt's row ends with this outcome and `error`; `result`: the
    attempt's answer; `evidence`: what a lookup or an admin found; `details`: more for the
    audit."""
    if facts.issued is not None:
        result = facts.issued[0]
    event = facts.resource_event
    moved = loaded.moved if event is not None else ()
    audit_details: JSONObject = {
        "attempt": attempt, "outcome": step.target.value,
        **({"error": facts.audit_error} if error else {}),
        **({"evidence": facts.audit_evidence} if evidence is not None else {}),
        **({"sticky": STICKY} if step.sticky else {}),
        **({"absence_proven": True} if absence_proven else {}),
        **loaded.binding, **(details or {}),
        **(audit_moves(moved, event) if event is not None else {})}
    notice = None if facts.hearer is None else Notice(
        f"operation.{step.target.value}", facts.hearer, loaded.id, loaded.proposal_id,
        loaded.operation, step.target.value)
    return OutcomePlan(
        source=loaded.state, target=step.target, attempt=attempt, uncertain=step.uncertain,
        answers=step.event in _ANSWERS, result=result, evidence=evidence,
        end_attempt=end_attempt, error=error, moved=moved, resource_event=event,
        audit_kind=OPERATION_EVENT_KINDS[step.event], audit_details=audit_details,
        issue=facts.issued[1] if facts.issued is not None else None, notice=notice)
