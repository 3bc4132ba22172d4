"""Finite protocols as declared transition tables (spec §5.1, §8, §11).

Each record kind that changes state has exactly one table here. `transition` is the one function
that moves a state: any (state, event) pair missing from the table is refused with
`protocol_state_invalid`. Models store the state; services call `transition` and then write the
result with a conditional update so the database enforces the same rule under concurrency.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Generic, TypeVar

from protocols.denials import Denial, DenialCode


class ResourceState(StrEnum):
    """States of the resource protocols (spec §5.1, §11): `email_draft`, `question`, `report`;
    lowercase as on the wire (DESIGN §7). Each protocol's table says which it uses."""

    DRAFT = "draft"
    PROPOSED = "proposed"
    AUTHORIZED = "authorized"
    DENIED = "denied"
    DISPATCHING = "dispatching"
    SENT = "sent"
    FAILED_NO_EFFECT = "failed_no_effect"
    UNKNOWN = "unknown"
    OPEN = "open"
    ANSWERED = "answered"
    ATTESTED = "attested"
    PUBLISHED = "published"


class ResourceEvent(StrEnum):
    EDIT = "edit"
    PROPOSE = "propose"
    GRANT = "grant"
    DENY = "deny"
    EXPIRE = "expire"
    CLAIM = "claim"
    COMPLETE = "complete"
    FAIL_NO_EFFECT = "fail_no_effect"
    UNCERTAIN = "uncertain"
    RECONCILE_COMPLETED = "reconcile_completed"
    RECONCILE_NO_EFFECT = "reconcile_no_effect"
    ATTEST = "attest"  # a trusted validator's passing attestation of this exact revision
    ANSWER = "answer"  # a report on the question was published
    RETRY = "retry"  # the operation is claimed again for a further attempt, same key


class OperationState(StrEnum):
    """The operation lifecycle of spec §8."""

    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    FAILED_NO_EFFECT = "failed_no_effect"
    UNKNOWN = "unknown"
    RECONCILED_COMPLETED = "reconciled_completed"
    RECONCILED_NO_EFFECT = "reconciled_no_effect"


class OperationEvent(StrEnum):
    CLAIM = "claim"
    COMPLETE = "complete"
    FAIL_NO_EFFECT = "fail_no_effect"
    UNCERTAIN = "uncertain"
    RETRY = "retry"
    RECONCILE_COMPLETED = "reconcile_completed"
    RECONCILE_NO_EFFECT = "reconcile_no_effect"


class ApprovalState(StrEnum):
    PENDING = "pending"
    GRANTED = "granted"
    DENIED = "denied"
    EXPIRED = "expired"
    REVOKED = "revoked"


class ApprovalEvent(StrEnum):
    GRANT = "grant"
    DENY = "deny"
    EXPIRE = "expire"
    REVOKE = "revoke"


class PermitState(StrEnum):
    ISSUED = "issued"
    CLAIMED = "claimed"
    EXPIRED = "expired"
    REVOKED = "revoked"


class PermitEvent(StrEnum):
    CLAIM = "claim"
    EXPIRE = "expire"
    REVOKE = "revoke"


class ExecutionState(StrEnum):
    """A run of an embedded runtime (an agent loop, a workflow): running from its creation,
    waiting for a human or a worker, finished. A finished run stays finished."""

    RUNNING = "running"
    WAITING = "waiting"
    FINISHED = "finished"


class ExecutionEvent(StrEnum):
    WAIT = "wait"
    FINISH = "finish"


S = TypeVar("S", bound=StrEnum)
E = TypeVar("E", bound=StrEnum)


