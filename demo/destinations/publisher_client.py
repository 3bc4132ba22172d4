"""The publisher client: publications and lookups over HTTP/JSON, failures classified.

What a ``report.publish`` handler calls (docs/design.md#evidence); the key is the operation id, on
which the publisher deduplicates, so an uncertain publication may be retried with the same key and
settled by :func:`publication_lookup`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .http_client import Permit, get_keyed, post_keyed

__all__ = ["publication_lookup", "publish"]


def publish(
    base_url: str,
    *,
    key: str,
    report_id: str,
    revision: int,
    digest: str,
    title: str,
    body: str,
    timeout: float,
    permit: Permit | None = None,
) -> dict[str, Any]:
    """Ask the publisher at ``base_url`` to publish a report revision, deduplicated on ``key``.

    ``POST {base_url}/publications``. Returns the publisher's record (``key``, ``report_id``,
    ``revision``, ``digest``, ``title``, ``body``, ``published_at``) on a 2xx: 201 when this
    call recorded it, 200 when the key had already been recorded (a safe retry; the record is
    the first one, whatever this call sent). ``timeout`` bounds the connect and every single
    socket wait. ``permit``: as :func:`.bank_client.bank_transfer`'s.

    Classification (:func:`.http_client.post_keyed`), as :func:`.bank_client.bank_transfer`:

    - :class:`DefiniteFailure` -- certainly not published by this call: the base URL is
      unusable, the connection could not be opened (no request byte was sent), or the publisher
      refused the request itself (400, 401, 403, 404, 405, 411, 413, 414, 415, 422; a title of
      ``fail-before.test`` is refused with 422).
    - :class:`UncertainOutcome` -- maybe published: an error while sending the request, a
      timeout, a connection reset or closed before a complete status line, any other status
      that is not 2xx, or a 2xx whose body is not a JSON object for ``key``.
    """
    fields = {
        "key": key,
        "report_id": report_id,
        "revision": revision,
        "digest": digest,
        "title": title,
        "body": body,
    }
    return post_keyed(
        base_url,
        "/publications",
        fields,
        timeout=timeout,
        destination="publisher",
        noun="publication",
        permit=permit,
    )


def publication_lookup(base_url: str, key: str, timeout: float) -> dict[str, Any] | None:
    """Return the publication recorded under ``key`` (the record :func:`publish` returns), or
    ``None`` if the publisher has none: ``GET {base_url}/publications/<key>``.

    Raises :class:`LookupFailedError` when the publisher gives no usable answer (unreachable,
    timeout, a status other than 200/404, or a 200 without a JSON object); that settles nothing.
    Because the publisher deduplicates on ``key``, ``None`` means a retry with the key is safe.
    """
    path = f"/publications/{quote(key, safe='')}"
    return get_keyed(base_url, path, timeout=timeout, destination="publisher")
