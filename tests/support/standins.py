"""Stand-ins for the demo destinations that answer as a test tells them to: a bank over HTTP and
an SMTP server, each in a thread of the test process, recording what reached them."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFUSAL = json.dumps({"error": "same key in progress"}).encode()


@contextmanager
def bank_standin() -> Iterator[Any]:
    """A bank that answers every POST with `status` and `body`, or drips `drip` more bytes, one
    a second, or is down for `outage` seconds; `keys` holds the idempotency key of every
    request that reached it, in order."""

    class Reply(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server.keys.append(request["key"])
            server.arrived.append(time.monotonic())
            if server.outage is not None:  # down for `outage` s from the first request
                down = server.arrived[-1] - server.arrived[0] < server.outage
                self._outage(request, down)
                return
            body = server.body
            self.send_response(server.status)
            self.send_header("Content-Length", str(len(body) + server.drip))
            self.end_headers()
            self.wfile.write(body)
            for _ in range(server.drip):  # one byte a second: every socket wait is short
                time.sleep(1)
                self.wfile.write(b" ")

        def _outage(self, request: dict[str, Any], down: bool) -> None:
            """503 with `retry_after` (if set) while down, then the transfer's record."""
            body = (json.dumps({"error": "unavailable"}) if down else json.dumps(
                {**{k: v for k, v in request.items() if k != "snapshot"},
                 "created_at": "2026-12-07T00:00:00Z"})).encode()
            self.send_response(503 if down else 201)
            if down and server.retry_after is not None:
                self.send_header("Retry-After", str(server.retry_after))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), Reply)
    server.daemon_threads = True
    server.status, server.body, server.drip, server.keys = 409, REFUSAL, 0, []
    # `outage`: seconds after the first request during which it answers 503 (None: never),
    # with `Retry-After: retry_after`; `arrived`: when each request came (monotonic).
    server.outage, server.retry_after, server.arrived = None, None, []
    with _serving(server):
        yield server


@contextmanager
def _serving(server: socketserver.BaseServer) -> Iterator[None]:
    # A short poll: `shutdown()` waits for the loop to notice, once per test.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def bank_destination(settings: Any) -> Iterator[Any]:
    """A bank stand-in, set as the destination before any proposal binds it (the runtime's
    cached destinations are built again on both sides)."""
    from dispatch.runtime import get_runtime

    with bank_standin() as server:
        settings.DESTINATIONS = {**settings.DESTINATIONS, "bank_url": bank_url(server)}
        get_runtime.cache_clear()
        yield server
    get_runtime.cache_clear()


def bank_url(server: Any) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@contextmanager
def smtp_standin() -> Iterator[Any]:
    """An SMTP server that accepts every command up to the end of DATA, answers the message with
    `after_data` (raw bytes, `None` for no reply) and closes the connection. `messages` holds
    every message whose terminating `<CRLF>.<CRLF>` it read."""

    class Session(socketserver.StreamRequestHandler):
        def reply(self, line: bytes) -> None:
            self.wfile.write(line)
            self.wfile.flush()

        def handle(self) -> None:
            self.reply(b"220 standin ESMTP\r\n")
            while line := self.rfile.readline():
                verb = line[:4].upper()
                if verb == b"EHLO":
                    self.reply(b"250-standin\r\n250 8BITMIME\r\n")
                elif verb == b"DATA":
                    self.reply(b"354 end with <CRLF>.<CRLF>\r\n")
                    self.message()
                    return
                else:  # HELO, MAIL, RCPT, RSET, NOOP
                    self.reply(b"250 ok\r\n")

        def message(self) -> None:
            lines = []
            while (line := self.rfile.readline()) != b".\r\n":
                if not line:
                    return
                lines.append(line)
            server.messages.append(b"".join(lines))
            if server.after_data is not None:
                self.reply(server.after_data)
            self.connection.shutdown(socket.SHUT_RDWR)

    server: Any = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Session)
    server.daemon_threads = True
    server.after_data, server.messages = b"250 queued\r\n", []
    with _serving(server):
        yield server
