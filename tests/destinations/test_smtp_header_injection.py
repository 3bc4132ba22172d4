"""The SMTP client refuses header injection and anything but one plain address per field, before
it connects: a definite failure with nothing sent."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from demo.destinations import DefiniteFailure, send_email


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening socket that never answers; a connection attempt would queue on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def send(listener: socket.socket, **changes: Any) -> None:
    message: dict[str, Any] = {"message_id": "op_1@console.invalid",
                               "sender": "owner@example.test", "to": ["approver@example.test"],
                               "cc": [], "subject": "Quarterly report", "body": "Hello\n",
                               **changes}
    send_email("127.0.0.1", listener.getsockname()[1], timeout=0.5, **message)


def nobody_connected(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"subject": "Report\r\nBcc: x@evil.example"}, id="subject-crlf"),
        pytest.param({"subject": "Report\n"}, id="subject-trailing-lf"),
        pytest.param({"subject": "Report\r"}, id="subject-trailing-cr"),
        pytest.param({"subject": "Re\x00port"}, id="subject-nul"),
        pytest.param({"sender": "owner@example.test\n"}, id="sender-trailing-lf"),
        pytest.param({"to": ["a@example.test\r\nBcc: x@evil.example"]}, id="to-crlf"),
        pytest.param({"to": ["a@example.test\n"]}, id="to-trailing-lf"),
        pytest.param({"to": ["Eve <eve@x.example>"]}, id="to-display-name"),
        pytest.param({"to": ["a@x.example, b@y.example"]}, id="to-two-addresses"),
        pytest.param({"cc": ["support@acme\u202e.example"]}, id="cc-bidi"),
        pytest.param({"message_id": "op_1\r\nBcc: x@evil.example"}, id="message-id-crlf"),
    ],
)
def test_injection_is_refused_before_connecting(
    listener: socket.socket, changes: dict[str, Any],
) -> None:
    with pytest.raises(DefiniteFailure, match="invalid message"):
        send(listener, **changes)
    assert nobody_connected(listener)


def test_a_plain_message_does_connect(listener: socket.socket) -> None:
    """The fixture can tell: a valid message reaches the (silent) server and times out there."""
    with pytest.raises(DefiniteFailure, match="could not connect"):
        send(listener, to=["kunde@bücher.example"], subject="Tab\tis fine")
    assert not nobody_connected(listener)
