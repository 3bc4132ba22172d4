"""What counts as "no effect" and what is uncertain at the demo destinations' clients, and a
whole handler call bounded by the contract timeout."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import pytest

from demo.destinations.bank_client import bank_transfer
from demo.destinations.http_client import SUCCESS as ANY_2XX
from demo.destinations.smtp_client import send_email
from demo.handlers import EmailSendHandler, PaymentsTransferHandler
from dispatch.handlers import (
    Cancellation,
    DefiniteFailure,
    HandlerContext,
    UncertainOutcome,
    within_deadline,
)
from tests.support.standins import bank_standin, bank_url, smtp_standin

TRANSFER = {"key": "op_1", "from_account": "acct-001", "to_account": "acct-999",
            "amount": "1.00", "currency": "EUR", "memo": ""}


@pytest.fixture
def answering() -> Iterator[Any]:
    """A bank stand-in that answers every POST with the status and body the test sets."""
    with bank_standin() as server:
        yield server


@pytest.mark.parametrize("status", [409, 408, 425, 429, 500, 503])
def test_a_reply_to_a_request_the_bank_may_have_acted_on_is_uncertain(
    answering: Any, status: int,
) -> None:
    answering.status = status
    with pytest.raises(UncertainOutcome):
        bank_transfer(bank_url(answering), timeout=2, **TRANSFER)
    assert answering.keys == ["op_1"]


@pytest.mark.parametrize("status", [400, 404, 422])
def test_a_refusal_of_the_request_itself_is_no_effect(answering: Any, status: int) -> None:
    answering.status = status
    with pytest.raises(DefiniteFailure):
        bank_transfer(bank_url(answering), timeout=2, **TRANSFER)


SUCCESS = sorted({*(s for s in HTTPStatus if s in ANY_2XX), ANY_2XX[-1]})
UNUSABLE_BODIES = [
    pytest.param(b"transfer recorded", id="not-json"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(json.dumps([TRANSFER]).encode(), id="json-array"),
    pytest.param(json.dumps({**TRANSFER, "key": "op_2"}).encode(), id="another-key"),
    pytest.param(json.dumps({**TRANSFER, "key": None}).encode(), id="null-key"),
    pytest.param(b"", id="empty"),
    pytest.param(json.dumps({k: v for k, v in TRANSFER.items() if k != "key"}).encode(),
                 id="no-key"),
    pytest.param(b'"op_1"', id="json-string"),
]


@pytest.mark.parametrize("body", UNUSABLE_BODIES)
@pytest.mark.parametrize("status", SUCCESS)
def test_a_2xx_with_an_unusable_body_is_uncertain(
    answering: Any, status: int, body: bytes,
) -> None:
    """The bank answered, so it received the transfer; an answer that does not show the
    transfer recorded under this key settles nothing, and is never no effect."""
    answering.status, answering.body = status, body
    with pytest.raises(UncertainOutcome, match="unusable body"):
        bank_transfer(bank_url(answering), timeout=2, **TRANSFER)
    assert answering.keys == ["op_1"]


def test_a_2xx_with_the_transfer_for_this_key_is_its_record(answering: Any) -> None:
    answering.status, answering.body = 201, json.dumps(TRANSFER).encode()
    assert bank_transfer(bank_url(answering), timeout=2, **TRANSFER) == TRANSFER


@pytest.fixture
def smtp() -> Iterator[Any]:
    """An SMTP stand-in that accepts the message and answers it as the test sets."""
    with smtp_standin() as server:
        yield server


def send(server: Any) -> None:
    send_email("127.0.0.1", server.server_address[1], message_id="op_1@console.invalid",
               sender="support@acme.example", to=["customer@example.com"], cc=[],
               subject="Your refund", body="We have refunded your order.\n", timeout=2)


@pytest.mark.parametrize("reply", [
    pytest.param(b"ok thanks\r\n", id="words"),
    pytest.param(b"2OK queued\r\n", id="2xx-garbled"),
    pytest.param(b"\r\n", id="empty-line"),
    pytest.param(b"250-queued as 1\r\n", id="2xx-unfinished-then-closed"),
    pytest.param(None, id="closed-without-reply"),
])
def test_an_unusable_reply_after_the_message_was_sent_is_uncertain(
    smtp: Any, reply: bytes | None,
) -> None:
    smtp.after_data = reply
    with pytest.raises(UncertainOutcome, match="after the message was sent"):
        send(smtp)
    assert len(smtp.messages) == 1
    assert b"Message-ID: <op_1@console.invalid>" in smtp.messages[0]


def test_a_2xx_reply_after_the_message_is_delivery(smtp: Any) -> None:
    """The stand-in speaks enough SMTP: its well-formed answer is a delivery."""
    send(smtp)
    assert len(smtp.messages) == 1


def context(*, seconds: float, destination: str = "http://127.0.0.1:9",
            cancelled: Cancellation | None = None) -> HandlerContext:
    return HandlerContext(
        operation_id="op_1", attempt=1, timeout=seconds,
        deadline=time.monotonic() + seconds, cancelled=cancelled or Cancellation(),
        snapshot={"arguments": {k: v for k, v in TRANSFER.items() if k != "key"},
                  "destination": {"name": "bank", "address": destination}})


def test_a_reply_dripped_past_the_contract_timeout_is_uncertain_in_time(answering: Any) -> None:
    answering.status, answering.drip = 201, 30
    started = time.monotonic()
    with pytest.raises(UncertainOutcome, match="within the contract timeout"):
        PaymentsTransferHandler().perform(context(seconds=1.5, destination=bank_url(answering)))
    assert time.monotonic() - started < 3


def test_within_deadline_passes_answers_and_errors_through() -> None:
    ctx = context(seconds=5)
    assert within_deadline(ctx, lambda: 42) == 42
    with pytest.raises(DefiniteFailure, match="nope"):
        within_deadline(ctx, lambda: (_ for _ in ()).throw(DefiniteFailure("nope")))
    with pytest.raises(DefiniteFailure, match="no time left"):
        within_deadline(context(seconds=-1), lambda: 42)


@pytest.mark.parametrize("handler", [EmailSendHandler(), PaymentsTransferHandler()])
def test_the_demo_handlers_stop_before_their_effect_when_cancelled(
    handler: Any, answering: Any,
) -> None:
    cancelled = Cancellation(probe=lambda: True)  # the store says: cancelled
    ctx = context(seconds=5, destination=bank_url(answering), cancelled=cancelled)
    if isinstance(handler, EmailSendHandler):
        port = answering.server_address[1]
        ctx = HandlerContext(operation_id="op_1", attempt=1, timeout=5, cancelled=cancelled,
                             snapshot={"arguments": {"draft": {"payload": {
                                 "from": "a@x.example", "to": ["b@x.example"], "cc": [],
                                 "subject": "s", "body": "b"}}},
                                 "destination": {"address": f"127.0.0.1:{port}"}})
    with pytest.raises(DefiniteFailure, match="cancelled before the effect"):
        handler.perform(ctx)
    assert answering.keys == []


def test_a_cancellation_is_asked_of_the_store_at_most_every_interval() -> None:
    asked: list[float] = []
    signal = Cancellation(probe=lambda: asked.append(time.monotonic()) or False, interval=0.2)
    assert not signal.is_set()
    assert not signal.is_set()
    assert len(asked) == 1
    assert not signal.wait(0.5)
    assert 2 <= len(asked) <= 4
    signal.set()
    assert signal.is_set()
