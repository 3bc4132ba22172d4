"""The demo's helpdesk: the small service the demo's HTTP action (`demo/actions/helpdesk.yaml`,
docs/actions.md) opens tickets in, recorded in ``helpdesk.sqlite3`` (receiver_dedup).

A :class:`.ledger.Ledger` served under ``/tickets`` by the shared HTTP server
(:mod:`.http_server`), on the bank's port, as a team's own service would take an HTTP action:

- ``POST /tickets`` with the approved arguments as its body (``{"queue", "subject"}``, non-empty
  strings) and the operation id in ``Idempotency-Key`` records a ticket once per key: a new key
  answers 201 with the ticket, a repeated key 200 with the ticket already recorded. A body that
  is not such an object, or no key, answers 400 and records nothing.
- With a keys file, the request's ``Authorization: Bearer <permit token>`` must verify for the
  audience ``helpdesk``, be for the operation of its key, and be used once
  (:func:`.permits.action_permit_refusal`), else 403 and nothing recorded.
- ``GET /tickets/<key>`` answers 200 with the ticket or 404: the action's ``lookup``.
"""

from __future__ import annotations

from dataclasses import replace
from http import HTTPStatus
from typing import Any

from .http_server import Exchange
from .ledger import BadRequestError, Ledger, parse_object
from .permits import action_permit_refusal
from .storage import StrPath

__all__ = ["AUDIENCE", "HELPDESK_DB_NAME", "LEDGER", "ROUTE", "list_tickets", "lookup_ticket"]

HELPDESK_DB_NAME = "helpdesk.sqlite3"
#: The action's `destination.name`: the permit token's audience.
AUDIENCE = "helpdesk"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,     -- the operation id, from Idempotency-Key
    queue TEXT NOT NULL,
    subject TEXT NOT NULL,
    created_at TEXT NOT NULL      -- ISO 8601, UTC
);
"""
_FIELDS = ("queue", "subject")


def parse_ticket(raw: bytes) -> dict[str, Any]:
    """The ticket's fields of a ``POST /tickets`` body (its key is a header, not a field)."""
    data = parse_object(raw, non_empty=_FIELDS)
    return {name: data[name] for name in _FIELDS}


LEDGER = Ledger(
    noun="ticket",
    db_name=HELPDESK_DB_NAME,
    schema=_SCHEMA,
    table="tickets",
    fields=("key", *_FIELDS),
    stamp="created_at",
    parse=parse_ticket,
    fault=lambda ticket: None,
)


def _post(exchange: Exchange, raw: bytes) -> None:
    key = exchange.headers.get("Idempotency-Key", "").strip()
    try:
        if not key:
            raise BadRequestError("no Idempotency-Key")
        fields = {"key": key, **parse_ticket(raw)}
    except BadRequestError as error:
        exchange.send_json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        return
    refusal = action_permit_refusal(
        keys_file=exchange.server.keys_file, db=LEDGER.path(exchange.directory),
        audience=AUDIENCE, authorization=exchange.headers.get("Authorization"), key=key)
    if refusal is not None:  # before any effect: nothing recorded
        exchange.send_json(HTTPStatus.FORBIDDEN, {"error": f"permit refused: {refusal}"})
        return
    exchange.answer_keyed_write(None, lambda: LEDGER.record(exchange.directory, fields),
                                noun="ticket")


ROUTE = replace(LEDGER.route("/tickets"), post=_post)
"""The helpdesk's part of the shared HTTP server: the ledger's lookup, and a write keyed by its
`Idempotency-Key` header."""


def lookup_ticket(directory: StrPath, key: str) -> dict[str, Any] | None:
    """The ticket recorded under ``key`` (``key``, ``queue``, ``subject``, ``created_at``), or
    ``None``; works whether or not the helpdesk is running."""
    return LEDGER.lookup(directory, key)


def list_tickets(directory: StrPath) -> list[dict[str, Any]]:
    """Every recorded ticket in recording order (keys as ``lookup_ticket``)."""
    return LEDGER.list(directory)
