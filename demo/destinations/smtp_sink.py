"""A real loopback SMTP sink that records every accepted message in ``email.sqlite3``.

SMTP has no deduplication: each delivery that is accepted stores one row, even when a message
id repeats, so tests can count effects. Faults are chosen by the recipients' domains
(:mod:`.faults`):

- ``fail-before.test``: 550 at ``RCPT``; the transaction can then never store anything (a later
  ``DATA`` gets 554), a definite no-effect.
- ``no-record.test``: the end of ``DATA`` is answered 451 and nothing is stored: the sender
  cannot tell whether the message went out, and the sink's lookup finds no trace of it.
- ``lose-response.test``: the message is stored, then the connection is dropped without answering
  the end of ``DATA``.
- ``lose-response-once.test``: as above on the first delivery of a message id; later deliveries
  of that id are answered 250 without storing again (at most one row per id).
- ``hang.test``: the message is stored, then the reply waits ``hang_seconds``.

Every store is committed before the reply (or the dropped connection) that follows it.

The sink's own lookup is HTTP, beside the SMTP port (:data:`LOOKUP_ROUTE`, served by the
runner): ``GET /messages/<message id>`` answers 200 with the first stored delivery of that id, or
404. Reconciliation asks it over the network, so no other process needs the sink's folder.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
import weakref
from dataclasses import dataclass
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from email.utils import getaddresses
from http import HTTPStatus
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from .faults import Fault, fault_for_addresses
from .http_server import Exchange, Route
from .storage import StrPath, initialize, read_rows, write_transaction

__all__ = [
    "EMAIL_DB_NAME",
    "LOOKUP_ROUTE",
    "SinkHandler",
    "list_messages",
    "lookup_message",
    "start_smtp_sink",
]

EMAIL_DB_NAME = "email.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    recipients_to TEXT NOT NULL,  -- JSON list of addresses
    recipients_cc TEXT NOT NULL,  -- JSON list of addresses
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    received_at TEXT NOT NULL     -- ISO 8601, UTC
);
CREATE INDEX IF NOT EXISTS messages_by_message_id ON messages (message_id);
"""

_INSERT = """
INSERT INTO messages
    (message_id, sender, recipients_to, recipients_cc, subject, body, received_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
_SELECT_FIRST_BY_MESSAGE_ID = """
SELECT message_id, sender, recipients_to, recipients_cc, subject, body, received_at
FROM messages WHERE message_id = ? ORDER BY id LIMIT 1
"""
_SELECT_ALL = """
SELECT message_id, sender, recipients_to, recipients_cc, subject, body, received_at
FROM messages ORDER BY id
"""

# Upper bound on waiting for aiosmtpd to cancel a handler whose connection was just aborted.
_DROP_GRACE_SECONDS = 30.0


def email_db_path(directory: StrPath) -> Path:
    """Return the path of the sink's SQLite file inside ``directory``."""
    return Path(directory) / EMAIL_DB_NAME


def normalize_message_id(raw: str) -> str:
    """Strip surrounding whitespace and one pair of angle brackets from a Message-ID."""
    value = raw.strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1].strip()
    return value


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """The fields of a received message that the sink records."""

    message_id: str
    sender: str
    to: list[str]
    cc: list[str]
    subject: str
    body: str


def _addresses(message: EmailMessage, header: str) -> list[str]:
    """Return the bare addresses (no display names) listed in every ``header`` field."""
    values = [str(value) for value in message.get_all(header, [])]
    return [address for _, address in getaddresses(values) if address]


def _body_text(message: EmailMessage) -> str:
    """Return the text body (plain preferred), with line endings normalized to ``\\n``."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError):
        # Unknown charset or undecodable payload: keep what can be read.
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if isinstance(content, bytes):
        content = content.decode("utf-8", "replace")
    return str(content).replace("\r\n", "\n")


def parse_message(raw: bytes, *, envelope_from: str) -> ParsedMessage:
    """Extract the recorded fields from raw message bytes as received after ``DATA``."""
    message = BytesParser(EmailMessage, policy=default_policy).parsebytes(raw)
    senders = _addresses(message, "From")
    return ParsedMessage(
        message_id=normalize_message_id(str(message.get("Message-ID", ""))),
        sender=senders[0] if senders else envelope_from,
        to=_addresses(message, "To"),
        cc=_addresses(message, "Cc"),
        subject=str(message.get("Subject", "")),
        body=_body_text(message),
    )


def _insert(conn: sqlite3.Connection, message: ParsedMessage) -> None:
    """Insert one row for ``message`` inside the caller's transaction."""
    conn.execute(
        _INSERT,
        (
            message.message_id,
            message.sender,
            json.dumps(message.to),
            json.dumps(message.cc),
            message.subject,
            message.body,
            dt.datetime.now(dt.UTC).isoformat(),
        ),
    )


def store_message(path: Path, message: ParsedMessage) -> None:
    """Record one delivery of ``message``; committed on return."""
    with write_transaction(path) as conn:
        _insert(conn, message)


def store_message_once(path: Path, message: ParsedMessage) -> bool:
    """Record ``message`` unless its id is already stored; return whether a row was added.

    The check and the insert share one ``BEGIN IMMEDIATE`` transaction, so two concurrent first
    deliveries of one id cannot both insert.
    """
    with write_transaction(path) as conn:
        seen = conn.execute(
            "SELECT 1 FROM messages WHERE message_id = ? LIMIT 1", (message.message_id,)
        ).fetchone()
        if seen is not None:
            return False
        _insert(conn, message)
        return True


