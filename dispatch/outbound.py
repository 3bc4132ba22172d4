"""Outbound HTTP to an address that was checked (docs/design.md#notifications).

A URL a user gave (an agent's webhook, a deployment's notification webhook, any later outbound
URL) is resolved once, here: `resolve` checks every address the name answers and keeps them.
`post` (`request` for any method) then connects to one of exactly those addresses and never
asks the resolver again, so a name that answers a public address to the check and a private one
to the connect (DNS rebinding) cannot move the request into the deployment's own network.

Only the TCP connection is pinned. The request still names the host: the `Host` header, the TLS
server name (SNI) and the certificate's verification are all for the URL's hostname, because
httpcore builds them from the URL and only asks its network backend for a socket. The pinned
backend (`_PinnedBackend`) hands httpcore a connection to the checked address instead of
resolving the name. httpcore follows no redirect and reads no proxy from the environment, so
nothing else chooses where the bytes go.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import idna

from dispatch.observability.tracing import http_client_span, note_status

__all__ = ["Answer", "OutboundError", "Target", "post", "request", "resolve"]

#: Most of an answer's body that is read; the rest is left unread.
MAX_ANSWER_BYTES = 65536
_DEFAULT_PORTS = {"http": 80, "https": 443}


class OutboundError(Exception):
    """Nothing was sent (`sent` False: refused by the check, no connection) or no complete
    answer came back."""

    def __init__(self, reason: str, *, sent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sent = sent


@dataclass(frozen=True)
class Target:
    """A URL and every address its host resolved to when it was checked."""

    url: str
    scheme: str
    host: str  # ASCII (IDNA), as sent in `Host` and as the TLS server name
    port: int
    target: str  # the path and query, as sent on the request line
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: str | None = None  # the answer's `Retry-After` header, if any


def resolve(url: str, *, allow_private: bool) -> Target:
    """`url` resolved once; refused (`OutboundError`) when it is not http(s), when its host
    does not resolve, or, unless `allow_private`, when any address it resolves to is not a
    public one (loopback, private, link-local, reserved, multicast)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise OutboundError("the URL cannot be parsed") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise OutboundError("the URL is not http or https")
    if parts.username or parts.password:
        raise OutboundError("the URL holds credentials")
    name = parts.hostname
    try:
        host = _ascii_host(name)
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, idna.IDNAError):
        raise OutboundError(f"the host {name!r} does not resolve") from None
    addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise OutboundError(f"the host {name!r} does not resolve")
    for address in addresses:
        if not allow_private and not _public(address):
            raise OutboundError(f"the host {name!r} is not a public address")
    return Target(url=url, scheme=parts.scheme, host=host,
                  port=port or _DEFAULT_PORTS[parts.scheme],
                  target=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                  addresses=addresses)


def _ascii_host(name: str) -> str:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return idna.encode(name, uts46=True).decode("ascii")
    return name


def _public(address: str) -> bool:
    parsed = ipaddress.ip_address(address.split("%")[0])
    return parsed.is_global and not parsed.is_multicast


def post(target: Target, *, body: bytes, headers: Mapping[str, str], timeout: float,
         ssl_context: ssl.SSLContext | None = None) -> Answer:
    """POST `body` to `target`, connected to one of its checked addresses (in the order the
    resolver gave them); the answer's status and at most `MAX_ANSWER_BYTES` of its body.
    `ssl_context` defaults to httpcore's: certificates verified against the hostname."""
    return request(target, "POST", body=body, headers=headers, timeout=timeout,
                   ssl_context=ssl_context)


def request(target: Target, method: str, *, body: bytes | None, headers: Mapping[str, str],
            timeout: float, ssl_context: ssl.SSLContext | None = None) -> Answer:
    """`post` for any method (`body` None: none sent). `OutboundError.sent` says whether a
    request byte may have left: False when no connection was made (refused, unreachable, a
    certificate that does not verify), True for a timeout or a connection lost after."""
    with http_client_span(method, target.host, target.port) as (span, carried):
        # The W3C `traceparent` of this request's span goes with it (docs/design.md#tracing).
        answer = _request(target, method, body=body, headers={**headers, **carried},
                          timeout=timeout, ssl_context=ssl_context)
        note_status(span, answer.status)
        return answer


def _request(target: Target, method: str, *, body: bytes | None, headers: Mapping[str, str],
             timeout: float, ssl_context: ssl.SSLContext | None) -> Answer:
    url = httpcore.URL(scheme=target.scheme.encode(), host=target.host.encode(),
                       port=target.port, target=target.target.encode())
    limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    sent = [("Host", _host_header(target)), *headers.items()]
    try:
        with httpcore.ConnectionPool(ssl_context=ssl_context, max_connections=1,
                                     network_backend=_PinnedBackend(target)) as pool, \
                pool.stream(method, url, headers=sent, content=body,
                            extensions={"timeout": limits}) as response:
            data = b""
            for chunk in response.iter_stream():
                data += chunk
                if len(data) >= MAX_ANSWER_BYTES:
                    break
            retry_after = next((value.decode("latin-1") for name, value in response.headers
                                if name.lower() == b"retry-after"), None)
            return Answer(response.status, data[:MAX_ANSWER_BYTES], retry_after)
    except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
        # Refused, unreachable, or a certificate that does not verify: nothing was sent.
        raise OutboundError(f"no connection: {str(exc)[:300]}") from None
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise OutboundError(f"no answer: {type(exc).__name__}: {str(exc)[:200]}",
                            sent=True) from None


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == _DEFAULT_PORTS[target.scheme] else f"{host}:{target.port}"


class _PinnedBackend(httpcore.SyncBackend):
    """Connects to the target's checked addresses instead of resolving the host again."""

    def __init__(self, target: Target) -> None:
        self._target = target

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                    ) -> httpcore.NetworkStream:
        if (host, port) != (self._target.host, self._target.port):
            # Only the checked origin is ever connected to (httpcore follows no redirect).
            raise httpcore.ConnectError(f"{host}:{port} was not checked")
        failures = []
        for address in self._target.addresses:
            try:
                # An address literal: the socket layer connects without a lookup.
                return super().connect_tcp(address, port, timeout=timeout,
                                           local_address=local_address,
                                           socket_options=socket_options)
            except httpcore.ConnectError as exc:
                failures.append(f"{address}: {exc}")
        raise httpcore.ConnectError("; ".join(failures))