@dataclass(frozen=True)
class Protocol(Generic[S, E]):
    """A named finite protocol: its initial state, terminal states and transition table."""

    name: str
    initial: S
    transitions: Mapping[tuple[S, E], S]

    @property
    def states(self) -> frozenset[S]:
        found = {self.initial}
        for (source, _event), target in self.transitions.items():
            found.update((source, target))
        return frozenset(found)

    def allows(self, state: S, event: E) -> bool:
        return (state, event) in self.transitions

    def canonical(self) -> dict[str, object]:
        """The table as data, in one order: what a contract fingerprint and a workflow journal
        header pin (spec §8, §10), so a changed table is a changed fingerprint."""
        return {"name": self.name, "initial": self.initial.value,
                "transitions": sorted([source.value, event.value, target.value]
                                      for (source, event), target in self.transitions.items())}


R, RE = ResourceState, ResourceEvent
EMAIL_DRAFT: Final = Protocol[ResourceState, ResourceEvent](
    name="email_draft",
    initial=R.DRAFT,
    transitions={
        # Editing makes a new revision in the initial state; never once the action may have run.
        (R.DRAFT, RE.EDIT): R.DRAFT,
        (R.PROPOSED, RE.EDIT): R.DRAFT,
        (R.AUTHORIZED, RE.EDIT): R.DRAFT,
        (R.DENIED, RE.EDIT): R.DRAFT,
        (R.FAILED_NO_EFFECT, RE.EDIT): R.DRAFT,
        # A revision may carry several proposals; each stays bound to this exact revision.
        (R.DRAFT, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.PROPOSE): R.PROPOSED,
        (R.AUTHORIZED, RE.PROPOSE): R.AUTHORIZED,
        (R.FAILED_NO_EFFECT, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.GRANT): R.AUTHORIZED,
        (R.AUTHORIZED, RE.GRANT): R.AUTHORIZED,
        (R.PROPOSED, RE.DENY): R.DENIED,
        # A denial of a second proposal leaves an already authorized revision authorized.
        (R.AUTHORIZED, RE.DENY): R.AUTHORIZED,
        # An approval or permit that lapses unused returns the revision to the draft state.
        (R.PROPOSED, RE.EXPIRE): R.DRAFT,
        (R.AUTHORIZED, RE.EXPIRE): R.DRAFT,
        (R.AUTHORIZED, RE.CLAIM): R.DISPATCHING,
        (R.DISPATCHING, RE.COMPLETE): R.SENT,
        (R.DISPATCHING, RE.FAIL_NO_EFFECT): R.FAILED_NO_EFFECT,
        (R.DISPATCHING, RE.UNCERTAIN): R.UNKNOWN,
        # A further attempt under the same key (a renewal, a retry after a proven absence):
        # back to dispatching, so that its outcome can be recorded; never to authorized.
        (R.UNKNOWN, RE.RETRY): R.DISPATCHING,
        # Reconciliation may establish the outcome; never back to a reusable authorized state.
        (R.UNKNOWN, RE.RECONCILE_COMPLETED): R.SENT,
        (R.UNKNOWN, RE.RECONCILE_NO_EFFECT): R.FAILED_NO_EFFECT,
    },
)

# Stage 3 (DESIGN §11). A question is researched while open: fetches only read it (a
# contract's `reads`), so they neither move nor block it; it is answered once, when a report
# on it is published.
QUESTION: Final = Protocol[ResourceState, ResourceEvent](
    name="question",
    initial=R.OPEN,
    transitions={
        (R.OPEN, RE.EDIT): R.OPEN,
        (R.OPEN, RE.ANSWER): R.ANSWERED,
    },
)

