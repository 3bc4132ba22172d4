"""A fake bank over HTTP/JSON that records transfers in ``bank.sqlite3`` (receiver_dedup).

A :class:`.ledger.Ledger` served under ``/transfers`` by the shared HTTP server
(:mod:`.http_server`).

``POST /transfers`` with ``{"key", "from_account", "to_account", "amount", "currency", "memo"}``
records a transfer once per ``key`` (a UNIQUE constraint is the backstop): a new key answers 201,
a repeated key answers 200 with the transfer already recorded and records nothing. ``memo`` may be
omitted (it defaults to ``""``); a body that is not a JSON object with the other fields as
non-empty strings answers 400. ``GET /transfers/<key>`` answers 200 with the transfer or 404.

With a keys file, a write must carry a permit token that verifies (:mod:`.permits`), else 403
and nothing recorded.

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

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from .faults import Fault, fault_for_memo
from .ledger import BadRequestError, Ledger, parse_object
from .permits import PermitRule
from .storage import StrPath

__all__ = ["BANK_DB_NAME", "LEDGER", "ROUTE", "list_transfers", "lookup_transfer"]

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
_REQUIRED = ("key", "from_account", "to_account", "amount", "currency")


def parse_transfer(raw: bytes) -> dict[str, str]:
    """Validate a ``POST /transfers`` body and return its fields (``memo`` defaults to ``""``)."""
    data = parse_object(raw, non_empty=_REQUIRED)
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


def _fault(transfer: Mapping[str, Any]) -> Fault | None:
    return fault_for_memo(transfer["memo"])


def _approved_transfer(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The transfer a `payments.transfer` snapshot approves: its arguments, field by field."""
    arguments = snapshot["arguments"]
    return {name: arguments[name] for name in ("from_account", "to_account", "amount",
                                               "currency", "memo")}


LEDGER = Ledger(
    noun="transfer",
    db_name=BANK_DB_NAME,
    schema=_SCHEMA,
    table="transfers",
    fields=(*_REQUIRED, "memo"),
    stamp="created_at",
    parse=parse_transfer,
    fault=_fault,
    permit=PermitRule("bank", "payments.transfer", _approved_transfer),
)

ROUTE = LEDGER.route("/transfers")
"""The bank's part of the shared HTTP server (:mod:`.http_server`)."""


def lookup_transfer(directory: StrPath, key: str) -> dict[str, Any] | None:
    """Return the transfer recorded under ``key``, or ``None``, reading the file directly.

    Keys: ``key``, ``from_account``, ``to_account``, ``amount``, ``currency``, ``memo``,
    ``created_at``. Works whether or not the bank is running.
    """
    return LEDGER.lookup(directory, key)


def list_transfers(directory: StrPath) -> list[dict[str, Any]]:
    """Return every recorded transfer in recording order (same keys as lookup_transfer)."""
    return LEDGER.list(directory)
