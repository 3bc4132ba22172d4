"""The bank client: transfers and lookups over HTTP/JSON, failures classified for the dispatcher."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .http_client import Permit, get_keyed, post_keyed

__all__ = ["bank_lookup", "bank_transfer"]


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
    permit: Permit | None = None,
) -> dict[str, Any]:
    """Ask the bank at ``base_url`` to make a transfer, deduplicated on ``key``.

    Returns the bank's transfer record (``key``, ``from_account``, ``to_account``, ``amount``,
    ``currency``, ``memo``, ``created_at``) on a 2xx: 201 when this call recorded it, 200 when
    the key had already been recorded (a safe retry). ``timeout`` bounds the connect and every
    single socket wait. ``permit``: the attempt's permit token and snapshot, for a bank that
    verifies them (docs/permit-tokens.md); it refuses a bad one with 403, no effect.

    Classification (:func:`.http_client.post_keyed`):

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
    fields = {
        "key": key,
        "from_account": from_account,
        "to_account": to_account,
        "amount": amount,
        "currency": currency,
        "memo": memo,
    }
    return post_keyed(
        base_url, "/transfers", fields, timeout=timeout, destination="bank", noun="transfer",
        permit=permit,
    )


def bank_lookup(base_url: str, key: str, timeout: float) -> dict[str, Any] | None:
    """Return the transfer the bank recorded under ``key``, or ``None`` if it has none.

    Raises :class:`LookupFailedError` when the bank gives no usable answer (unreachable, timeout,
    a status other than 200/404, or a 200 without a JSON object); that settles nothing.
    """
    path = f"/transfers/{quote(key, safe='')}"
    return get_keyed(base_url, path, timeout=timeout, destination="bank")
