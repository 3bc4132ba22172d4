"""A destination that records one row per key and serves it over HTTP (receiver_dedup).

The bank and the publisher are both a :class:`Ledger`: ``POST <prefix>`` with a JSON body the
ledger's ``parse`` accepts (and, with keys, whose permit token verifies: :mod:`.permits`, else
403) records it once per ``key`` (a UNIQUE constraint is the backstop) and answers 201 with
the record; a repeated key answers 200 with the record already there and records nothing,
whatever else the body says; a body ``parse`` refuses answers 400 and records nothing.
``GET <prefix>/<key>`` answers 200 with the record or 404. The data chooses a fault
(:mod:`.faults`, :meth:`.http_server.Exchange.answer_keyed_write`). Every record is committed
before the response (or the dropped connection) that follows it; the readers work whether or
not the server is running.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from .faults import Fault
from .http_server import Exchange, Route
from .permits import TOKENS_SCHEMA, PermitRule, permit_refusal
from .storage import StrPath, initialize, insert_once, read_rows

__all__ = ["BadRequestError", "Ledger", "parse_object"]


class BadRequestError(ValueError):
    """The request body is not a valid record; answered with 400."""


def parse_object(raw: bytes, *, non_empty: tuple[str, ...]) -> dict[str, Any]:
    """Decode a JSON object whose ``non_empty`` fields are non-empty strings, or refuse it."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequestError(f"body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise BadRequestError("body must be a JSON object")
    missing = [name for name in non_empty if not isinstance(data.get(name), str) or not data[name]]
    if missing:
        raise BadRequestError(f"missing or non-string fields: {', '.join(missing)}")
    return data


@dataclass(frozen=True)
class Ledger:
    """One keyed table in ``db_name``: its ``schema`` creates ``table`` with an ``id`` primary
    key, a UNIQUE ``key``, the other ``fields`` and a ``stamp`` column (ISO 8601, UTC)."""

    noun: str
    db_name: str
    schema: str
    table: str
    fields: tuple[str, ...]
    """The record's fields in column order, ``key`` first; ``parse`` returns exactly these."""
    stamp: str
    parse: Callable[[bytes], Mapping[str, Any]]
    """Validate a ``POST`` body; raise :class:`BadRequestError` for anything else."""
    fault: Callable[[Mapping[str, Any]], Fault | None]
    """The fault a parsed record selects, or ``None``."""
    permit: PermitRule | None = None
    """What a write must carry when the server has keys (:mod:`.permits`); None: nothing."""

    def path(self, directory: StrPath) -> Path:
        """Return the path of the ledger's SQLite file inside ``directory``."""
        return Path(directory) / self.db_name

    @property
    def _columns(self) -> str:
        return ", ".join((*self.fields, self.stamp))

    def _select(self, where: str) -> str:
        # Identifiers come from the ledger's constant definition; values are bound parameters.
        return f"SELECT {self._columns} FROM {self.table} {where}"

    def record(self, directory: StrPath, fields: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Record ``fields`` unless their key exists; return the stored record and ``created``.

        Concurrent requests with one key serialize in :func:`.storage.insert_once`; the UNIQUE
        constraint on ``key`` is the backstop. Committed on return.
        """
        marks = ", ".join("?" * (len(self.fields) + 1))
        row, created = insert_once(
            self.path(directory),
            select_by_key=self._select("WHERE key = ?"),
            insert=f"INSERT INTO {self.table} ({self._columns}) VALUES ({marks})",
            key=fields["key"],
            values=(*(fields[name] for name in self.fields), dt.datetime.now(dt.UTC).isoformat()),
        )
        return dict(row), created

    def lookup(self, directory: StrPath, key: str) -> dict[str, Any] | None:
        """Return the record under ``key`` (``fields`` and ``stamp``), or ``None``."""
        rows = read_rows(self.path(directory), self._select("WHERE key = ?"), (key,))
        return dict(rows[0]) if rows else None

    def list(self, directory: StrPath) -> list[dict[str, Any]]:
        """Return every record in recording order (keys as :meth:`lookup`)."""
        return [dict(row) for row in read_rows(self.path(directory), self._select("ORDER BY id"))]

    def route(self, prefix: str) -> Route:
        """The ledger's part of the shared HTTP server, under ``prefix``."""

        def prepare(directory: Path, base_url: str) -> None:
            initialize(self.path(directory), self.schema + TOKENS_SCHEMA)

        def get(exchange: Exchange, key: str) -> None:
            found = self.lookup(exchange.directory, key)
            if found is None:
                exchange.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such {self.noun}"})
            else:
                exchange.send_json(HTTPStatus.OK, found)

        def post(exchange: Exchange, raw: bytes) -> None:
            try:
                fields = self.parse(raw)
            except BadRequestError as error:
                exchange.send_json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            refusal = None if self.permit is None else permit_refusal(
                keys_file=exchange.server.keys_file, db=self.path(exchange.directory),
                rule=self.permit, authorization=exchange.headers.get("Authorization"),
                raw=raw, fields=fields)
            if refusal is not None:  # before any effect: nothing recorded
                exchange.send_json(HTTPStatus.FORBIDDEN, {"error": f"permit refused: {refusal}"})
                return
            exchange.answer_keyed_write(
                self.fault(fields),
                lambda: self.record(exchange.directory, fields),
                noun=self.noun,
            )

        return Route(prefix=prefix, prepare=prepare, get=get, post=post)
