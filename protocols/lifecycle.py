"""Finite protocols as declared transition tables (docs/design.md#resources, #outcomes, #evidence).

Each record kind of the product that changes state (operation, approval, permit) has exactly one
table here. A resource kind's table is its extension's: the extension declares it with the kind
and registers it (`resource_protocol_register`, which refuses a table that does not hold
together); `RESOURCE_PROTOCOLS` holds the registered ones by kind. `transition` is the one
function that moves a state: any (state, event) pair missing from the table is refused with
`protocol_state_invalid`. Models store the state; services call `transition` and then write the
result with a conditional update so the database enforces the same rule under concurrency.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Generic, TypeVar

from protocols.denials import Denial, DenialCode


class ResourceState(StrEnum):
    """Common names for the states a resource passes through around an action, lowercase as on
    the wire (docs/rest-api.md#states). A registered kind's table may use these and names of
    its own (any non-empty string): a resource's possible states are its kind's, and the API
    schema lists those of the registered kinds (`dispatch.api.serializers.ResourceStateField`)."""

    DRAFT = "draft"
    PROPOSED = "proposed"
    AUTHORIZED = "authorized"
    DENIED = "denied"
    DISPATCHING = "dispatching"
    FAILED_NO_EFFECT = "failed_no_effect"
    UNKNOWN = "unknown"


class ResourceEvent(StrEnum):
    """The events the store moves a resource by: an edit, and each step of an action on it
    (propose, grant, deny, expire, claim, the outcomes, a retry, a reconciliation). A kind's
    table says from which of its states each is allowed, and where it leads."""

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
    """The operation lifecycle of docs/design.md#outcomes."""

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


S = TypeVar("S", bound=str)
E = TypeVar("E", bound=str)


@dataclass(frozen=True)
class Protocol(Generic[S, E]):
    """A named finite protocol: its initial state, transition table and final states.

    `final` names the states nothing leaves (checked by `protocol_problems`); it is a check
    on the table, not a part of its behaviour, so `canonical` leaves it out."""

    name: str
    initial: S
    transitions: Mapping[tuple[S, E], S]
    final: frozenset[S] = frozenset()

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
        header pin (docs/design.md#outcomes, #extensions), so a changed table is a changed
        fingerprint."""
        return {"name": self.name, "initial": str(self.initial),
                "transitions": sorted([str(source), str(event), str(target)]
                                      for (source, event), target in self.transitions.items())}


#: A resource kind's table: states and events are strings (a `StrEnum`'s members are too).
ResourceProtocol = Protocol[str, str]


class ProtocolTableError(ValueError):
    """A resource protocol table refused at registration: the message says what does not hold."""


def protocol_problems(protocol: Protocol[Any, Any]) -> list[str]:
    """What keeps `protocol` from being a table the store can move resources by, or []:

    - its name, initial state, and every state and event it names are non-empty strings (a
      transition without a target is one whose target is not);
    - every state is reachable from the initial state;
    - each final state is a state of the table, and no transition leaves one.
    """
    problems: list[str] = []

    def named(value: object) -> bool:
        return isinstance(value, str) and value != ""

    if not named(protocol.name):
        problems.append("its name must be a non-empty string")
    if not named(protocol.initial):
        problems.append(f"its initial state {protocol.initial!r} must be a non-empty string")
    edges: dict[str, set[str]] = {}
    for key, target in protocol.transitions.items():
        source, event = key
        if not (named(source) and named(event) and named(target)):
            problems.append(f"transition ({source!r}, {event!r}) -> {target!r}: a state or "
                            "event that is not a non-empty string")
            continue
        edges.setdefault(source, set()).add(target)
    states = {protocol.initial} | set(edges) | {t for ts in edges.values() for t in ts}
    reached, frontier = {protocol.initial}, [protocol.initial]
    while frontier:
        for target in edges.get(frontier.pop(), ()):
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    unreachable = sorted(str(state) for state in states - reached)
    if unreachable:
        problems.append(f"states unreachable from {str(protocol.initial)!r}: {unreachable}")
    for state in sorted(str(final) for final in protocol.final):
        if state not in states:
            problems.append(f"final state {state!r} is not a state of the table")
        elif state in edges:
            leaving = sorted(str(event) for (source, event) in protocol.transitions
                             if source == state)
            problems.append(f"final state {state!r} has outgoing transitions: {leaving}")
    return problems


#: The registered resource protocols, by kind name: filled by `resource_protocol_register`
#: only; read by the store, admission, the workflow and audit checkers and a contract's
#: fingerprint (`protocol_tables`).
RESOURCE_PROTOCOLS: Final[dict[str, ResourceProtocol]] = {}


def resource_protocol_register(protocol: ResourceProtocol) -> ResourceProtocol:
    """Register a resource kind's table under its name, once; the same table again is a no-op.

    Raises `ProtocolTableError` naming the table and every problem `protocol_problems` finds,
    or if another table is registered under the name."""
    problems = protocol_problems(protocol)
    if problems:
        raise ProtocolTableError(f"resource protocol {protocol.name!r}: " + "; ".join(problems))
    existing = RESOURCE_PROTOCOLS.setdefault(protocol.name, protocol)
    if existing != protocol:
        raise ProtocolTableError(f"resource protocol {protocol.name!r} is already registered "
                                 "with another table")
    return existing


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
#: operation state in which the resources took the state they are in before it: an attempt's
#: outcome is recorded from where the claim left them (the kind's own `dispatching`);
#: reconciliation settles, and a retry takes back, what an `unknown` outcome left.
OUTCOME_SOURCES: Final[Mapping[OperationState, OperationState]] = {
    Op.COMPLETED: Op.CLAIMED,
    Op.FAILED_NO_EFFECT: Op.CLAIMED,
    Op.UNKNOWN: Op.CLAIMED,
    Op.RECONCILED_COMPLETED: Op.UNKNOWN,
    Op.RECONCILED_NO_EFFECT: Op.UNKNOWN,
    Op.CLAIMED: Op.UNKNOWN,
}
#: The resource event each of those moves takes: its table says where it leads.
OUTCOME_EVENTS: Final[Mapping[OperationState, ResourceEvent]] = {
    Op.COMPLETED: ResourceEvent.COMPLETE,
    Op.FAILED_NO_EFFECT: ResourceEvent.FAIL_NO_EFFECT,
    Op.UNKNOWN: ResourceEvent.UNCERTAIN,
    Op.RECONCILED_COMPLETED: ResourceEvent.RECONCILE_COMPLETED,
    Op.RECONCILED_NO_EFFECT: ResourceEvent.RECONCILE_NO_EFFECT,
    Op.CLAIMED: ResourceEvent.RETRY,
}
#: What a contract that moves a resource must declare in its `protocol_outcomes`; the rest
#: follow from these (`outcome_events`).
REQUIRED_OUTCOMES: Final = ("completed", "failed_no_effect", "unknown")


def outcome_events(
    protocol: Protocol[Any, Any], outcomes: Mapping[str, str],
) -> dict[OperationState, ResourceEvent]:
    """What each move of an operation does to a resource of `protocol`, read from a contract's
    `protocol_outcomes` (an operation state -> the resource's state after that move): the one
    outcome's own event (`OUTCOME_EVENTS`), from the state the resource is in before it
    (`OUTCOME_SOURCES`: where its claim led, or where the `unknown` outcome left it), which
    must lead there in the resource's table. `reconciled_completed` and
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
    claimed = {str(target) for (_s, event), target in protocol.transitions.items()
               if event == ResourceEvent.CLAIM}
    if len(claimed) != 1:
        raise ValueError(f"{protocol.name!r}: a claim must lead to one state, not {claimed}")
    targets = {**{OperationState(name): state for name, state in outcomes.items()}}
    targets.setdefault(Op.RECONCILED_COMPLETED, outcomes["completed"])
    targets.setdefault(Op.RECONCILED_NO_EFFECT, outcomes["failed_no_effect"])
    targets.setdefault(Op.CLAIMED, next(iter(claimed)))
    before = {Op.CLAIMED: next(iter(claimed)), Op.UNKNOWN: outcomes["unknown"]}
    states = {str(state) for state in protocol.states}
    events: dict[OperationState, ResourceEvent] = {}
    for moved, target in targets.items():
        if target not in states:
            raise ValueError(f"protocol_outcomes[{moved.value!r}] names {target!r}, a state "
                             f"{protocol.name!r} lacks")
        source, event = before[OUTCOME_SOURCES[moved]], OUTCOME_EVENTS[moved]
        # The outcome's own event must lead there: an unknown outcome may never leave a
        # resource where it could be edited and proposed again, whatever else the table allows.
        found = protocol.transitions.get((source, event))
        if found is None or str(found) != target:
            raise ValueError(f"protocol_outcomes[{moved.value!r}] names {target!r}, but "
                             f"{protocol.name!r} moves by {event.value!r} from "
                             f"{source!r} to "
                             f"{'nowhere' if found is None else repr(str(found))}")
        events[moved] = event
    return events


class Outcome(StrEnum):
    """What an operation came to, as the caller that drives it hears it (docs/design.md#outcomes).

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
#: revoked after its grant (it authorizes one attempt, which its grant starts at once) and never
#: expired after it. A pending one is withdrawn (`revoke`, audited `renewal.withdrawn`) when an
#: admin resolves its operation: a settled operation is never attempted again.
RENEWAL_LIFECYCLE: Final = Protocol[ApprovalState, ApprovalEvent](
    name="renewal",
    initial=A.PENDING,
    transitions={
        (A.PENDING, AE.GRANT): A.GRANTED,
        (A.PENDING, AE.DENY): A.DENIED,
        (A.PENDING, AE.EXPIRE): A.EXPIRED,
        (A.PENDING, AE.REVOKE): A.REVOKED,
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

def transition(protocol: Protocol[S, E], state: S, event: E) -> S:
    """The next state of `state` under `event`, or `protocol_state_invalid` if undeclared."""
    try:
        return protocol.transitions[(state, event)]
    except KeyError:
        raise Denial(
            DenialCode.PROTOCOL_STATE_INVALID,
            f"{protocol.name}: '{event}' is not allowed in state '{state}'.",
            protocol=protocol.name,
            state=str(state),
            event=str(event),
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
