"""The loopback HTTP server the bank, the publisher and the source server share (one port).

Each destination contributes a :class:`Route` for one path prefix (``/transfers``,
``/publications``, ``/sources``). Its ``get`` answers ``GET <prefix>/<name>`` with the name
percent-decoded (the path is split before decoding, so a ``/`` inside a name arrives encoded and
is kept; a raw ``/`` in it makes the path unknown); its ``post`` answers ``POST <prefix>`` with
the request body, already read and bounded. Any other method or path answers 404, a POST
without a ``Content-Length`` 411 and a body over 4 MiB 413. One thread per connection, one
request per connection.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from .faults import Fault
from .storage import StrPath

__all__ = ["Exchange", "HttpDestinationsServer", "Route"]

# A write carries its fields and, for a permit check, the snapshot beside them: a report of the
# contract's largest body (200,000 characters, up to 6 bytes each as JSON escapes) twice over.
_MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Route:
    """One destination's part of the server.

    ``prepare(directory, base_url)`` runs once the server is bound, before it serves (create the
    destination's SQLite file; ``base_url`` is ``http://host:port<prefix>``).
    """

    prefix: str
    prepare: Callable[[Path, str], None]
    get: Callable[[Exchange, str], None] | None = None
    post: Callable[[Exchange, bytes], None] | None = None


class Exchange(BaseHTTPRequestHandler):
    """One request to a route, with the answers a route gives: JSON, bytes, a drop, a hang."""

    server: HttpDestinationsServer
    # Bounds how long a silent client can hold a thread; a hang.test reply is a wait, not a read.
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet; the records in SQLite are the log."""

    def send_bytes(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        """Send ``body`` as a complete response and close the connection."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def send_json(self, status: HTTPStatus, payload: object) -> None:
        """Send ``payload`` as a complete JSON response and close the connection."""
        self.send_bytes(status, json.dumps(payload).encode("utf-8"), "application/json")

    def drop_connection(self) -> None:
        """Close the socket without sending any HTTP response."""
        self.close_connection = True
        with contextlib.suppress(OSError):  # Already gone.
            self.connection.shutdown(socket.SHUT_RDWR)

    def hang(self) -> None:
        """Wait ``hang_seconds`` before answering, or less if the server stops meanwhile."""
        # Waits on the server's stop event so that shutdown is not held up.
        self.server.stopping.wait(self.server.hang_seconds)

    def answer_keyed_write(
        self,
        fault: Fault | None,
        record: Callable[[], tuple[dict[str, Any], bool]],
        *,
        noun: str,
    ) -> None:
        """Answer a write deduplicated on its key, misbehaving as ``fault`` says
        (docs/design.md#demo).

        ``fail-before.test``: 422 ``{"error"}``, and ``record`` is not called. Otherwise
        ``record()`` returns the stored record and whether this call created it, committed on
        return; then ``lose-response.test`` drops the connection, ``lose-response-once.test``
        drops it when this call created the record, ``hang.test`` waits ``hang_seconds``; the
        answer is 201 with the record when created, 200 with the existing one otherwise.
        """
        if fault is Fault.FAIL_BEFORE:
            self.send_json(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                {"error": f"{noun} refused before any effect ({fault})"},
            )
            return
        stored, created = record()
        if fault is Fault.LOSE_RESPONSE or (fault is Fault.LOSE_RESPONSE_ONCE and created):
            self.drop_connection()
            return
        if fault is Fault.HANG:
            self.hang()
        self.send_json(HTTPStatus.CREATED if created else HTTPStatus.OK, stored)

    @property
    def directory(self) -> Path:
        """The directory the destinations keep their SQLite files in."""
        return self.server.directory

    def _route(self) -> tuple[Route, str] | None:
        """Return the route whose prefix starts the path, and the rest of the path."""
        path = urlsplit(self.path).path
        for route in self.server.routes:
            if path == route.prefix or path.startswith(f"{route.prefix}/"):
                return route, path[len(route.prefix) :]
        return None

    def _unknown_path(self) -> None:
        self.send_json(HTTPStatus.NOT_FOUND, {"error": "unknown path"})

    def do_GET(self) -> None:
        """``GET <prefix>/<name>``: the route's ``get`` with the decoded name."""
        found = self._route()
        get = None if found is None else found[0].get
        raw_name = "" if found is None else found[1][1:]
        if get is None or not raw_name or "/" in raw_name:
            self._unknown_path()
            return
        get(self, unquote(raw_name))

    def do_POST(self) -> None:
        """``POST <prefix>``: the route's ``post`` with the bounded body."""
        found = self._route()
        post = None if found is None or found[1] not in ("", "/") else found[0].post
        if post is None:
            self._unknown_path()
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0:
            self.send_json(HTTPStatus.LENGTH_REQUIRED, {"error": "Content-Length required"})
            return
        if length > _MAX_BODY_BYTES:
            self.send_json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return
        post(self, self.rfile.read(length))


class HttpDestinationsServer(ThreadingHTTPServer):
    """A threading HTTP server bound to ``(host, port)`` serving ``routes``."""

    daemon_threads = True

    def __init__(
        self,
        directory: StrPath,
        *,
        port: int,
        hang_seconds: float,
        routes: Sequence[Route],
        host: str = "127.0.0.1",
        keys_file: StrPath | None = None,
    ) -> None:
        """Bind, then prepare every route; call ``serve_forever()`` to serve. ``keys_file``:
        the JWKS the bank and the publisher verify permit tokens with (None: they do not)."""
        self.directory = Path(directory)
        self.keys_file = None if keys_file is None else Path(keys_file)
        self.hang_seconds = hang_seconds
        self.routes = tuple(routes)
        self.stopping = threading.Event()
        super().__init__((host, port), Exchange)
        try:
            for route in self.routes:
                route.prepare(self.directory, f"{self.base_url}{route.prefix}")
        except BaseException:
            self.server_close()
            raise

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the bound socket (the actual port when 0 was asked for)."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

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
