"""A contract's `protocol_outcomes` is what the dispatcher does to its resources on each outcome
(docs/design.md#contracts): read once at registration, checked against each resource's own table,
and used by every move of the operation. A contract that declares nonsense does not register."""

from __future__ import annotations

from dataclasses import replace

import pytest

from demo.contracts import email_send, report_publish
from demo.handlers import EmailSendHandler
from demo.tables import EMAIL_DRAFT, QUESTION, REPORT
from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry
from protocols.grants import Policy
from protocols.lifecycle import (
    OperationEvent,
    OperationState,
    ResourceEvent,
    outcome_events,
)

SENT = {"completed": "sent", "failed_no_effect": "failed_no_effect", "unknown": "unknown"}


def fresh_runtime() -> Runtime:
    return Runtime(registry=ContractRegistry(), handlers={},
                   policy=Policy(allowed_effects=frozenset({"external_write"})))


def test_every_move_of_a_draft_follows_the_declared_states() -> None:
    assert outcome_events(EMAIL_DRAFT, SENT) == {
        OperationState.COMPLETED: ResourceEvent.COMPLETE,
        OperationState.FAILED_NO_EFFECT: ResourceEvent.FAIL_NO_EFFECT,
        OperationState.UNKNOWN: ResourceEvent.UNCERTAIN,
        OperationState.RECONCILED_COMPLETED: ResourceEvent.RECONCILE_COMPLETED,
        OperationState.RECONCILED_NO_EFFECT: ResourceEvent.RECONCILE_NO_EFFECT,
        OperationState.CLAIMED: ResourceEvent.RETRY,
    }


def test_a_report_is_published_by_its_completion() -> None:
    events = outcome_events(REPORT, {**SENT, "completed": "published"})
    assert events[OperationState.COMPLETED] is ResourceEvent.COMPLETE
    assert events[OperationState.RECONCILED_COMPLETED] is ResourceEvent.RECONCILE_COMPLETED


@pytest.mark.parametrize(("outcomes", "says"), [
    ({**SENT, "completed": "published"}, "names 'published', a state 'email_draft' lacks"),
    ({**SENT, "completed": "draft"},
     "'email_draft' moves by 'complete' from 'dispatching' to 'sent'"),
    # The table could take a draft there, but not by an uncertain outcome: never reusable.
    ({**SENT, "unknown": "failed_no_effect"},
     "'email_draft' moves by 'uncertain' from 'dispatching' to 'unknown'"),
    ({"completed": "sent", "unknown": "unknown"}, "must declare ['failed_no_effect']"),
    ({**SENT, "finished": "sent"}, "names no operation outcome: ['finished']"),
    ({**SENT, "reconciled_no_effect": "sent"},
     "moves by 'reconcile_no_effect' from 'unknown' to 'failed_no_effect'"),
    ({**SENT, "claimed": "authorized"}, "moves by 'retry' from 'unknown' to 'dispatching'"),
])
def test_nonsense_is_refused_saying_what(outcomes: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError) as refused:
        outcome_events(EMAIL_DRAFT, outcomes)
    assert says in str(refused.value)


def test_a_table_without_the_outcomes_move_is_refused() -> None:
    # The question's table has no claim and no outcome: nothing can run on it.
    with pytest.raises(ValueError, match="a claim must lead to one state"):
        outcome_events(QUESTION, SENT)


def register(runtime: Runtime, **changes: object) -> None:
    handler = EmailSendHandler()
    runtime.register(replace(email_send(handler.implementation_fingerprint), **changes), handler)


def test_registration_refuses_a_contract_declaring_nonsense() -> None:
    with pytest.raises(ValueError, match=r"email\.send: protocol_outcomes.*'published'"):
        register(fresh_runtime(), protocol_outcomes={**SENT, "completed": "published"})
    with pytest.raises(ValueError, match="must declare"):
        register(fresh_runtime(), protocol_outcomes={})


def test_outcomes_without_a_resource_to_move_are_refused() -> None:
    with pytest.raises(ValueError, match="moves no resource"):
        register(fresh_runtime(), protocol_preconditions={}, protocol_outcomes=SENT,
                 input_type={"type": "object"})


def test_the_dispatcher_moves_resources_by_the_declaration() -> None:
    runtime = fresh_runtime()
    register(runtime)
    contract = runtime.contract("email.send")
    assert runtime.resource_event(contract.fingerprint, OperationState.COMPLETED,
                                  OperationEvent.COMPLETE) is ResourceEvent.COMPLETE
    assert runtime.resource_event(contract.fingerprint, OperationState.CLAIMED,
                                  OperationEvent.RETRY) is ResourceEvent.RETRY


def test_the_shipped_publication_declares_its_outcomes() -> None:
    contract = report_publish("impl")
    assert contract.protocol_outcomes["completed"] == "published"


