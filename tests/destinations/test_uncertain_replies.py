"""What counts as "no effect" and what is uncertain at the demo destinations' clients, and a
whole handler call bounded by the contract timeout."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from demo.destinations.bank_client import bank_transfer
from demo.handlers import EmailSendHandler, PaymentsTransferHandler
from dispatch.handlers import (
    Cancellation,
    DefiniteFailure,
    HandlerContext,
    UncertainOutcome,
    within_deadline,
)

TRANSFER = {"key": "op_1", "from_account": "acct-001", "to_account": "acct-999",
            "amount": "1.00", "currency": "EUR", "memo": ""}


@pytest.fixture
def answering() -> Iterator[Any]:
    """A bank stand-in that answers every POST with the status the test sets, or drips it."""

    class Reply(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            server.hits += 1
            body = json.dumps({"error": "same key in progress"}).encode()
            self.send_response(server.status)
            self.send_header("Content-Length", str(len(body) + server.drip))
            self.end_headers()
            self.wfile.write(body)
            for _ in range(server.drip):  # one byte a second: every socket wait is short
                time.sleep(1)
                self.wfile.write(b" ")

    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), Reply)
    server.daemon_threads = True
    server.status, server.hits, server.drip = 409, 0, 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server: Any) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("status", [409, 408, 425, 429, 500, 503])
def test_a_reply_to_a_request_the_bank_may_have_acted_on_is_uncertain(
    answering: Any, status: int,
) -> None:
    answering.status = status
    with pytest.raises(UncertainOutcome):
        bank_transfer(url(answering), timeout=2, **TRANSFER)
    assert answering.hits == 1


@pytest.mark.parametrize("status", [400, 404, 422])
def test_a_refusal_of_the_request_itself_is_no_effect(answering: Any, status: int) -> None:
    answering.status = status
    with pytest.raises(DefiniteFailure):
        bank_transfer(url(answering), timeout=2, **TRANSFER)


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
        PaymentsTransferHandler().perform(context(seconds=1.5, destination=url(answering)))
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
    ctx = context(seconds=5, destination=url(answering), cancelled=cancelled)
    if isinstance(handler, EmailSendHandler):
        port = answering.server_address[1]
        ctx = HandlerContext(operation_id="op_1", attempt=1, timeout=5, cancelled=cancelled,
                             snapshot={"arguments": {"draft": {"payload": {
                                 "from": "a@x.example", "to": ["b@x.example"], "cc": [],
                                 "subject": "s", "body": "b"}}},
                                 "destination": {"address": f"127.0.0.1:{port}"}})
    with pytest.raises(DefiniteFailure, match="cancelled before the effect"):
        handler.perform(ctx)
    assert answering.hits == 0


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
