"""A webhook receiver on loopback for the notification tests: a real HTTP server in a thread that
answers each delivery as scripted ("ok", "fail" for a 500, "hang" for no answer at all) and
records every request's headers and body (over TLS with a `tls` context, also the server name
each client asked for)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    script: list[str]
    deliveries: list[Delivery] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def next_answer(self) -> str:
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


@contextmanager
def webhook_receiver(*script: str, tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """Answers the n-th delivery with `script[n]`, and every later one with the last entry."""
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            receiver.deliveries.append(Delivery(
                {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)))
            answer = receiver.next_answer()
            if answer == "hang":
                receiver.stop.wait(30)
                return
            self.send_response(204 if answer == "ok" else 500)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
                        "/hooks/console", list(script) or ["ok"])
    if tls is not None:
        def sni(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
            receiver.server_names.append(name)

        tls.sni_callback = sni
        # The handshake happens in the request's thread, at its first read.
        server.socket = tls.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.stop.set()
        server.shutdown()
        server.server_close()
