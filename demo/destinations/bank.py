"""A fake bank over HTTP/JSON that records transfers in ``bank.sqlite3`` (receiver_dedup).

Served under ``/transfers`` by the shared HTTP server (:mod:`.http_server`).

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

import datetime as dt
import json
import sqlite3
from decimal import Decimal, InvalidOperation
from http import HTTPStatus
from pathlib import Path
from typing import Any

from .faults import fault_for_memo
from .http_server import Exchange, Route
from .storage import StrPath, initialize, insert_once, read_rows

__all__ = ["BANK_DB_NAME", "ROUTE", "list_transfers", "lookup_transfer"]

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

    Concurrent requests with one key serialize in :func:`.storage.insert_once`; the UNIQUE
    constraint on ``key`` is the backstop. Committed on return.
    """
    row, created = insert_once(
        path,
        select_by_key=_SELECT_BY_KEY,
        insert=_INSERT,
        key=transfer["key"],
        values=(
            transfer["key"],
            transfer["from_account"],
            transfer["to_account"],
            transfer["amount"],
            transfer["currency"],
            transfer["memo"],
            dt.datetime.now(dt.UTC).isoformat(),
        ),
    )
    return _row_to_dict(row), created


def _get(exchange: Exchange, key: str) -> None:
    """``GET /transfers/<key>``: 200 with the transfer, else 404."""
    transfer = lookup_transfer(exchange.directory, key)
    if transfer is None:
        exchange.send_json(HTTPStatus.NOT_FOUND, {"error": "no such transfer"})
    else:
        exchange.send_json(HTTPStatus.OK, transfer)


def _post(exchange: Exchange, raw: bytes) -> None:
    """``POST /transfers``: record once per key, then answer, drop or hang per the memo."""
    try:
        transfer = parse_transfer(raw)
    except BadRequestError as error:
        exchange.send_json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        return
    exchange.answer_keyed_write(
        fault_for_memo(transfer["memo"]),
        lambda: record_transfer(bank_db_path(exchange.directory), transfer),
        noun="transfer",
    )


def _prepare(directory: Path, base_url: str) -> None:
    """Create the bank's database before the server serves."""
    initialize(bank_db_path(directory), _SCHEMA)


ROUTE = Route(prefix="/transfers", prepare=_prepare, get=_get, post=_post)
"""The bank's part of the shared HTTP server (:mod:`.http_server`)."""


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