# A report is attested, then proposed for publication. Editing makes a new revision in the
# draft state, so an attestation never covers bytes it did not judge; never once the
# publication may have run. A lapsed or denied approval leaves the attestation standing.
REPORT: Final = Protocol[ResourceState, ResourceEvent](
    name="report",
    initial=R.DRAFT,
    transitions={
        (R.DRAFT, RE.EDIT): R.DRAFT,
        (R.ATTESTED, RE.EDIT): R.DRAFT,
        (R.PROPOSED, RE.EDIT): R.DRAFT,
        (R.AUTHORIZED, RE.EDIT): R.DRAFT,
        (R.DENIED, RE.EDIT): R.DRAFT,
        (R.FAILED_NO_EFFECT, RE.EDIT): R.DRAFT,
        (R.DRAFT, RE.ATTEST): R.ATTESTED,
        (R.ATTESTED, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.PROPOSE): R.PROPOSED,
        (R.AUTHORIZED, RE.PROPOSE): R.AUTHORIZED,
        (R.FAILED_NO_EFFECT, RE.PROPOSE): R.PROPOSED,
        (R.PROPOSED, RE.GRANT): R.AUTHORIZED,
        (R.AUTHORIZED, RE.GRANT): R.AUTHORIZED,
        (R.PROPOSED, RE.DENY): R.DENIED,
        (R.AUTHORIZED, RE.DENY): R.AUTHORIZED,
        (R.PROPOSED, RE.EXPIRE): R.ATTESTED,
        (R.AUTHORIZED, RE.EXPIRE): R.ATTESTED,
        (R.AUTHORIZED, RE.CLAIM): R.DISPATCHING,
        (R.DISPATCHING, RE.COMPLETE): R.PUBLISHED,
        (R.DISPATCHING, RE.FAIL_NO_EFFECT): R.FAILED_NO_EFFECT,
        (R.DISPATCHING, RE.UNCERTAIN): R.UNKNOWN,
        (R.UNKNOWN, RE.RETRY): R.DISPATCHING,
        (R.UNKNOWN, RE.RECONCILE_COMPLETED): R.PUBLISHED,
        (R.UNKNOWN, RE.RECONCILE_NO_EFFECT): R.FAILED_NO_EFFECT,
    },
)

Op, OE = OperationState, OperationEvent
OPERATION_LIFECYCLE: Final = Protocol[OperationState, OperationEvent](
    name="operation",
    initial=Op.PENDING,
    transitions={
        (Op.PENDING, OE.CLAIM): Op.CLAIMED,
        (Op.CLAIMED, OE.COMPLETE): Op.COMPLETED,
        (Op.CLAIMED, OE.FAIL_NO_EFFECT): Op.FAILED_NO_EFFECT,
        (Op.CLAIMED, OE.UNCERTAIN): Op.UNKNOWN,
        # Only a retry-safe contract may take this edge; `retry_allowed` decides that.
        (Op.UNKNOWN, OE.RETRY): Op.CLAIMED,
        (Op.UNKNOWN, OE.RECONCILE_COMPLETED): Op.RECONCILED_COMPLETED,
        (Op.UNKNOWN, OE.RECONCILE_NO_EFFECT): Op.RECONCILED_NO_EFFECT,
    },
)


#: The operation states whose move also moves the resources the operation acts on, and the
#: state those resources are in before it: an attempt's outcome is recorded from
#: `dispatching`; reconciliation settles, and a retry takes back, what was `unknown`.
OUTCOME_SOURCES: Final[Mapping[OperationState, ResourceState]] = {
    Op.COMPLETED: R.DISPATCHING,
    Op.FAILED_NO_EFFECT: R.DISPATCHING,
    Op.UNKNOWN: R.DISPATCHING,
    Op.RECONCILED_COMPLETED: R.UNKNOWN,
    Op.RECONCILED_NO_EFFECT: R.UNKNOWN,
    Op.CLAIMED: R.UNKNOWN,
}
#: The resource event each of those moves takes: its table says where it leads.
OUTCOME_EVENTS: Final[Mapping[OperationState, ResourceEvent]] = {
    Op.COMPLETED: RE.COMPLETE,
    Op.FAILED_NO_EFFECT: RE.FAIL_NO_EFFECT,
    Op.UNKNOWN: RE.UNCERTAIN,
    Op.RECONCILED_COMPLETED: RE.RECONCILE_COMPLETED,
    Op.RECONCILED_NO_EFFECT: RE.RECONCILE_NO_EFFECT,
    Op.CLAIMED: RE.RETRY,
}
#: What a contract that moves a resource must declare in its `protocol_outcomes`; the rest
#: follow from these (`outcome_events`).
REQUIRED_OUTCOMES: Final = ("completed", "failed_no_effect", "unknown")


