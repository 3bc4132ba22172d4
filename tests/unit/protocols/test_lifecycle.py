"""The declared transition tables: every row is taken, every other pair is refused."""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import Any

import pytest

from demo.tables import EMAIL_DRAFT, QUESTION, REPORT, DemoState
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import (
    APPROVAL_LIFECYCLE,
    OPERATION_LIFECYCLE,
    PERMIT_LIFECYCLE,
    RESOURCE_PROTOCOLS,
    ApprovalEvent,
    ApprovalState,
    OperationEvent,
    OperationState,
    PermitEvent,
    PermitState,
    Protocol,
    ResourceEvent,
    ResourceState,
    sources,
    transition,
)

# Written out by hand from docs/design.md#resources, #outcomes, #evidence and #concepts,
# docs/rest-api.md#calls, independently of the tables, so a silently edited row (added, dropped or
# retargeted) fails `test_table_is_exactly_as_declared`.
EXPECTED: dict[str, set[tuple[str, str, str]]] = {
    "email_draft": {
        ("draft", "edit", "draft"),
        ("proposed", "edit", "draft"),
        ("authorized", "edit", "draft"),
        ("denied", "edit", "draft"),
        ("failed_no_effect", "edit", "draft"),
        ("draft", "propose", "proposed"),
        ("proposed", "propose", "proposed"),
        ("authorized", "propose", "authorized"),
        ("failed_no_effect", "propose", "proposed"),
        ("proposed", "grant", "authorized"),
        ("authorized", "grant", "authorized"),
        ("proposed", "deny", "denied"),
        ("authorized", "deny", "authorized"),
        ("proposed", "expire", "draft"),
        ("authorized", "expire", "draft"),
        ("authorized", "claim", "dispatching"),
        ("dispatching", "complete", "sent"),
        ("dispatching", "fail_no_effect", "failed_no_effect"),
        ("dispatching", "uncertain", "unknown"),
        ("unknown", "retry", "dispatching"),
        ("unknown", "reconcile_completed", "sent"),
        ("unknown", "reconcile_no_effect", "failed_no_effect"),
    },
    "operation": {
        ("pending", "claim", "claimed"),
        ("claimed", "complete", "completed"),
        ("claimed", "fail_no_effect", "failed_no_effect"),
        ("claimed", "uncertain", "unknown"),
        ("unknown", "retry", "claimed"),
        ("unknown", "reconcile_completed", "reconciled_completed"),
        ("unknown", "reconcile_no_effect", "reconciled_no_effect"),
    },
    "approval": {
        ("pending", "grant", "granted"),
        ("pending", "deny", "denied"),
        ("pending", "expire", "expired"),
        ("pending", "revoke", "revoked"),
        ("granted", "expire", "expired"),
        ("granted", "revoke", "revoked"),
    },
    "permit": {
        ("issued", "claim", "claimed"),
        ("issued", "expire", "expired"),
        ("issued", "revoke", "revoked"),
    },
    # docs/design.md#evidence: `question` open -> answered; `report` draft -> attested -> proposed
    # -> authorized -> dispatching -> published | failed_no_effect | unknown, an edit to draft.
    # A fetch only reads its question (`research.fetch` declares `reads`): no move of its own.
    "question": {
        ("open", "edit", "open"),
        ("open", "answer", "answered"),
    },
    "report": {
        ("draft", "edit", "draft"),
        ("attested", "edit", "draft"),
        ("proposed", "edit", "draft"),
        ("authorized", "edit", "draft"),
        ("denied", "edit", "draft"),
        ("failed_no_effect", "edit", "draft"),
        ("draft", "attest", "attested"),
        ("attested", "propose", "proposed"),
        ("proposed", "propose", "proposed"),
        ("authorized", "propose", "authorized"),
        ("failed_no_effect", "propose", "proposed"),
        ("proposed", "grant", "authorized"),
        ("authorized", "grant", "authorized"),
        ("proposed", "deny", "denied"),
        ("authorized", "deny", "authorized"),
        ("proposed", "expire", "attested"),
        ("authorized", "expire", "attested"),
        ("authorized", "claim", "dispatching"),
        ("dispatching", "complete", "published"),
        ("dispatching", "fail_no_effect", "failed_no_effect"),
        ("dispatching", "uncertain", "unknown"),
        ("unknown", "retry", "dispatching"),
        ("unknown", "reconcile_completed", "published"),
        ("unknown", "reconcile_no_effect", "failed_no_effect"),
    },
}

