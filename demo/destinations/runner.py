"""Run the demo destinations together, and read what they have recorded
(docs/design.md#demo, #running, #evidence).

Three servers: the SMTP sink, its HTTP lookup beside it (``/messages``, on a port of its own),
and one HTTP server on the bank's port for the bank (``/transfers``), the publisher
(``/publications``), the source server (``/sources``) and the helpdesk the demo's HTTP action
calls (``/tickets``, :mod:`.helpdesk`). They listen on ``host``: 127.0.0.1 by
default, 0.0.0.0 when other machines or containers must reach them.
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from . import bank, helpdesk, publisher, sources
from .bank import list_transfers
from .http_server import HttpDestinationsServer
from .publisher import list_publications
from .smtp_sink import LOOKUP_ROUTE, list_messages, start_smtp_sink
from .sources import list_sources
from .storage import StrPath

__all__ = [
    "BANK_KEYS",
    "EMAIL_KEYS",
    "PUBLICATION_KEYS",
    "SOURCE_KEYS",
    "list_all",
    "serve",
]

HOST = "127.0.0.1"
EMAIL_KEYS = ("message_id", "from", "to", "cc", "subject", "body")
BANK_KEYS = ("key", "from_account", "to_account", "amount", "currency", "memo")
SOURCE_KEYS = ("url", "digest")
PUBLICATION_KEYS = ("key", "report_id", "revision", "digest", "title")
HTTP_ROUTES = (bank.ROUTE, publisher.ROUTE, sources.ROUTE, helpdesk.ROUTE)

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How often the foreground loop re-checks the stop event; bounds shutdown latency.
_POLL_SECONDS = 0.2


def list_all(directory: StrPath) -> dict[str, list[dict[str, Any]]]:
    """Return every recorded effect, in recording order, in the shape docs/design.md#demo
    and #evidence fix.

    ``{"email": [{"message_id", "from", "to", "cc", "subject", "body"}], "bank": [{"key",
    "from_account", "to_account", "amount", "currency", "memo"}], "sources": [{"url",
    "digest"}], "publications": [{"key", "report_id", "revision", "digest", "title"}]}``,
    exactly these keys. ``sources`` are the documents the source server serves, with the digest
    (``sha256:<hex>``) of their bytes now. Reads the SQLite files directly; missing files are
    empty lists.
    """
    return {
        "email": [{key: row[key] for key in EMAIL_KEYS} for row in list_messages(directory)],
        "bank": [{key: row[key] for key in BANK_KEYS} for row in list_transfers(directory)],
        "sources": [{key: row[key] for key in SOURCE_KEYS} for row in list_sources(directory)],
        "publications": [
            {key: row[key] for key in PUBLICATION_KEYS} for row in list_publications(directory)
        ],
    }


def _install_stop_signals(stop: threading.Event) -> dict[int, Any]:
    """Make SIGTERM and SIGINT set ``stop``; return the previous handlers to restore.

    Signal handlers can only be installed from the main thread; elsewhere the caller must set
    ``stop`` itself, and nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def _request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    return {signum: signal.signal(signum, _request_stop) for signum in _STOP_SIGNALS}


def serve(
    directory: StrPath,
    *,
    smtp_port: int,
    bank_port: int,
    lookup_port: int = 0,
    host: str = HOST,
    hang_seconds: float = 120.0,
    ready: Callable[[], object] | None = None,
    stop: threading.Event | None = None,
    keys_file: StrPath | None = None,
) -> None:
    """Run the SMTP sink, its HTTP lookup and the HTTP destinations on ``host`` in the
    foreground until stopped.

    The bank, the publisher and the source server share ``bank_port``; the sink's lookup
    (``GET /messages/<id>``) listens on ``lookup_port`` (0: any free port). Records go to
    ``email.sqlite3``, ``bank.sqlite3``, ``publisher.sqlite3`` and ``sources.sqlite3`` in
    ``directory`` (created if needed). Once every server listens, prints one flushed line
    ``destinations ready smtp=H:P smtp_lookup=http://H:L bank=http://H:Q
    publisher=http://H:Q sources=http://H:Q/sources dir=D`` (``D`` absolute) and then calls
    ``ready()``. Returns after SIGTERM or SIGINT (when called from the main
    thread) or once ``stop`` is set, having stopped both servers; ``hang.test`` requests still
    waiting are abandoned. With ``keys_file`` (the JSON of ``GET /api/v1/keys/``) the bank, the
    publisher and the helpdesk verify every write's permit token (docs/permit-tokens.md).
    """
    if keys_file is not None:
        # Verifying needs the Python client's `permits` extra: without it, refuse to start
        # (ImportError saying what to install), never answer a write with a server error.
        importlib.import_module("exact_console.permits")
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stop_event = stop if stop is not None else threading.Event()
    previous_handlers = _install_stop_signals(stop_event)
    try:
        web = HttpDestinationsServer(
            root, port=bank_port, hang_seconds=hang_seconds, routes=HTTP_ROUTES, host=host,
            keys_file=keys_file,
        )
        try:
            lookup = HttpDestinationsServer(
                root, port=lookup_port, hang_seconds=hang_seconds, routes=(LOOKUP_ROUTE,),
                host=host,
            )
        except BaseException:
            web.server_close()
            raise
        try:
            sink = start_smtp_sink(root, port=smtp_port, hang_seconds=hang_seconds, host=host)
        except BaseException:
            web.server_close()
            lookup.server_close()
            raise
        # Polled every 50 ms for the stop (socketserver's default, 0.5 s, made every stop of a
        # test's destinations wait about a second).
        web_thread = threading.Thread(target=web.serve_forever, args=(_POLL_SECONDS / 4,),
                                      name="http", daemon=True)
        web_thread.start()
        lookup_thread = threading.Thread(target=lookup.serve_forever, args=(_POLL_SECONDS / 4,),
                                         name="lookup", daemon=True)
        lookup_thread.start()
        try:
            base = web.base_url
            print(
                f"destinations ready smtp={host}:{smtp_port} smtp_lookup={lookup.base_url} "
                f"bank={base} publisher={base} sources={base}{sources.ROUTE.prefix} dir={root}",
                flush=True,
            )
            if ready is not None:
                ready()
            while not stop_event.wait(_POLL_SECONDS):
                pass
        finally:
            sink.stop()
            web.stop()
            lookup.stop()
            web_thread.join()
            lookup_thread.join()
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
