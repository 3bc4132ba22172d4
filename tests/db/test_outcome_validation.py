"""A handler's result is checked against its contract's `output_type` before it is kept or
handed back (docs/design.md#dispatcher step 9): after a read a violation is `failed_no_effect`;
after anything that may have written it is `unknown`, never no effect, and never retried."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from demo.destinations.runner import list_all
from dispatch.handlers import HandlerContext
from dispatch.models import Attempt, Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from dispatch.services.worker import OUTPUT_INVALID, operation_execute
from tests.conftest import World
from tests.support.destinations import Destinations

pytestmark = pytest.mark.django_db


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, Any], None]]:
    """Call with an operation and what its handler answers after doing its real work."""
    get_runtime.cache_clear()

    def answer(name: str, result: Any) -> None:
        runtime = get_runtime()
        handler = runtime.handler(runtime.contract(name))
        real = handler.perform

        def perform(ctx: HandlerContext) -> Any:
            real(ctx)
            return result

        monkeypatch.setattr(handler, "perform", perform)

    yield answer
    get_runtime.cache_clear()


def run(world: World, proposal: Any) -> Operation:
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    return operation_execute(operation_id=operation.id)


@pytest.mark.parametrize("result", [{"message_id": 42}, ["<id@sink>"], None, "sent"])
def test_a_write_that_answers_outside_its_contract_is_unknown(
    live: World, destinations: Destinations, answers: Callable[[str, Any], None], result: Any,
) -> None:
    answers("email.send", result)
    proposal, _ = live.approved_email()
    operation = run(live, proposal)
    assert operation.state == "unknown"
    assert Operation.objects.get(id=operation.id).result is None
    (attempt,) = Attempt.objects.filter(operation_id=operation.id)
    assert attempt.outcome == "uncertain"
    assert attempt.error.startswith(f"{OUTPUT_INVALID}: /result")
    assert len(list_all(destinations.directory)["email"]) == 1


def test_a_retry_safe_write_that_answers_outside_its_contract_is_not_retried(
    live: World, destinations: Destinations, answers: Callable[[str, Any], None],
) -> None:
    answers("payments.transfer", "ok")
    proposal = live.propose_transfer()
    live.grant(proposal)
    operation = run(live, proposal)
    assert operation.state == "unknown"
    assert list(Attempt.objects.filter(operation_id=operation.id).values_list(
        "number", "outcome")) == [(1, "uncertain")]
    assert "no retry: the same key gets the same answer" in Attempt.objects.get(
        operation_id=operation.id).error
    assert len(list_all(destinations.directory)["bank"]) == 1


def test_a_read_that_answers_outside_its_contract_had_no_effect(
    world: World, answers: Callable[[str, Any], None],
) -> None:
    answers("crm.lookup", [1, 2, 3])
    proposal = proposal_create(principal=world.owner, operation="crm.lookup",
                               arguments={"customer_id": "cus-002"}, now=world.now)
    operation = run(world, proposal)
    assert operation.state == "failed_no_effect"
    assert Operation.objects.get(id=operation.id).result is None
    assert Attempt.objects.get(operation_id=operation.id).error == (
        f"{OUTPUT_INVALID}: /result is a list, not a JSON object")


def test_a_result_that_keeps_its_contract_is_kept(live: World) -> None:
    proposal, _ = live.approved_email()
    operation = run(live, proposal)
    assert operation.state == "completed"
    stored = Operation.objects.get(id=operation.id).result
    assert isinstance(stored, dict) and isinstance(stored["message_id"], str)
    assert get_runtime().contract("email.send").output_errors(stored) == []


@pytest.mark.parametrize("result", [{"message_id": "m", "amount": Decimal("1.5")},
                                    {"message_id": "m", "at": object()},
                                    {"message_id": "m", "x": float("nan")}])
def test_a_result_the_store_cannot_keep_is_unknown_and_ends_the_attempt(
    live: World, destinations: Destinations, answers: Callable[[str, Any], None], result: Any,
) -> None:
    """A value JSON cannot encode used to escape as a TypeError after the effect, leaving the
    operation claimed and its attempt open."""
    answers("email.send", result)
    proposal, _ = live.approved_email()
    operation = run(live, proposal)
    assert operation.state == "unknown"
    attempt = Attempt.objects.get(operation_id=operation.id)
    assert attempt.ended_at is not None
    assert attempt.error.startswith(f"{OUTPUT_INVALID}: /result is not JSON")
    assert len(list_all(destinations.directory)["email"]) == 1


def test_a_contract_whose_output_schema_cannot_compile_is_not_registered() -> None:
    from dataclasses import replace

    from demo.contracts import crm_lookup
    from demo.handlers import CrmLookupHandler
    from dispatch.runtime import Runtime
    from protocols.contracts import ContractRegistry
    from protocols.grants import Policy

    runtime = Runtime(registry=ContractRegistry(), handlers={},
                      policy=Policy(allowed_effects=frozenset({"read"})))
    handler = CrmLookupHandler()
    broken = replace(crm_lookup(handler.implementation_fingerprint),
                     output_type={"type": "object", "properties": {"x": {"type": 12}}})
    with pytest.raises(SchemaError):
        runtime.register(broken, handler)
    assert len(runtime.registry) == 0