#: The demo kinds' states: the common names and the demo's own.
DemoKindState = StrEnum("DemoKindState", [(m.name, m.value) for m in (*ResourceState, *DemoState)])

# protocol, its state enum, its event enum, its expected initial state
PROTOCOLS: list[tuple[Protocol[Any, Any], type[StrEnum], type[StrEnum], str]] = [
    (EMAIL_DRAFT, DemoKindState, ResourceEvent, "draft"),
    (QUESTION, DemoKindState, ResourceEvent, "open"),
    (REPORT, DemoKindState, ResourceEvent, "draft"),
    (OPERATION_LIFECYCLE, OperationState, OperationEvent, "pending"),
    (APPROVAL_LIFECYCLE, ApprovalState, ApprovalEvent, "pending"),
    (PERMIT_LIFECYCLE, PermitState, PermitEvent, "issued"),
]


def _members(states: type[StrEnum]) -> tuple[type[StrEnum], ...]:
    """The enums whose members a protocol's table holds (a demo kind's: two)."""
    return (ResourceState, DemoState) if states is DemoKindState else (states,)


BY_NAME = {protocol.name: (protocol, states, events) for protocol, states, events, _ in PROTOCOLS}

TERMINAL: list[tuple[str, str]] = [
    ("email_draft", "sent"),
    ("question", "answered"),
    ("report", "published"),
    ("operation", "completed"),
    ("operation", "failed_no_effect"),
    ("operation", "reconciled_completed"),
    ("operation", "reconciled_no_effect"),
    ("approval", "denied"),
    ("approval", "expired"),
    ("approval", "revoked"),
    ("permit", "claimed"),
    ("permit", "expired"),
    ("permit", "revoked"),
]


def _table_rows() -> list[Any]:
    return [
        pytest.param(protocol, source, event, target,
                     id=f"{protocol.name}:{source.value}-{event.value}")
        for protocol, *_ in PROTOCOLS
        for (source, event), target in protocol.transitions.items()
    ]


def _expected_rows() -> list[Any]:
    return [
        pytest.param(name, source, event, target, id=f"{name}:{source}-{event}")
        for name, rows in EXPECTED.items()
        for source, event, target in sorted(rows)
    ]


def _undeclared_pairs() -> list[Any]:
    pairs = []
    for protocol, states, events, _ in PROTOCOLS:
        declared = {(s, e) for s, e, _ in EXPECTED[protocol.name]}
        for state, event in itertools.product(states, events):
            if (state.value, event.value) not in declared:
                pairs.append(pytest.param(protocol, state, event,
                                          id=f"{protocol.name}:{state.value}-{event.value}"))
    return pairs


@pytest.mark.parametrize(("protocol", "states", "events", "initial"), PROTOCOLS,
                         ids=[p[0].name for p in PROTOCOLS])
def test_table_is_exactly_as_declared(
    protocol: Protocol[Any, Any], states: type[StrEnum], events: type[StrEnum], initial: str,
) -> None:
    rows = {(s.value, e.value, t.value) for (s, e), t in protocol.transitions.items()}
    assert rows == EXPECTED[protocol.name]
    assert protocol.initial == initial
    # Every key and target is a member of the protocol's own enums, not a look-alike string.
    for (source, event), target in protocol.transitions.items():
        assert isinstance(source, _members(states))
        assert isinstance(event, events)
        assert isinstance(target, _members(states))


