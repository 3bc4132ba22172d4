"""The unrestricted entry point stays closed (docs/design.md#dispatcher): no registered handler runs
except through the dispatcher's invoke path for a started, open attempt of a claimed operation of
its own contract. The guard is `handler_invoke`'s, not the handler's, so it holds for any
implementation of the `Handler` protocol."""

from __future__ import annotations

import json
from typing import Any

import pytest

from demo.destinations.runner import list_all
from dispatch.handlers import HandlerContext, UnclaimedInvocationError
from dispatch.models import Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.operations import StartedAttempt, attempt_start
from dispatch.services.proposals import proposal_create
from dispatch.services.worker import handler_invoke, operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


def context(operation_id: str, attempt: int, snapshot: dict[str, Any]) -> HandlerContext:
    return HandlerContext(operation_id=operation_id, attempt=attempt, snapshot=snapshot,
                          timeout=5.0)


def nothing_sent(destinations: Destinations) -> bool:
    """No destination recorded an effect (the sources are served, not written)."""
    found = list_all(destinations.directory)
    return found["email"] == found["bank"] == found["publications"] == []


def claimed(world: World, operation: str) -> Operation:
    if operation == "email.send":
        proposal, _ = world.approved_email()
    else:
        proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                                   arguments={"customer_id": "cus-002"}, now=world.now)
    return proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                             enqueue=False)


def test_every_registered_handler_refuses_a_call_without_a_claim(
    live: World, destinations: Destinations,
) -> None:
    runtime = get_runtime()
    names = sorted({contract.qualified_name for contract in runtime.registry})
    assert {"email.send", "payments.transfer", "crm.lookup"} <= set(names)
    for name in names:
        handler = runtime.handler(runtime.contract(name))
        snapshot = {"arguments": {}, "destination": handler.destination()}
        with pytest.raises(UnclaimedInvocationError, match="holds no claim"):
            handler_invoke(handler, context(f"op_forged_{name}", 1, snapshot))
    assert nothing_sent(destinations)


def test_a_claim_without_a_started_attempt_is_not_enough(
    live: World, destinations: Destinations,
) -> None:
    operation = claimed(live, "email.send")
    assert (operation.state, operation.attempts_made) == ("claimed", 0)
    handler = get_runtime().handler(get_runtime().contract("email.send"))
    snapshot = {"arguments": {}, "destination": handler.destination()}
    for number in (0, 1, 2):
        with pytest.raises(UnclaimedInvocationError):
            handler_invoke(handler, context(operation.id, number, snapshot))
    assert nothing_sent(destinations)


def test_a_started_attempt_opens_only_its_own_contracts_handler(
    live: World, destinations: Destinations,
) -> None:
    lookup = claimed(live, "crm.lookup")
    started = attempt_start(lookup, 1, live.now)
    assert started is not None
    runtime = get_runtime()
    for name in ("email.send", "payments.transfer"):
        handler = runtime.handler(runtime.contract(name))
        snapshot = {"arguments": {}, "destination": handler.destination()}
        with pytest.raises(UnclaimedInvocationError):
            handler_invoke(handler, context(lookup.id, 1, snapshot))
        # Its proof names another operation: the store is asked, and refuses.
        with pytest.raises(UnclaimedInvocationError):
            handler_invoke(handler, context(f"op_other_{name}", 1, snapshot), started)
        # Its proof, for its own operation and attempt, opens only crm.lookup's handler.
        with pytest.raises(UnclaimedInvocationError):
            handler_invoke(handler, context(lookup.id, 1, snapshot), started)
    assert nothing_sent(destinations)


def test_an_ended_attempt_opens_nothing(live: World, destinations: Destinations) -> None:
    operation = operation_execute(operation_id=claimed(live, "email.send").id)
    assert operation.state == "completed"
    assert len(list_all(destinations.directory)["email"]) == 1
    handler = get_runtime().handler(get_runtime().contract("email.send"))
    snapshot = Operation.objects.get(id=operation.id).proposal.canonical
    with pytest.raises(UnclaimedInvocationError):
        handler_invoke(handler, context(operation.id, 1, json.loads(snapshot)))
    assert len(list_all(destinations.directory)["email"]) == 1


def test_the_proof_of_a_started_attempt_cannot_be_made_by_hand() -> None:
    with pytest.raises(TypeError, match="minted by attempt_start or attempt_open only"):
        StartedAttempt(operation_id="op_x", number=1)
