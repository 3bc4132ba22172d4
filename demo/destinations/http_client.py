"""HTTP for the destination clients: one request per connection, every failure classified.

The bank and the publisher clients write with :func:`post_keyed` and look up with
:func:`get_keyed`; the source client reads with :func:`exchange`. The classification of a write
(:func:`post_keyed`) rests on one question: could the destination have acted on the request?
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from dispatch.handlers import DefiniteFailure, LookupFailedError, UncertainOutcome
from dispatch.observability.tracing import http_client_span, note_status
from protocols.backoff import parse_retry_after

__all__ = [
    "REFUSED_BEFORE_ANY_EFFECT",
    "SUCCESS",
    "BodyTooLargeError",
    "ConnectError",
    "ExchangeError",
    "Permit",
    "exchange",
    "get_keyed",
    "json_object",
    "post_keyed",
]

SUCCESS = range(200, 300)
# Refusals that a server gives before acting on a request: the request itself was unusable.
# Any other 4xx (409 "the same key is in progress", 408, 425, 429, ...) answers a request the
# destination may have received and acted on, so it is uncertain, never no effect.
REFUSED_BEFORE_ANY_EFFECT = frozenset({400, 401, 403, 404, 405, 411, 413, 414, 415, 422})


@dataclass(frozen=True)
class Permit:
    """What a write carries for a destination that verifies permits: the signed token and the
    canonical text of the snapshot it binds."""

    token: str
    snapshot: str


class ConnectError(Exception):
    """No connection could be opened, so no request byte was sent."""


class BodyTooLargeError(Exception):
    """The response's body is longer than the caller reads (``exchange(max_bytes=…)``)."""


class ExchangeError(Exception):
    """The request was (or may have been) sent, but no complete response arrived."""


def exchange(
    url: str,
    method: str,
    *,
    body: bytes | None,
    timeout: float,
    accept: str = "application/json",
    max_bytes: int | None = None,
    headers: Mapping[str, str] | None = None,
    answered: dict[str, str] | None = None,
) -> tuple[int, bytes | None]:
    """Send one request to ``url``; return the status and the body (``None`` if unreadable, or
    longer than ``max_bytes`` when that is given: an endless body is never held whole).

    Raises :class:`ConnectError` when the connection was never established and
    :class:`ExchangeError` for any failure once request bytes may have left. ``timeout`` bounds
    the connect and every single socket wait. ``answered``, if given, receives the response's
    ``Retry-After`` header when it has one.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectError(f"unsupported URL {url!r}")
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    try:
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    except (ValueError, http.client.HTTPException) as error:  # e.g. a non-numeric port
        raise ConnectError(f"unsupported URL {url!r}: {error}") from error
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with http_client_span(method, parts.hostname, connection.port) as (span, carried):
        try:
            try:
                connection.connect()
            except (OSError, http.client.HTTPException) as error:
                raise ConnectError(f"could not connect to {url}: {error!r}") from error
            # The W3C `traceparent` of this request's span goes with it.
            sent = {"Accept": accept, "Connection": "close", **(headers or {}), **carried}
            if body is not None:
                sent["Content-Type"] = "application/json"
            try:
                connection.request(method, target, body=body, headers=sent)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                raise ExchangeError(f"no response from {url}: {error!r}") from error
            note_status(span, response.status)
            return _read(response, url, max_bytes=max_bytes, answered=answered)
        finally:
            connection.close()


def _read(response: http.client.HTTPResponse, url: str, *, max_bytes: int | None,
          answered: dict[str, str] | None) -> tuple[int, bytes | None]:
    retry_after = response.getheader("Retry-After")
    if answered is not None and retry_after is not None:
        answered["Retry-After"] = retry_after
    try:
        if max_bytes is None:
            content: bytes | None = response.read()
        else:
            content = response.read(max_bytes + 1)
            if len(content) > max_bytes:
                raise BodyTooLargeError(f"{url} answered more than {max_bytes} bytes")
    except (OSError, http.client.HTTPException):
        content = None  # The status line arrived; the body did not (all of it).
    return response.status, content


def json_object(content: bytes | None) -> dict[str, Any] | None:
    """Decode a JSON object from ``content``; ``None`` when it is missing or not an object."""
    if content is None:
        return None
    try:
        data = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def post_keyed(
    base_url: str,
    path: str,
    fields: dict[str, Any],
    *,
    timeout: float,
    destination: str,
    noun: str,
    permit: Permit | None = None,
) -> dict[str, Any]:
    """POST ``fields`` (with ``"key"``) to a destination deduplicating on it; return its record.

    ``destination`` and ``noun`` name them in error messages ("bank", "transfer"). ``permit``:
    the attempt's signed permit token, sent as ``Authorization: Bearer <token>``, and the
    snapshot it binds, sent as the body's ``snapshot`` member (docs/permit-tokens.md).

    - :class:`DefiniteFailure` -- certainly no effect: the base URL is unusable, the connection
      could not be opened (refused, unreachable, DNS failure, connect timeout: no request byte
      was sent), or the destination refused the request itself (400, 401, 403, 404, 405, 411,
      413, 414, 415, 422).
    - :class:`UncertainOutcome` -- maybe an effect: an error while sending the request
      (conservatively), a timeout or a connection reset or closed before a complete status
      line, any other status that is not 2xx (409, 408, 429, 5xx, ...), or a 2xx whose body is
      not a JSON object for the key.
    """
    key = fields["key"]
    sent, headers = fields, None
    if permit is not None and permit.token:
        sent = {**fields, "snapshot": permit.snapshot}
        headers = {"Authorization": f"Bearer {permit.token}"}
    body = json.dumps(sent).encode("utf-8")
    url = base_url.rstrip("/") + path
    try:
        answered: dict[str, str] = {}
        status, content = exchange(url, "POST", body=body, timeout=timeout, headers=headers,
                                   answered=answered)
    except ConnectError as error:
        raise DefiniteFailure(str(error)) from error
    except ExchangeError as error:
        raise UncertainOutcome(str(error)) from error

    if status in REFUSED_BEFORE_ANY_EFFECT:
        detail = json_object(content) or {}
        raise DefiniteFailure(
            f"{destination} refused the {noun}: {status} {detail.get('error', '')}"
        )
    if status not in SUCCESS:
        # Maybe an effect: retried under the same key only where the contract allows it, not
        # before the destination's Retry-After (protocols/backoff.py).
        raise UncertainOutcome(f"{destination} answered {status}", retry_after=parse_retry_after(
            answered.get("Retry-After"), now=datetime.now(UTC)))
    record = json_object(content)
    if record is None or record.get("key") != key:
        raise UncertainOutcome(
            f"{destination} answered {status} with an unusable body: {content!r}"
        )
    return record


def get_keyed(
    base_url: str, path: str, *, timeout: float, destination: str
) -> dict[str, Any] | None:
    """GET a record: the JSON object of a 200, ``None`` on a 404.

    Raises :class:`LookupFailedError` for any other answer or none (unreachable, timeout, a
    status other than 200/404, a 200 without a JSON object); that settles nothing.
    """
    url = base_url.rstrip("/") + path
    try:
        status, content = exchange(url, "GET", body=None, timeout=timeout)
    except (ConnectError, ExchangeError) as error:
        raise LookupFailedError(str(error)) from error
    if status == HTTPStatus.NOT_FOUND:
        return None
    record = json_object(content) if status == HTTPStatus.OK else None
    if record is None:
        raise LookupFailedError(
            f"{destination} answered {status} with an unusable body: {content!r}"
        )
    return record
