"""A fake bank over HTTP/JSON that records transfers in ``bank.sqlite3`` (receiver_dedup).

``POST /transfers`` with ``{"key", "from_account", "to_account", "amount", "currency", "memo"}``
records a transfer once per ``key`` (a UNIQUE constraint is the backstop): a new key answers 201,
a repeated key answers 200 with the transfer already recorded and records nothing. ``memo`` may be
omitted (it defaults to ``""``); a body that is not a JSON object with the other fields as
non-empty strings answers 400. ``GET /transfers/<key>`` answers 200 with the transfer or 404.

Faults are chosen by the memo of the request (:mod:`.faults`):

- ``fail-before.test``: 422 ``{"error": ...}`` and nothing recorded.
- ``lose-response.test``: record (or find) the transfer, then close the socket without any
  HTTP response, on every attempt.
- ``lose-response-once.test``: the same on the request that records the key; a repeat with the
  same key gets 200 with the existing transfer.
- ``hang.test``: record (or find) the transfer, then wait ``hang_seconds`` before answering.

Every record is committed before the response (or the dropped connection) that follows it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
import sqlite3
import sys
import threading
from decimal import Decimal, InvalidOperation
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .faults import Fault, fault_for_memo
from .storage import StrPath, initialize, read_rows, write_transaction

__all__ = ["BANK_DB_NAME", "BankServer", "list_transfers", "lookup_transfer"]

BANK_DB_NAME = "bank.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS transfers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    from_account TEXT NOT NULL,
    to_account TEXT NOT NULL,
    amount TEXT NOT NULL,
    currency TEXT NOT NULL,
    memo TEXT NOT NULL,
    created_at TEXT NOT NULL      -- ISO 8601, UTC
);
"""

_SELECT_BY_KEY = """
SELECT key, from_account, to_account, amount, currency, memo, created_at
FROM transfers WHERE key = ?
"""
_SELECT_ALL = """
SELECT key, from_account, to_account, amount, currency, memo, created_at
FROM transfers ORDER BY id
"""
_INSERT = """
INSERT INTO transfers (key, from_account, to_account, amount, currency, memo, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
_REQUIRED = ("key", "from_account", "to_account", "amount", "currency")
_MAX_BODY_BYTES = 64 * 1024
_PATH_PREFIX = "/transfers"


def bank_db_path(directory: StrPath) -> Path:
    """Return the path of the bank's SQLite file inside ``directory``."""
    return Path(directory) / BANK_DB_NAME


class BadRequestError(ValueError):
    """The request body is not a valid transfer; answered with 400."""