async def _drop_connection(server: SMTP) -> str:
    """Close the client connection without a reply and wait to be cancelled.

    Aborting the transport makes aiosmtpd's ``connection_lost`` cancel the session task on the
    next loop iteration, so the status returned here is only a fallback and is never delivered
    (a write to a closed transport is discarded).
    """
    transport = server.transport
    if isinstance(transport, asyncio.WriteTransport):
        transport.abort()
    elif transport is not None:
        transport.close()
    await asyncio.sleep(_DROP_GRACE_SECONDS)
    return "421 4.4.2 Connection dropped"


class SinkHandler:
    """aiosmtpd handler: applies the fault triggers and records accepted messages."""

    def __init__(self, db_path: Path, *, hang_seconds: float) -> None:
        """Record into ``db_path``; a ``hang.test`` delivery waits ``hang_seconds``."""
        self.db_path = db_path
        self.hang_seconds = hang_seconds
        # Transactions that had a recipient refused; they must never store a message.
        self._refused: weakref.WeakSet[Envelope] = weakref.WeakSet()

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        """Refuse ``fail-before.test`` recipients with 550; accept the rest."""
        if fault_for_addresses([address]) is Fault.FAIL_BEFORE:
            self._refused.add(envelope)
            return "550 5.1.1 Recipient refused (fail-before.test)"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """Store the message (committed), then reply, drop or hang as the recipients select."""
        if envelope in self._refused:
            return "554 5.5.1 Transaction failed: a recipient was refused"
        message = parse_message(
            envelope.original_content or b"", envelope_from=envelope.mail_from or ""
        )
        fault = fault_for_addresses([*envelope.rcpt_tos, *message.to, *message.cc])
        if fault is Fault.FAIL_BEFORE:
            # Only reachable when a header names the trigger but the envelope does not.
            return "554 5.5.1 Transaction failed (fail-before.test)"
        if fault is Fault.NO_RECORD:
            return "451 4.3.0 Local error in processing (no-record.test)"
        if fault is Fault.LOSE_RESPONSE_ONCE:
            if store_message_once(self.db_path, message):
                return await _drop_connection(server)
            return "250 OK (already delivered)"
        store_message(self.db_path, message)
        if fault is Fault.LOSE_RESPONSE:
            return await _drop_connection(server)
        if fault is Fault.HANG:
            await asyncio.sleep(self.hang_seconds)
        return "250 OK"


def start_smtp_sink(
    directory: StrPath, *, port: int, hang_seconds: float, host: str = "127.0.0.1"
) -> Controller:
    """Create the sink's database and start the SMTP server in a background thread.

    Returns the running :class:`~aiosmtpd.controller.Controller`; call ``stop()`` on it.
    """
    db_path = email_db_path(directory)
    initialize(db_path, _SCHEMA)
    controller = Controller(
        SinkHandler(db_path, hang_seconds=hang_seconds),
        hostname=host,
        port=port,
        ready_timeout=10.0,
        # A fixed banner name avoids a reverse-DNS lookup (socket.getfqdn) at start-up.
        server_hostname="sink.destinations.test",
        enable_SMTPUTF8=True,
    )
    controller.start()
    return controller


def _row_to_dict(row: sqlite3.Row) -> dict[str, Any]:
    """Convert a stored row to the public message shape."""
    return {
        "message_id": row["message_id"],
        "from": row["sender"],
        "to": json.loads(row["recipients_to"]),
        "cc": json.loads(row["recipients_cc"]),
        "subject": row["subject"],
        "body": row["body"],
        "received_at": row["received_at"],
    }


def lookup_message(directory: StrPath, message_id: str) -> dict[str, Any] | None:
    """Return the first stored delivery of ``message_id`` (brackets optional), or ``None``.

    Keys: ``message_id``, ``from``, ``to``, ``cc``, ``subject``, ``body``, ``received_at``.
    Reads the SQLite file directly, so it works whether or not the sink is running.
    """
    rows = read_rows(
        email_db_path(directory),
        _SELECT_FIRST_BY_MESSAGE_ID,
        (normalize_message_id(message_id),),
    )
    return _row_to_dict(rows[0]) if rows else None


def list_messages(directory: StrPath) -> list[dict[str, Any]]:
    """Return every stored delivery in arrival order (same keys as :func:`lookup_message`)."""
    rows = read_rows(email_db_path(directory), _SELECT_ALL)
    return [_row_to_dict(row) for row in rows]


def _prepare_lookup(directory: Path, base_url: str) -> None:
    """Create the sink's database, so that a lookup before any delivery answers 404."""
    initialize(email_db_path(directory), _SCHEMA)


def _get_message(exchange: Exchange, message_id: str) -> None:
    """``GET /messages/<message id>``: 200 with the first stored delivery, or 404."""
    found = lookup_message(exchange.directory, message_id)
    if found is None:
        exchange.send_json(HTTPStatus.NOT_FOUND, {"error": f"no message {message_id}"})
    else:
        exchange.send_json(HTTPStatus.OK, found)


# The sink's lookup over HTTP, on a port of its own beside the SMTP port.
LOOKUP_ROUTE = Route(prefix="/messages", prepare=_prepare_lookup, get=_get_message)
