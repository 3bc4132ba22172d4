"""The trace safety property (docs/design.md#dispatcher): every dispatch has a preceding valid
claim, and every committed state transition follows its table.

The audit is the runtime's trace: each move of an operation writes one event in the move's own
transaction (`OPERATION_EVENT_KINDS` names it), and a permit's claim, revocation and expiry are
events too; so are an approval's (and a renewal's) request and moves, and every event whose
transaction moved resources lists those moves (`RESOURCE_MOVES`). `check_trace` replays a
tenant's events in append order through the tables of `protocols.lifecycle`, from each record's
initial state, and returns every event that breaks the property: an attempt whose operation
holds no committed claim, a move its table does not declare (an operation's, a permit's, an
approval's, a resource's), a resource moved at a revision that is not its current one, an
attempt out of order, a permit claimed twice or after it lapsed, a claim without a permit of a
proposal that asked for an approval. It says nothing about liveness: an operation left
`claimed` is a valid trace.

Pure: it reads the events it is given, in the order given (the audit's id order, which is the
commit order of the moves of one operation: each starts after the one before committed, or
waits for its row lock). The events, violations and report it works with are
`protocols.trace_events`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from protocols.audit_kinds import (
    ATTEMPT_STARTED,
    ATTEMPT_UNCERTAIN,
    ATTESTATION_ISSUED,
    OPERATION_EVENT_KINDS,
    OPERATION_NOTES,
    RECEIPT_ISSUED,
    RESOURCE_CREATED,
    RESOURCE_MOVES,
    RESOURCE_REVISED,
)
from protocols.lifecycle import (
    APPROVAL_LIFECYCLE,
    OPERATION_LIFECYCLE,
    PERMIT_LIFECYCLE,
    RENEWAL_LIFECYCLE,
    RESOURCE_PROTOCOLS,
    ApprovalEvent,
    ApprovalState,
    OperationEvent,
    OperationState,
    PermitEvent,
    PermitState,
    Protocol,
    ResourceEvent,
    ResourceProtocol,
)
from protocols.trace_events import TraceCode, TraceEvent, TraceReport, Violation

#: Kinds that are always an operation's: an event of one of them must name it.
_OPERATION_KINDS: Final = frozenset(
    {*OPERATION_EVENT_KINDS.values(), ATTEMPT_STARTED, ATTEMPT_UNCERTAIN, *OPERATION_NOTES})

#: Kinds that may name an operation without being one of its moves.
_MAY_NAME_AN_OPERATION: Final = frozenset({"proposal.cancelled"})

#: The events that open an approval (or a renewal, decided by the same table) and move it.
_APPROVAL_OPENED: Final[Mapping[str, tuple[str, str]]] = {
    "approval.requested": ("approval", "approval_id"),
    "renewal.requested": ("renewal", "renewal_id"),
}
_APPROVAL_MOVES: Final[Mapping[str, tuple[str, str, ApprovalEvent]]] = {
    "approval.granted": ("approval", "approval_id", ApprovalEvent.GRANT),
    "approval.denied": ("approval", "approval_id", ApprovalEvent.DENY),
    "approval.expired": ("approval", "approval_id", ApprovalEvent.EXPIRE),
    "renewal.granted": ("renewal", "renewal_id", ApprovalEvent.GRANT),
    "renewal.denied": ("renewal", "renewal_id", ApprovalEvent.DENY),
    "renewal.expired": ("renewal", "renewal_id", ApprovalEvent.EXPIRE),
    "renewal.withdrawn": ("renewal", "renewal_id", ApprovalEvent.REVOKE),
}

#: The table each of them is decided by.
_APPROVAL_TABLES: Final[Mapping[str, Protocol[ApprovalState, ApprovalEvent]]] = {
    "approval": APPROVAL_LIFECYCLE, "renewal": RENEWAL_LIFECYCLE}

_EVENTS_OF_KIND: Final[Mapping[str, tuple[OperationEvent, ...]]] = {
    kind: tuple(e for e, k in OPERATION_EVENT_KINDS.items() if k == kind)
    for kind in set(OPERATION_EVENT_KINDS.values())
}


@dataclass
class _Operation:
    state: OperationState | None = None  # None: no claim seen yet (pending, or never claimed)
    attempts: int = 0
    issued: bool = False  # its receipt or attestation was recorded
    completed_last: bool = False  # its last event was its move to completed
    uncertain: bool = False  # an attempt was uncertain, and no absence was proven since


#: Evidence records, each issued in the transaction that records its operation's completion
#: (docs/design.md#evidence): so in the audit just after that completion, and once.
_EVIDENCE_KINDS: Final = frozenset({RECEIPT_ISSUED, ATTESTATION_ISSUED})


@dataclass
class _Permit:
    proposal_id: str
    state: PermitState = PERMIT_LIFECYCLE.initial


@dataclass
class _Resource:
    protocol: ResourceProtocol
    state: str
    revision: int


class TraceChecker:
    """The replay, fed one event at a time in append order (a stream: the audit need not fit
    in memory, only one small record per operation and permit)."""

    def __init__(self, resource_protocols: Mapping[str, ResourceProtocol] = RESOURCE_PROTOCOLS,
                 ) -> None:
        self._report = TraceReport()
        self._operations: dict[str, _Operation] = {}
        self._permits: dict[str, _Permit] = {}
        self._permit_of_approval: dict[str, str] = {}
        self._permit_of_proposal: dict[str, str] = {}
        self._claimed: dict[str, str] = {}  # proposal -> its operation
        self._cancelled: set[str] = set()  # proposals cancelled before any claim
        self._protocols = resource_protocols  # by resource kind
        self._resources: dict[str, _Resource] = {}
        self._approvals: dict[tuple[str, str], ApprovalState] = {}  # (label, id) -> state
        self._approval_of_proposal: dict[str, str] = {}  # a proposal that asked for one

    def feed(self, event: TraceEvent) -> None:
        self._report.events += 1
        reported = len(self._report.violations)
        self._permit_events(event)
        self._approval_events(event)
        self._operation_events(event)
        # An event already reported moves no resource: one corruption (a lost claim, say) is
        # reported at the events it breaks, not again at each resource they name.
        if len(self._report.violations) == reported:
            self._resource_events(event)

    def _operation_events(self, event: TraceEvent) -> None:
        if event.kind in _OPERATION_KINDS and not event.operation_id:
            self._violate(event, TraceCode.OPERATION_MISSING,
                          f"a '{event.kind}' event names no operation")
            return
        if not event.operation_id:
            return  # an event of another record (a proposal, an approval, a grant)
        if event.kind not in _OPERATION_KINDS and event.kind not in _MAY_NAME_AN_OPERATION:
            self._violate(event, TraceCode.KIND_UNDECLARED,
                          f"'{event.kind}' is no declared event of an operation")
            return
        operation = self._operations.setdefault(event.operation_id, _Operation())
        # An evidence record is the operation's next event after its completion, or none.
        completed_just_before, operation.completed_last = operation.completed_last, False
        if event.kind in _MAY_NAME_AN_OPERATION and operation.state is not None:
            return  # it names a claimed operation and moves none of its states
        if event.kind == OPERATION_EVENT_KINDS[OperationEvent.CLAIM]:
            self._claim(event, operation)
        elif operation.state is None:
            if event.kind == ATTEMPT_STARTED:
                self._violate(event, TraceCode.ATTEMPT_UNCLAIMED,
                              "an attempt started with no permit.claimed before it")
            else:
                self._violate(event, TraceCode.EVENT_UNCLAIMED,
                              f"'{event.kind}' before the operation's permit.claimed")
        elif event.kind == ATTEMPT_STARTED:
            self._attempt(event, operation)
        elif event.kind == ATTEMPT_UNCERTAIN:
            self._attempt_uncertain(event, operation)
        elif event.kind in _EVIDENCE_KINDS:
            self._issued(event, operation, completed_just_before)
        elif event.kind in _EVENTS_OF_KIND:
            self._move(event, operation)

    def report(self) -> TraceReport:
        report = self._report
        claimed = [o for o in self._operations.values() if o.state is not None]
        report.operations = len(claimed)
        report.permits = len(self._permits)
        report.resources = len(self._resources)
        report.approvals = len(self._approvals)
        report.states = Counter(o.state.value for o in claimed if o.state is not None)
        return report

    # --- operations -------------------------------------------------------------------------

    def _claim(self, event: TraceEvent, operation: _Operation) -> None:
        self._claim_of_proposal(event)
        self._move(event, operation, event_of=(OperationEvent.CLAIM,),
                   initial=OPERATION_LIFECYCLE.initial)

    def _move(self, event: TraceEvent, operation: _Operation, *,
              event_of: tuple[OperationEvent, ...] | None = None,
              initial: OperationState | None = None) -> None:
        source = operation.state or initial
        assert source is not None
        recorded = event.details.get("outcome")
        candidates = event_of or _EVENTS_OF_KIND[event.kind]
        allowed = [e for e in candidates if OPERATION_LIFECYCLE.allows(source, e)]
        if not allowed:
            self._violate(event, TraceCode.TRANSITION_INVALID,
                          f"operation: '{event.kind}' is not allowed in state '{source}'")
            return
        targets = {OPERATION_LIFECYCLE.transitions[(source, e)].value for e in allowed}
        if recorded not in targets and (recorded is not None or len(targets) > 1):
            self._violate(event, TraceCode.OUTCOME_MISMATCH,
                          f"'{event.kind}' from '{source}' records '{recorded}', the table "
                          f"gives {' or '.join(sorted(targets))}")
            return
        if event_of is None and event.details.get("attempt") != operation.attempts:
            self._violate(event, TraceCode.ATTEMPT_OUT_OF_ORDER,
                          f"'{event.kind}' settles attempt {event.details.get('attempt')}; "
                          f"the latest started is {operation.attempts}")
            return
        target = OperationState(recorded if recorded is not None else targets.pop())
        if target is OperationState.FAILED_NO_EFFECT and operation.uncertain:
            self._violate(event, TraceCode.UNCERTAINTY_DROPPED,
                          "failed_no_effect after an uncertain attempt, with no authoritative "
                          "absence recorded since: the effect may have happened")
        if target is OperationState.UNKNOWN:
            operation.uncertain = True
        elif target is OperationState.CLAIMED and event.details.get("absence_proven") is True:
            operation.uncertain = False
        operation.state = target
        operation.completed_last = operation.state is OperationState.COMPLETED

    def _attempt(self, event: TraceEvent, operation: _Operation) -> None:
        if operation.state is not OperationState.CLAIMED:
            self._violate(event, TraceCode.ATTEMPT_STATE_INVALID,
                          f"an attempt started in state '{operation.state}'; only a claimed "
                          "operation starts one")
            return
        number, retry_of = event.details.get("attempt"), event.details.get("retry_of")
        if number != operation.attempts + 1 or (
                retry_of is not None and retry_of != operation.attempts):
            self._violate(event, TraceCode.ATTEMPT_OUT_OF_ORDER,
                          f"attempt {number} started after attempt {operation.attempts}")
            return
        if retry_of is not None and "authorized_by" not in event.details:
            # Written before `attempt.uncertain` existed: the retry ended its predecessor
            # uncertain in this same event.
            operation.uncertain = True
        operation.attempts += 1

    def _attempt_uncertain(self, event: TraceEvent, operation: _Operation) -> None:
        if operation.state is not OperationState.CLAIMED:
            self._violate(event, TraceCode.ATTEMPT_STATE_INVALID,
                          f"an attempt ended uncertain in state '{operation.state}'; only a "
                          "claimed operation holds one for a retry")
        elif event.details.get("attempt") != operation.attempts:
            self._violate(event, TraceCode.ATTEMPT_OUT_OF_ORDER,
                          f"attempt {event.details.get('attempt')} ended uncertain; the latest "
                          f"started is {operation.attempts}")
        else:
            operation.uncertain = True

    def _issued(self, event: TraceEvent, operation: _Operation, completed_just_before: bool
                ) -> None:
        if operation.issued:
            self._violate(event, TraceCode.EVIDENCE_TWICE,
                          f"'{event.kind}': the operation already issued its record")
        elif not completed_just_before:
            self._violate(event, TraceCode.EVIDENCE_UNSETTLED,
                          f"'{event.kind}' for an operation in state '{operation.state}', not "
                          "right after its completion, which alone issues evidence")
        else:
            operation.issued = True

    def _claim_of_proposal(self, event: TraceEvent) -> None:
        proposal = event.proposal_id
        if proposal in self._approval_of_proposal and event.details.get("permit_id") is None:
            # The contract asked a human (its proposal opened an approval): only a permit
            # minted by the grant may claim it (docs/design.md#approvals).
            self._violate(event, TraceCode.PERMIT_MISSING,
                          f"proposal {proposal} asked for approval "
                          f"{self._approval_of_proposal[proposal]}; it was claimed without "
                          "a permit")
        # With a permit, the permit's own table refuses a claim after a cancellation.
        if proposal in self._cancelled and event.details.get("permit_id") is None:
            self._violate(event, TraceCode.CLAIM_AFTER_CANCEL,
                          f"proposal {proposal} was cancelled before any claim")
        elif self._claimed.setdefault(proposal, event.operation_id) != event.operation_id:
            self._violate(event, TraceCode.PROPOSAL_CLAIMED_TWICE,
                          f"proposal {proposal} already has operation "
                          f"{self._claimed[proposal]}")

    # --- permits ----------------------------------------------------------------------------

    def _permit_events(self, event: TraceEvent) -> None:
        details, kind = event.details, event.kind
        if kind == "approval.granted" and isinstance(details.get("permit_id"), str):
            permit_id = details["permit_id"]
            self._permits[permit_id] = _Permit(proposal_id=event.proposal_id)
            self._permit_of_proposal[event.proposal_id] = permit_id
            if isinstance(details.get("approval_id"), str):
                self._permit_of_approval[details["approval_id"]] = permit_id
        elif kind == OPERATION_EVENT_KINDS[OperationEvent.CLAIM] and \
                details.get("permit_id") is not None:
            self._permit_claim(event, str(details["permit_id"]))
        elif kind == "permit.revoked":
            self._permit_move(event, details.get("permit_id"), PermitEvent.REVOKE)
        elif kind == "approval.expired":
            found = self._permit_of_approval.get(str(details.get("approval_id")))
            if found is not None:  # a granted approval expires with its issued permit
                self._permit_move(event, found, PermitEvent.EXPIRE)
        elif kind == "proposal.cancelled" and details.get("before_claim") is True:
            self._cancelled.add(event.proposal_id)
            found = self._permit_of_proposal.get(event.proposal_id)
            permit = self._permits.get(found) if found is not None else None
            # The cancellation revokes the proposal's permit if it is still issued.
            if permit is not None and PERMIT_LIFECYCLE.allows(permit.state, PermitEvent.REVOKE):
                self._permit_move(event, found, PermitEvent.REVOKE)

    def _permit_claim(self, event: TraceEvent, permit_id: str) -> None:
        permit = self._permits.get(permit_id)
        if permit is None:
            self._violate(event, TraceCode.PERMIT_UNISSUED,
                          f"permit {permit_id} was never issued by a grant")
        elif permit.proposal_id != event.proposal_id:
            self._violate(event, TraceCode.PERMIT_MISMATCH,
                          f"permit {permit_id} was issued for proposal {permit.proposal_id}")
        else:
            self._permit_move(event, permit_id, PermitEvent.CLAIM)

    def _permit_move(self, event: TraceEvent, permit_id: object, move: PermitEvent) -> None:
        permit = self._permits.get(str(permit_id))
        if permit is None:
            return  # a permit this trace never saw issued: only its claim is checked
        if not PERMIT_LIFECYCLE.allows(permit.state, move):
            self._violate(event, TraceCode.TRANSITION_INVALID,
                          f"permit {permit_id}: '{move.value}' is not allowed in state "
                          f"'{permit.state.value}'")
            return
        permit.state = PERMIT_LIFECYCLE.transitions[(permit.state, move)]

    # --- approvals and renewals: the approval table ---------------------------------------

    def _approval_events(self, event: TraceEvent) -> None:
        details, kind = event.details, event.kind
        if kind in _APPROVAL_OPENED:
            label, key = _APPROVAL_OPENED[kind]
            if isinstance(details.get(key), str):
                self._approvals[(label, details[key])] = _APPROVAL_TABLES[label].initial
                if label == "approval":
                    self._approval_of_proposal[event.proposal_id] = details[key]
        elif kind in _APPROVAL_MOVES:
            label, key, move = _APPROVAL_MOVES[kind]
            self._approval_move(event, label, str(details.get(key)), move)
        elif kind == "proposal.cancelled" and details.get("before_claim") is True:
            # The cancellation revokes the proposal's approval if it is pending or granted.
            found = self._approval_of_proposal.get(event.proposal_id)
            state = self._approvals.get(("approval", found)) if found is not None else None
            if found is not None and state is not None and APPROVAL_LIFECYCLE.allows(
                    state, ApprovalEvent.REVOKE):
                self._approval_move(event, "approval", found, ApprovalEvent.REVOKE)

    def _approval_move(self, event: TraceEvent, label: str, record: str,
                       move: ApprovalEvent) -> None:
        state = self._approvals.get((label, record))
        if state is None:
            return  # one this trace never saw requested: not checked
        table = _APPROVAL_TABLES[label]
        if not table.allows(state, move):
            self._violate(event, TraceCode.TRANSITION_INVALID,
                          f"{label} {record}: '{move.value}' is not allowed in state "
                          f"'{state.value}'")
            return
        self._approvals[(label, record)] = table.transitions[(state, move)]

    # --- resources: each kind's own table, at its current revision ---------------------------

    def _resource_events(self, event: TraceEvent) -> None:
        details = event.details
        if event.kind == RESOURCE_CREATED:
            protocol = self._protocols.get(str(details.get("kind")))
            if protocol is not None and isinstance(details.get("resource_id"), str):
                self._resources[details["resource_id"]] = _Resource(
                    protocol, protocol.initial, 1)
        elif event.kind == RESOURCE_REVISED and isinstance(details.get("revision"), int):
            revision = details["revision"]
            self._resource_move(event, {"id": details.get("resource_id"),
                                        "revision": revision - 1,
                                        "event": ResourceEvent.EDIT.value}, revised=revision)
        moves = details.get(RESOURCE_MOVES)
        for move in moves if isinstance(moves, list) else ():
            self._resource_move(event, move if isinstance(move, Mapping) else {})

    def _resource_move(self, event: TraceEvent, move: Mapping[str, Any], *,
                       revised: int | None = None) -> None:
        resource = self._resources.get(str(move.get("id")))
        if resource is None:
            return  # one this trace never saw created: not checked
        name, on = f"resource {move.get('id')} ({resource.protocol.name})", move.get("event")
        if move.get("revision") != resource.revision:
            self._violate(event, TraceCode.RESOURCE_STALE,
                          f"{name}: '{on}' of revision {move.get('revision')}; its current "
                          f"revision is {resource.revision}")
            return
        if not isinstance(on, str) or not resource.protocol.allows(resource.state, on):
            self._violate(event, TraceCode.TRANSITION_INVALID,
                          f"{name}: '{on}' is not allowed in state '{resource.state}'")
            return
        resource.state = str(resource.protocol.transitions[(resource.state, on)])
        if revised is not None:
            resource.revision = revised

    def _violate(self, event: TraceEvent, code: TraceCode, message: str) -> None:
        self._report.violations.append(
            Violation(event.id, event.operation_id, event.kind, code, message))


def check_trace(events: Iterable[TraceEvent]) -> TraceReport:
    """Replay `events` (one tenant's, or all, in append order); every violation, in order."""
    checker = TraceChecker()
    for event in events:
        checker.feed(event)
    return checker.report()