@pytest.mark.parametrize(("protocol", "source", "event", "target"), _table_rows())
def test_every_table_row_is_taken(
    protocol: Protocol[Any, Any], source: StrEnum, event: StrEnum, target: StrEnum,
) -> None:
    assert transition(protocol, source, event) is target
    assert protocol.allows(source, event)


@pytest.mark.parametrize(("name", "source", "event", "target"), _expected_rows())
def test_every_expected_transition_is_taken(
    name: str, source: str, event: str, target: str,
) -> None:
    protocol, states, events = BY_NAME[name]
    result = transition(protocol, states(source), events(event))
    assert result == target
    assert isinstance(result, _members(states))


@pytest.mark.parametrize(("protocol", "state", "event"), _undeclared_pairs())
def test_undeclared_pair_is_refused(
    protocol: Protocol[Any, Any], state: StrEnum, event: StrEnum,
) -> None:
    assert not protocol.allows(state, event)
    with pytest.raises(Denial) as caught:
        transition(protocol, state, event)
    denial = caught.value
    assert denial.code is DenialCode.PROTOCOL_STATE_INVALID
    assert denial.status == 409
    assert denial.details == {"protocol": protocol.name, "state": state.value,
                              "event": event.value}
    assert protocol.name in denial.message
    assert state.value in denial.message
    assert event.value in denial.message


def test_every_protocol_has_undeclared_pairs_to_refuse() -> None:
    """Guards the parametrization above against an empty product."""
    names = {p.values[0].name for p in _undeclared_pairs()}
    assert names == set(BY_NAME)


@pytest.mark.parametrize(("name", "state"), TERMINAL, ids=[f"{n}:{s}" for n, s in TERMINAL])
def test_terminal_state_allows_nothing(name: str, state: str) -> None:
    protocol, states, events = BY_NAME[name]
    for event in events:
        assert not protocol.allows(states(state), event)
        with pytest.raises(Denial) as caught:
            transition(protocol, states(state), event)
        assert caught.value.code is DenialCode.PROTOCOL_STATE_INVALID


@pytest.mark.parametrize(("protocol", "states", "events", "initial"), PROTOCOLS,
                         ids=[p[0].name for p in PROTOCOLS])
def test_terminal_states_are_exactly_those_without_outgoing_rows(
    protocol: Protocol[Any, Any], states: type[StrEnum], events: type[StrEnum], initial: str,
) -> None:
    # The states this protocol uses: the resource protocols share one enum.
    without_exit = {s.value for s in protocol.states
                    if not any(protocol.allows(s, e) for e in events)}
    assert without_exit == {state for name, state in TERMINAL if name == protocol.name}


def test_unknown_resource_never_returns_to_authorized() -> None:
    unknown = ResourceState.UNKNOWN
    targets = {EMAIL_DRAFT.transitions[(unknown, e)] for e in ResourceEvent
               if EMAIL_DRAFT.allows(unknown, e)}
    # Settled, or back to dispatching for a further attempt of the same operation (its retry
    # under the same key): never to a state a new proposal or permit could use.
    assert targets == {DemoState.SENT, ResourceState.FAILED_NO_EFFECT,
                       ResourceState.DISPATCHING}
    assert EMAIL_DRAFT.transitions[(unknown, ResourceEvent.RETRY)] is ResourceState.DISPATCHING
    # Nor by any path that does not pass through a new human grant (docs/design.md#resources).
    seen = {unknown}
    frontier = [unknown]
    while frontier:
        state = frontier.pop()
        for (source, event), target in EMAIL_DRAFT.transitions.items():
            if source is state and event is not ResourceEvent.GRANT and target not in seen:
                seen.add(target)
                frontier.append(target)
    assert ResourceState.AUTHORIZED not in seen


def test_only_a_grant_makes_a_resource_authorized() -> None:
    entering = {(s, e) for (s, e), t in EMAIL_DRAFT.transitions.items()
                if t is ResourceState.AUTHORIZED and s is not ResourceState.AUTHORIZED}
    assert entering == {(ResourceState.PROPOSED, ResourceEvent.GRANT)}


