"""Through the dispatcher, a destination that answered with something unusable after the effect
was asked for leaves the operation unknown, never failed with no effect: a payment retried under
its one key as far as its contract allows, an email not retried at all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dispatch.models import Attempt, AuditEvent, Operation
from dispatch.runtime import get_runtime
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.worker import operation_execute
from tests.conftest import World
from tests.support.standins import bank_destination, smtp_standin

pytestmark = pytest.mark.django_db


@pytest.fixture
def bank(settings: Any) -> Iterator[Any]:
    with bank_destination(settings) as server:
        yield server


@pytest.fixture
def smtp(settings: Any) -> Iterator[Any]:
    """An SMTP stand-in, set as the destination before any proposal binds it."""
    with smtp_standin() as server:
        settings.DESTINATIONS = {**settings.DESTINATIONS, "smtp_host": "127.0.0.1",
                                 "smtp_port": server.server_address[1]}
        get_runtime.cache_clear()
        yield server
    get_runtime.cache_clear()


def executed(world: World, proposal: Any) -> Operation:
    world.grant(proposal)
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    operation_execute(operation_id=operation.id)
    operation.refresh_from_db()
    return operation


def max_attempts(operation: Operation) -> int:
    contract = get_runtime().registry.by_fingerprint(operation.contract_fingerprint)
    assert contract is not None
    return contract.scheduling_contract.max_attempts


def assert_unknown_after(operation: Operation, attempts: int) -> Attempt:
    """The operation is unknown after `attempts` uncertain attempts; the last one."""
    assert operation.state == "unknown"
    made = list(Attempt.objects.filter(operation=operation).order_by("number"))
    assert [a.outcome for a in made] == [Attempt.Outcome.UNCERTAIN] * attempts
    assert not AuditEvent.objects.filter(operation_id=operation.id,
                                         kind="operation.failed_no_effect").exists()
    return made[-1]


@pytest.mark.parametrize("body", [
    pytest.param(b"<html>transfer accepted</html>", id="not-json"),
    pytest.param(b"[]", id="json-array"),
    pytest.param(json.dumps({"key": "op_other"}).encode(), id="another-key"),
])
def test_a_payment_answered_200_with_an_unusable_body_is_unknown(
    world: World, bank: Any, body: bytes,
) -> None:
    bank.status, bank.body = 200, body
    operation = executed(world, world.propose_transfer())
    attempts = max_attempts(operation)
    assert attempts > 1  # retry-safe: the bound, not a single try, is what stops it
    last = assert_unknown_after(operation, attempts)
    assert bank.keys == [operation.id] * attempts
    assert "unusable body" in last.error
    assert f"no retry: all {attempts} attempts used" in last.error


def test_an_email_answered_unparseably_after_its_content_is_unknown(
    world: World, smtp: Any,
) -> None:
    smtp.after_data = b"ok thanks\r\n"
    operation = executed(world, world.propose_email(world.draft()))
    last = assert_unknown_after(operation, 1)
    assert "no retry: the destination does not deduplicate" in last.error
    assert len(smtp.messages) == 1
    assert f"Message-ID: <{operation.id}@console.invalid>".encode() in smtp.messages[0]
