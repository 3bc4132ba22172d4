"""A publisher over HTTP/JSON that records publications in ``publisher.sqlite3``
(docs/design.md#evidence).

A :class:`.ledger.Ledger` served under ``/publications`` by the shared HTTP server
(:mod:`.http_server`); it deduplicates on the operation id as the bank does (receiver_dedup).

``POST /publications`` with ``{"key", "report_id", "revision", "digest", "title", "body"}``
records a publication once per ``key`` (a UNIQUE constraint is the backstop): a new key answers
201, a repeated key answers 200 with the publication already recorded and records nothing, even
if its other fields differ. ``key``, ``report_id``, ``digest`` and ``title`` are non-empty
strings, ``revision`` a positive integer, ``body`` a string; any other body answers 400.
``GET /publications/<key>`` answers 200 with the publication or 404.

With a keys file, a write must carry a permit token that verifies (:mod:`.permits`), else 403
and nothing recorded.

Faults are chosen by the title (:func:`.faults.fault_for_title`), as the bank's by the memo:
``fail-before.test`` answers 422 and records nothing; ``lose-response.test`` records, then closes
the socket without a response, every time; ``lose-response-once.test`` does that on the request
that records the key only; ``hang.test`` records, then waits ``hang_seconds`` before answering.
Every record is committed before the response (or the dropped connection) that follows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .faults import Fault, fault_for_title
from .ledger import BadRequestError, Ledger, parse_object
from .permits import PermitRule
from .storage import StrPath

__all__ = [
    "LEDGER",
    "PUBLISHER_DB_NAME",
    "ROUTE",
    "list_publications",
    "lookup_publication",
    "parse_publication",
]

PUBLISHER_DB_NAME = "publisher.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS publications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    report_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    digest TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    published_at TEXT NOT NULL    -- ISO 8601, UTC
);
"""
_FIELDS = ("key", "report_id", "revision", "digest", "title", "body")
_NON_EMPTY = ("key", "report_id", "digest", "title")


def parse_publication(raw: bytes) -> dict[str, Any]:
    """Validate a ``POST /publications`` body and return its six fields."""
    data = parse_object(raw, non_empty=_NON_EMPTY)
    revision = data.get("revision")
    # bool is an int in Python; true is no revision.
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise BadRequestError("revision must be a positive integer")
    if not isinstance(data.get("body"), str):
        raise BadRequestError("body must be a string")
    return {name: data[name] for name in _FIELDS}


def _fault(publication: Mapping[str, Any]) -> Fault | None:
    return fault_for_title(publication["title"])


def _approved_publication(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The publication a `report.publish` snapshot approves: its report revision's fields."""
    report = snapshot["arguments"]["report"]
    return {"report_id": report["id"], "revision": report["revision"],
            "digest": report["digest"], "title": report["payload"]["title"],
            "body": report["payload"]["body"]}


LEDGER = Ledger(
    noun="publication",
    db_name=PUBLISHER_DB_NAME,
    schema=_SCHEMA,
    table="publications",
    fields=_FIELDS,
    stamp="published_at",
    parse=parse_publication,
    fault=_fault,
    permit=PermitRule("publisher", "report.publish", _approved_publication),
)

ROUTE = LEDGER.route("/publications")
"""The publisher's part of the shared HTTP server (:mod:`.http_server`)."""


def lookup_publication(directory: StrPath, key: str) -> dict[str, Any] | None:
    """Return the publication recorded under ``key``, or ``None``, reading the file directly.

    Keys: ``key``, ``report_id``, ``revision``, ``digest``, ``title``, ``body``,
    ``published_at``. Works whether or not the publisher is running.
    """
    return LEDGER.lookup(directory, key)


def list_publications(directory: StrPath) -> list[dict[str, Any]]:
    """Return every recorded publication in recording order (keys as lookup_publication)."""
    return LEDGER.list(directory)