def test_only_authorized_can_be_claimed() -> None:
    assert sources(EMAIL_DRAFT, ResourceEvent.CLAIM) == frozenset({ResourceState.AUTHORIZED})


def test_unknown_operation_never_returns_to_pending() -> None:
    reachable = {t for (s, _), t in OPERATION_LIFECYCLE.transitions.items()
                 if s is OperationState.UNKNOWN}
    assert OperationState.PENDING not in reachable
    assert all(t is not OperationState.PENDING for t in OPERATION_LIFECYCLE.transitions.values())


def _sources_cases() -> list[Any]:
    cases = []
    for protocol, states, events, _ in PROTOCOLS:
        for event in events:
            expected = frozenset(states(s) for s, e, _ in EXPECTED[protocol.name]
                                 if e == event.value)
            cases.append(pytest.param(protocol, event, expected,
                                      id=f"{protocol.name}:{event.value}"))
    return cases


@pytest.mark.parametrize(("protocol", "event", "expected"), _sources_cases())
def test_sources_are_every_state_declaring_the_event(
    protocol: Protocol[Any, Any], event: StrEnum, expected: frozenset[StrEnum],
) -> None:
    found = sources(protocol, event)
    assert isinstance(found, frozenset)
    assert found == expected


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ResourceEvent.EDIT, {"draft", "proposed", "authorized", "denied", "failed_no_effect"}),
        (ResourceEvent.PROPOSE, {"draft", "proposed", "authorized", "failed_no_effect"}),
        (ResourceEvent.EXPIRE, {"proposed", "authorized"}),
        (ResourceEvent.COMPLETE, {"dispatching"}),
    ],
)
def test_sources_of_email_draft_events(event: ResourceEvent, expected: set[str]) -> None:
    assert {s.value for s in sources(EMAIL_DRAFT, event)} == expected


def test_states_cover_every_enum_member() -> None:
    """Each record kind's enum is its protocol's states; the resource protocols share the
    common names and the demo's own, which their states cover together."""
    for protocol, states, _events, _ in PROTOCOLS:
        if states is not DemoKindState:
            assert protocol.states == frozenset(states)
    assert frozenset().union(*(p.states for p in RESOURCE_PROTOCOLS.values())) == (
        frozenset(ResourceState) | frozenset(DemoState))


def test_resource_protocols_register_the_three_kinds() -> None:
    assert dict(RESOURCE_PROTOCOLS) == {"email_draft": EMAIL_DRAFT, "question": QUESTION,
                                        "report": REPORT}


def test_an_edit_of_an_attested_report_drops_its_attestation() -> None:
    """docs/design.md#evidence: an attestation covers the revision it judged; editing makes a new
    one, in draft, which must be attested again before it can be proposed."""
    edited = transition(REPORT, DemoState.ATTESTED, ResourceEvent.EDIT)
    assert edited is ResourceState.DRAFT
    with pytest.raises(Denial):
        transition(REPORT, edited, ResourceEvent.PROPOSE)
    assert transition(REPORT, edited, ResourceEvent.ATTEST) is DemoState.ATTESTED
    # A lapsed approval leaves the attestation standing.
    assert transition(REPORT, ResourceState.PROPOSED, ResourceEvent.EXPIRE) is (
        DemoState.ATTESTED)
    # Once the publication may have run, never back to a reusable state.
    assert {transition(REPORT, ResourceState.UNKNOWN, e) for e in ResourceEvent
            if REPORT.allows(ResourceState.UNKNOWN, e)} == {
        DemoState.PUBLISHED, ResourceState.FAILED_NO_EFFECT, ResourceState.DISPATCHING}


def test_states_are_lowercase_wire_values() -> None:
    for _protocol, states, events, _ in PROTOCOLS:
        for member in [*states, *events]:
            assert member.value == member.name.lower()
