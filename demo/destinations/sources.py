"""A source server: fixed plain-text documents over HTTP, kept in ``sources.sqlite3``
(docs/design.md#evidence).

Served under ``/sources`` by the shared HTTP server (:mod:`.http_server`). ``GET /sources/<name>``
answers 200 with the document's bytes (``text/plain; charset=utf-8``), or 404 ``{"error"}`` for
a name it does not serve. A read has no effect; its one fault is ``GET /sources/hang.test``,
which waits ``hang_seconds`` before answering 404 (a source that never answers in time: the
fetch in flight is what a cancellation or a deadline abandons).

The documents are :data:`SOURCE_DOCUMENTS`, fixed bytes, so their digests are stable. When the
server starts it copies them into ``sources.sqlite3`` with the URL each is served at; a source
already there keeps its bytes. The server serves whatever bytes the file holds, read on every
request, so a test can change a source after it was fetched with :func:`replace_source` (e.g. to
see a validator fail a citation whose source no longer matches its receipt).
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from protocols.canonical import digest_bytes

from .faults import Fault
from .http_server import Exchange, Route
from .storage import StrPath, initialize, read_rows, write_transaction

__all__ = [
    "ROUTE",
    "SOURCES_DB_NAME",
    "SOURCE_DOCUMENTS",
    "list_sources",
    "read_source",
    "replace_source",
]

SOURCES_DB_NAME = "sources.sqlite3"

SOURCE_DOCUMENTS: Mapping[str, bytes] = MappingProxyType(
    {
        "tides": (
            b"Tides\n"
            b"\n"
            b"Tides are the rise and fall of the sea caused by the pull of the Moon and the Sun.\n"
            b"Most coasts have two high tides and two low tides in every lunar day of about "
            b"24 hours and 50 minutes.\n"
            b"Spring tides, which have the largest range, come when the Sun, the Moon and the "
            b"Earth are in line.\n"
        ),
        "bees": (
            b"Honey bees\n"
            b"\n"
            b"A honey bee colony holds a single queen and tens of thousands of workers.\n"
            b"A forager tells her nestmates where the flowers are with a waggle dance on the "
            b"comb.\n"
            b"A worker makes about a twelfth of a teaspoon of honey in her whole life.\n"
        ),
        "lighthouses": (
            b"Lighthouses\n"
            b"\n"
            b"The Pharos of Alexandria was one of the Seven Wonders of the Ancient World.\n"
            b"A Fresnel lens bends the light of a small lamp into a beam seen twenty nautical "
            b"miles away.\n"
            b"Each lighthouse flashes a pattern of its own, so that sailors can tell one from "
            b"another at night.\n"
        ),
    }
)
"""The documents the source server serves, by name (``GET /sources/<name>``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    content BLOB NOT NULL
);
"""

# A restart (on another port, say) moves the URL but keeps the bytes a test may have changed.
_SEED = """
INSERT INTO sources (name, url, content) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET url = excluded.url
"""
_REPLACE = "UPDATE sources SET content = ? WHERE name = ?"
_SELECT_BY_NAME = "SELECT content FROM sources WHERE name = ?"
_SELECT_ALL = "SELECT name, url, content FROM sources ORDER BY id"


def sources_db_path(directory: StrPath) -> Path:
    """Return the path of the source server's SQLite file inside ``directory``."""
    return Path(directory) / SOURCES_DB_NAME


def _prepare(directory: Path, base_url: str) -> None:
    """Copy :data:`SOURCE_DOCUMENTS` into the file with their URLs under ``base_url``."""
    path = sources_db_path(directory)
    initialize(path, _SCHEMA)
    with write_transaction(path) as conn:
        for name, content in SOURCE_DOCUMENTS.items():
            conn.execute(_SEED, (name, f"{base_url}/{quote(name, safe='')}", content))


def _get(exchange: Exchange, name: str) -> None:
    """``GET /sources/<name>``: 200 with the stored bytes, else 404 (after ``hang_seconds`` for
    ``hang.test``)."""
    if name == Fault.HANG.value:
        exchange.hang()
    content = read_source(exchange.directory, name)
    if content is None:
        exchange.send_json(HTTPStatus.NOT_FOUND, {"error": "no such source"})
    else:
        exchange.send_bytes(HTTPStatus.OK, content, "text/plain; charset=utf-8")


ROUTE = Route(prefix="/sources", prepare=_prepare, get=_get)
"""The source server's part of the shared HTTP server (:mod:`.http_server`)."""


def read_source(directory: StrPath, name: str) -> bytes | None:
    """Return the bytes served for ``name`` now, or ``None`` when no such source is stored."""
    rows = read_rows(sources_db_path(directory), _SELECT_BY_NAME, (name,))
    return bytes(rows[0]["content"]) if rows else None


def replace_source(directory: StrPath, name: str, content: bytes) -> None:
    """Make the source server serve ``content`` for ``name`` from now on (a test's tool).

    Committed on return, so the next ``GET /sources/<name>`` answers ``content``. Raises
    :class:`LookupError` when ``name`` is not stored in ``directory``: the server stores its
    sources when it starts, so start it first.
    """
    path = sources_db_path(directory)
    updated = 0
    if path.exists():  # Connecting would create an empty file.
        with write_transaction(path) as conn:
            updated = conn.execute(_REPLACE, (content, name)).rowcount
    if updated != 1:
        raise LookupError(f"no source {name!r} in {directory}; is the source server started?")


def list_sources(directory: StrPath) -> list[dict[str, Any]]:
    """Return every stored source as ``{"name", "url", "digest"}``, in the order first stored.

    ``digest`` is ``sha256:<hex>`` of the bytes served now (:func:`protocols.canonical.
    digest_bytes`), the form of a receipt's ``content_digest``.
    """
    rows = read_rows(sources_db_path(directory), _SELECT_ALL)
    return [
        {"name": row["name"], "url": row["url"], "digest": digest_bytes(bytes(row["content"]))}
        for row in rows
    ]
