"""The source client: fetch a document's bytes over HTTP (docs/design.md#evidence,
``research.fetch``)."""

from __future__ import annotations

from http import HTTPStatus

from dispatch.handlers import DefiniteFailure

from .http_client import BodyTooLargeError, ConnectError, ExchangeError, exchange

__all__ = ["MAX_SOURCE_BYTES", "fetch_source"]

#: The most a source may serve: a larger (or endless) body is refused, never held whole.
MAX_SOURCE_BYTES = 1024 * 1024


def fetch_source(url: str, timeout: float, max_bytes: int = MAX_SOURCE_BYTES) -> bytes:
    """Return the bytes served at ``url`` (``GET``, e.g. ``{sources_url}/tides``) on a 200.

    ``timeout`` bounds the connect and every single socket wait. Redirects are not followed.

    A body longer than ``max_bytes`` is refused without reading the rest.

    A fetch is a read: it has no effect at the source, so every failure is a
    :class:`DefiniteFailure` (certainly no effect, nothing to reconcile), never an
    :class:`UncertainOutcome`: an unusable URL, no connection, no complete response (a timeout,
    a reset, a body cut short), a 404 ("no such source") or any other status than 200.
    """
    try:
        status, content = exchange(url, "GET", body=None, timeout=timeout, accept="text/plain",
                                   max_bytes=max_bytes)
    except (ConnectError, ExchangeError) as error:
        raise DefiniteFailure(f"fetch of {url} failed: {error}") from error
    except BodyTooLargeError as error:
        raise DefiniteFailure(f"source {url} is too large: {error}") from error
    if status == HTTPStatus.NOT_FOUND:
        raise DefiniteFailure(f"no such source: {url}")
    if status != HTTPStatus.OK:
        raise DefiniteFailure(f"source {url} answered {status}")
    if content is None:
        raise DefiniteFailure(f"source {url} answered {status} but its body did not arrive whole")
    return content