def outcome_events(
    protocol: Protocol[ResourceState, ResourceEvent], outcomes: Mapping[str, str],
) -> dict[OperationState, ResourceEvent]:
    """What each move of an operation does to a resource of `protocol`, read from a contract's
    `protocol_outcomes` (an operation state -> the resource's state after that move): the one
    outcome's own event (`OUTCOME_EVENTS`) from `OUTCOME_SOURCES`, which must lead there in
    the resource's table. `reconciled_completed` and
    `reconciled_no_effect` default to the states declared for `completed` and
    `failed_no_effect`, `claimed` (a retry) to the state the protocol's claim leads to. Raises
    ValueError saying what does not hold: an undeclared outcome, a state or a move the
    protocol lacks."""
    names = {state.value for state in OUTCOME_SOURCES}
    stray = sorted(set(outcomes) - names)
    if stray:
        raise ValueError(f"protocol_outcomes names no operation outcome: {stray} (one of "
                         f"{sorted(names)})")
    missing = [name for name in REQUIRED_OUTCOMES if name not in outcomes]
    if missing:
        raise ValueError(f"protocol_outcomes must declare {missing} for {protocol.name!r}")
    claimed = {target for (_s, event), target in protocol.transitions.items()
               if event is RE.CLAIM}
    if len(claimed) != 1:
        raise ValueError(f"{protocol.name!r}: a claim must lead to one state, not {claimed}")
    targets = {**{OperationState(name): state for name, state in outcomes.items()}}
    targets.setdefault(Op.RECONCILED_COMPLETED, outcomes["completed"])
    targets.setdefault(Op.RECONCILED_NO_EFFECT, outcomes["failed_no_effect"])
    targets.setdefault(Op.CLAIMED, next(iter(claimed)).value)
    states = {state.value for state in protocol.states}
    events: dict[OperationState, ResourceEvent] = {}
    for moved, target in targets.items():
        if target not in states:
            raise ValueError(f"protocol_outcomes[{moved.value!r}] names {target!r}, a state "
                             f"{protocol.name!r} lacks")
        source, event = OUTCOME_SOURCES[moved], OUTCOME_EVENTS[moved]
        # The outcome's own event must lead there: an unknown outcome may never leave a
        # resource where it could be edited and proposed again, whatever else the table allows.
        if protocol.transitions.get((source, event)) is not ResourceState(target):
            raise ValueError(f"protocol_outcomes[{moved.value!r}] names {target!r}, but "
                             f"{protocol.name!r} moves by {event.value!r} from "
                             f"{source.value!r} to "
                             f"{_target_name(protocol, source, event)}")
        events[moved] = event
    return events


def _target_name(protocol: Protocol[ResourceState, ResourceEvent], source: ResourceState,
                 event: ResourceEvent) -> str:
    target = protocol.transitions.get((source, event))
    return "nowhere" if target is None else repr(target.value)


class Outcome(StrEnum):
    """What an operation came to, as the caller that drives it hears it (spec §8).

    The one vocabulary of "settled" for the embedded runtimes: the lifecycle's words, with a
    reconciled state counted as what reconciliation established. `unknown` is settled for the
    caller too: nothing retries it blindly; an admin reconciles it (or the dispatcher retries a
    retry-safe contract itself, before the caller hears it).
    """

    COMPLETED = "completed"
    FAILED_NO_EFFECT = "failed_no_effect"
    UNKNOWN = "unknown"


#: The outcome each settled operation state means; `pending` and `claimed` are not settled.
OUTCOMES: Final[Mapping[OperationState, Outcome]] = {
    Op.COMPLETED: Outcome.COMPLETED,
    Op.RECONCILED_COMPLETED: Outcome.COMPLETED,
    Op.FAILED_NO_EFFECT: Outcome.FAILED_NO_EFFECT,
    Op.RECONCILED_NO_EFFECT: Outcome.FAILED_NO_EFFECT,
    Op.UNKNOWN: Outcome.UNKNOWN,
}


