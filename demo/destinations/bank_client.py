"""The bank client: transfers and lookups over HTTP/JSON, failures classified for the dispatcher."""

from __future__ import annotations

import http.client
import json
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlsplit

from dispatch.handlers import DefiniteFailure, LookupFailedError, UncertainOutcome

__all__ = ["bank_lookup", "bank_transfer"]


_SUCCESS = range(200, 300)
# Refusals that a server gives before acting on a request: the request itself was unusable.
# Any other 4xx (409 "the same key is in progress", 408, 425, 429, ...) answers a request the
# bank may have received and acted on, so it is uncertain, never no effect.
_REFUSED_BEFORE_ANY_EFFECT = frozenset({400, 401, 403, 404, 405, 411, 413, 414, 415, 422})


class _ConnectError(Exception):
    """No connection could be opened, so no request byte was sent."""


class _ExchangeError(Exception):
    """The request was (or may have been) sent, but no complete response arrived."""


def _exchange(
    base_url: str, method: str, path: str, *, body: bytes | None, timeout: float
) -> tuple[int, bytes | None]:
    """Send one request; return the status and the body (``None`` if it could not be read).

    Raises :class:`_ConnectError` when the connection was never established and
    :class:`_ExchangeError` for any failure once request bytes may have left.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _ConnectError(f"unsupported base URL {base_url!r}")
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    try:
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    except (ValueError, http.client.HTTPException) as error:  # e.g. a non-numeric port
        raise _ConnectError(f"unsupported base URL {base_url!r}: {error}") from error
    try:
        try:
            connection.connect()
        except (OSError, http.client.HTTPException) as error:
            raise _ConnectError(f"could not connect to {base_url}: {error!r}") from error
        headers = {"Accept": "application/json", "Connection": "close"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, parts.path.rstrip("/") + path, body=body, headers=headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            raise _ExchangeError(f"no response from {base_url}: {error!r}") from error
        try:
            content: bytes | None = response.read()
        except (OSError, http.client.HTTPException):
            content = None  # The status line arrived; the body did not (all of it).
        return response.status, content
    finally:
        connection.close()


def _json_object(content: bytes | None) -> dict[str, Any] | None:
    """Decode a JSON object from ``content``; ``None`` when it is missing or not an object."""
    if content is None:
        return None
    try:
        data = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def bank_transfer(
    base_url: str,
    *,
    key: str,
    from_account: str,
    to_account: str,
    amount: str,
    currency: str,
    memo: str,
    timeout: float,
) -> dict[str, Any]:
    """Ask the bank at ``base_url`` to make a transfer, deduplicated on ``key``.

    Returns the bank's transfer record (``key``, ``from_account``, ``to_account``, ``amount``,
    ``currency``, ``memo``, ``created_at``) on a 2xx: 201 when this call recorded it, 200 when
    the key had already been recorded (a safe retry). ``timeout`` bounds the connect and every
    single socket wait.

    Classification:

    - :class:`DefiniteFailure` -- the bank certainly made no transfer for this call: the base
      URL is unusable, the connection could not be opened (refused, unreachable, DNS failure,
      connect timeout: no request byte was sent), or the bank refused the request itself
      (400, 401, 403, 404, 405, 411, 413, 414, 415, 422).
    - :class:`UncertainOutcome` -- the bank may have made it: an error while sending the
      request (conservatively), a timeout or a connection reset or closed before a complete
      status line (``RemoteDisconnected``, ``BadStatusLine``), any other status that is not
      2xx (a 409 "same key in progress", 408, 429, 5xx, ...), or a 2xx whose body is not a JSON
      object for ``key``. Because the bank deduplicates on ``key``, the caller may retry an
      uncertain call with the same key.
    """
    body = json.dumps(
        {
            "key": key,
            "from_account": from_account,
            "to_account": to_account,
            "amount": amount,
            "currency": currency,
            "memo": memo,
        }
    ).encode("utf-8")
    try:
        status, content = _exchange(base_url, "POST", "/transfers", body=body, timeout=timeout)
    except _ConnectError as error:
        raise DefiniteFailure(str(error)) from error
    except _ExchangeError as error:
        raise UncertainOutcome(str(error)) from error

    if status in _REFUSED_BEFORE_ANY_EFFECT:
        detail = _json_object(content) or {}
        raise DefiniteFailure(f"bank refused the transfer: {status} {detail.get('error', '')}")
    if status not in _SUCCESS:
        raise UncertainOutcome(f"bank answered {status}")
    transfer = _json_object(content)
    if transfer is None or transfer.get("key") != key:
        raise UncertainOutcome(f"bank answered {status} with an unusable body: {content!r}")
    return transfer


def bank_lookup(base_url: str, key: str, timeout: float) -> dict[str, Any] | None:
    """Return the transfer the bank recorded under ``key``, or ``None`` if it has none.

    Raises :class:`LookupFailedError` when the bank gives no usable answer (unreachable, timeout,
    a status other than 200/404, or a 200 without a JSON object); that settles nothing.
    """
    path = f"/transfers/{quote(key, safe='')}"
    try:
        status, content = _exchange(base_url, "GET", path, body=None, timeout=timeout)
    except (_ConnectError, _ExchangeError) as error:
        raise LookupFailedError(str(error)) from error
    if status == HTTPStatus.NOT_FOUND:
        return None
    transfer = _json_object(content) if status == HTTPStatus.OK else None
    if transfer is None:
        raise LookupFailedError(f"bank answered {status} with an unusable body: {content!r}")
    return transfer