def parse_transfer(raw: bytes) -> dict[str, str]:
    """Validate a ``POST /transfers`` body and return its fields (``memo`` defaults to ``""``)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequestError(f"body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise BadRequestError("body must be a JSON object")
    missing = [name for name in _REQUIRED if not isinstance(data.get(name), str) or not data[name]]
    if missing:
        raise BadRequestError(f"missing or non-string fields: {', '.join(missing)}")
    memo = data.get("memo", "")
    if not isinstance(memo, str):
        raise BadRequestError("memo must be a string")
    try:
        amount = Decimal(data["amount"])
    except InvalidOperation:
        raise BadRequestError("amount must be a decimal string") from None
    if not amount.is_finite() or amount <= 0:
        raise BadRequestError("amount must be a positive finite decimal")
    return {name: data[name] for name in _REQUIRED} | {"memo": memo}


def _row_to_dict(row: sqlite3.Row) -> dict[str, Any]:
    """Convert a stored row to the public transfer shape."""
    return dict(row)


def record_transfer(path: Path, transfer: dict[str, str]) -> tuple[dict[str, Any], bool]:
    """Record ``transfer`` unless its key exists; return the stored transfer and ``created``.

    The existence check and the insert share one ``BEGIN IMMEDIATE`` transaction, so concurrent
    requests with one key serialize here; the UNIQUE constraint on ``key`` is the backstop.
    Committed on return.
    """
    with write_transaction(path) as conn:
        existing = conn.execute(_SELECT_BY_KEY, (transfer["key"],)).fetchone()
        if existing is not None:
            return _row_to_dict(existing), False
        conn.execute(
            _INSERT,
            (
                transfer["key"],
                transfer["from_account"],
                transfer["to_account"],
                transfer["amount"],
                transfer["currency"],
                transfer["memo"],
                dt.datetime.now(dt.UTC).isoformat(),
            ),
        )
        return _row_to_dict(conn.execute(_SELECT_BY_KEY, (transfer["key"],)).fetchone()), True


class _BankRequestHandler(BaseHTTPRequestHandler):
    """Serves ``/transfers``; one thread per connection, one request per connection."""

    server: BankServer
    # Bounds how long a silent client can hold a thread; a hang.test reply is a wait, not a read.
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet; the records in SQLite are the log."""

    def _send_json(self, status: HTTPStatus, payload: object) -> None:
        """Send ``payload`` as a complete JSON response and close the connection."""
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _drop_connection(self) -> None:
        """Close the socket without sending any HTTP response."""
        self.close_connection = True
        with contextlib.suppress(OSError):  # Already gone.
            self.connection.shutdown(socket.SHUT_RDWR)

    def _transfer_key(self) -> str | None:
        """Return the ``<key>`` of a ``/transfers/<key>`` path, or ``None`` for other paths."""
        path = urlsplit(self.path).path
        prefix = f"{_PATH_PREFIX}/"
        if not path.startswith(prefix) or len(path) == len(prefix):
            return None
        raw_key = path[len(prefix) :]
        # Split on the raw path: a "/" inside a key arrives percent-encoded and is kept.
        return None if "/" in raw_key else unquote(raw_key)

    def do_GET(self) -> None:
        """``GET /transfers/<key>``: 200 with the transfer, else 404."""
        key = self._transfer_key()
        transfer = None if key is None else lookup_transfer(self.server.directory, key)
        if transfer is None:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such transfer"})
        else:
            self._send_json(HTTPStatus.OK, transfer)

    def do_POST(self) -> None:
        """``POST /transfers``: record once per key, then answer, drop or hang per the memo."""
        if urlsplit(self.path).path.rstrip("/") != _PATH_PREFIX:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": "unknown path"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0:
            self._send_json(HTTPStatus.LENGTH_REQUIRED, {"error": "Content-Length required"})
            return
        if length > _MAX_BODY_BYTES:
            self._send_json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return
        try:
            transfer = parse_transfer(self.rfile.read(length))
        except BadRequestError as error:
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
            return

        fault = fault_for_memo(transfer["memo"])
        if fault is Fault.FAIL_BEFORE:
            self._send_json(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                {"error": "transfer refused before any effect (fail-before.test)"},
            )
            return
        stored, created = record_transfer(self.server.db_path, transfer)
        if fault is Fault.LOSE_RESPONSE or (fault is Fault.LOSE_RESPONSE_ONCE and created):
            self._drop_connection()
            return
        if fault is Fault.HANG:
            # Waits on the server's stop event so that shutdown is not held up.
            self.server.stopping.wait(self.server.hang_seconds)
        self._send_json(HTTPStatus.CREATED if created else HTTPStatus.OK, stored)


class BankServer(ThreadingHTTPServer):
    """The fake bank: a threading HTTP server bound to ``(host, port)``."""

    daemon_threads = True

    def __init__(
        self, directory: StrPath, *, port: int, hang_seconds: float, host: str = "127.0.0.1"
    ) -> None:
        """Create the bank's database and bind; call ``serve_forever()`` to serve."""
        self.directory = Path(directory)
        self.db_path = bank_db_path(directory)
        self.hang_seconds = hang_seconds
        self.stopping = threading.Event()
        initialize(self.db_path, _SCHEMA)
        super().__init__((host, port), _BankRequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that went away (e.g. while a hang.test reply waited) or stalled."""
        # socketserver calls this inside the ``except`` block, so the error is current.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def stop(self) -> None:
        """Stop serving, release hanging requests and close the listening socket."""
        self.stopping.set()
        self.shutdown()
        self.server_close()


def lookup_transfer(directory: StrPath, key: str) -> dict[str, Any] | None:
    """Return the transfer recorded under ``key``, or ``None``, reading the file directly.

    Keys: ``key``, ``from_account``, ``to_account``, ``amount``, ``currency``, ``memo``,
    ``created_at``. Works whether or not the bank is running.
    """
    rows = read_rows(bank_db_path(directory), _SELECT_BY_KEY, (key,))
    return _row_to_dict(rows[0]) if rows else None


def list_transfers(directory: StrPath) -> list[dict[str, Any]]:
    """Return every recorded transfer in recording order (same keys as lookup_transfer)."""
    rows = read_rows(bank_db_path(directory), _SELECT_ALL)
    return [_row_to_dict(row) for row in rows]