def settled_outcome(state: OperationState | str) -> Outcome | None:
    """The outcome an operation in `state` has come to, or None while it is not settled."""
    return OUTCOMES.get(OperationState(state))


A, AE = ApprovalState, ApprovalEvent
APPROVAL_LIFECYCLE: Final = Protocol[ApprovalState, ApprovalEvent](
    name="approval",
    initial=A.PENDING,
    transitions={
        (A.PENDING, AE.GRANT): A.GRANTED,
        (A.PENDING, AE.DENY): A.DENIED,
        (A.PENDING, AE.EXPIRE): A.EXPIRED,
        (A.PENDING, AE.REVOKE): A.REVOKED,
        (A.GRANTED, AE.EXPIRE): A.EXPIRED,
        (A.GRANTED, AE.REVOKE): A.REVOKED,
    },
)

#: A renewal (a renewed approval of one further attempt) is decided once, from pending: never
#: revoked (it authorizes one attempt, which its grant starts at once) and never expired after
#: its grant.
RENEWAL_LIFECYCLE: Final = Protocol[ApprovalState, ApprovalEvent](
    name="renewal",
    initial=A.PENDING,
    transitions={
        (A.PENDING, AE.GRANT): A.GRANTED,
        (A.PENDING, AE.DENY): A.DENIED,
        (A.PENDING, AE.EXPIRE): A.EXPIRED,
    },
)

X, XE = ExecutionState, ExecutionEvent
#: A running or waiting run waits again (each resume that stops short) or finishes; nothing
#: reopens a finished one, and only its creation makes one running.
EXECUTION_LIFECYCLE: Final = Protocol[ExecutionState, ExecutionEvent](
    name="execution",
    initial=X.RUNNING,
    transitions={
        (X.RUNNING, XE.WAIT): X.WAITING,
        (X.WAITING, XE.WAIT): X.WAITING,
        (X.RUNNING, XE.FINISH): X.FINISHED,
        (X.WAITING, XE.FINISH): X.FINISHED,
    },
)

P, PE = PermitState, PermitEvent
PERMIT_LIFECYCLE: Final = Protocol[PermitState, PermitEvent](
    name="permit",
    initial=P.ISSUED,
    transitions={
        (P.ISSUED, PE.CLAIM): P.CLAIMED,
        (P.ISSUED, PE.EXPIRE): P.EXPIRED,
        (P.ISSUED, PE.REVOKE): P.REVOKED,
    },
)

RESOURCE_PROTOCOLS: Final[Mapping[str, Protocol[ResourceState, ResourceEvent]]] = {
    EMAIL_DRAFT.name: EMAIL_DRAFT,
    QUESTION.name: QUESTION,
    REPORT.name: REPORT,
}


def transition(protocol: Protocol[S, E], state: S, event: E) -> S:
    """The next state of `state` under `event`, or `protocol_state_invalid` if undeclared."""
    try:
        return protocol.transitions[(state, event)]
    except KeyError:
        raise Denial(
            DenialCode.PROTOCOL_STATE_INVALID,
            f"{protocol.name}: '{event.value}' is not allowed in state '{state.value}'.",
            protocol=protocol.name,
            state=state.value,
            event=event.value,
        ) from None


def sources(protocol: Protocol[S, E], event: E) -> frozenset[S]:
    """Every state from which `event` is declared: the WHERE clause of a conditional update."""
    return frozenset(source for (source, ev) in protocol.transitions if ev == event)


def protocol_tables(resource_protocols: Iterable[str]) -> dict[str, object]:
    """The canonical tables an operation's recovery depends on: the operation lifecycle and
    each named resource protocol (None for a name no table declares)."""
    tables: dict[str, object] = {"operation": OPERATION_LIFECYCLE.canonical()}
    for name in sorted(set(resource_protocols)):
        table = RESOURCE_PROTOCOLS.get(name)
        tables[f"resource:{name}"] = None if table is None else table.canonical()
    return tables
