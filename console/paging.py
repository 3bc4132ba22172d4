"""Page links of the console's keyset-paged lists (`pager`), and their opaque cursors:
`(timestamp, id)` or an integer id, base64url-encoded.

A cursor that does not decode is treated as absent (the first page), never as an error.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from django.http import HttpRequest


def encode(cursor: tuple[Any, ...] | None) -> str:
    if cursor is None:
        return ""
    parts = [value.isoformat() if isinstance(value, datetime) else str(value)
             for value in cursor]
    return base64.urlsafe_b64encode("|".join(parts).encode()).decode().rstrip("=")


def _text(raw: str | None) -> str | None:
    if not raw or len(raw) > 200:
        return None
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def decode_time_id(raw: str | None) -> tuple[datetime, str] | None:
    text = _text(raw)
    if text is None or text.count("|") != 1:
        return None
    at, _, row_id = text.partition("|")
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        return None
    if moment.tzinfo is None or not row_id:
        return None
    return moment, row_id


def decode_int(raw: str | None) -> int | None:
    text = _text(raw)
    if text is None or not text.isdigit():
        return None
    return int(text)


def pager(request: HttpRequest, listing: Any) -> dict[str, str]:
    """The links of a keyset-paged list (`dispatch.selectors.paging.Page`): older, newer, and back
    to the first page when this is not it."""
    return {"older": page_link(request, "after", listing.older),
            "newer": page_link(request, "before", listing.newer),
            "first": page_link(request, None, None) if listing.newer else ""}


def page_link(request: HttpRequest, key: str | None, cursor: tuple[Any, ...] | None) -> str:
    """The current URL with its filters, moved to another page (or to the first one)."""
    params = request.GET.copy()
    for name in ("after", "before"):
        params.pop(name, None)
    if key is not None:
        if cursor is None:
            return ""
        params[key] = encode(cursor)
    query = params.urlencode()
    return f"{request.path}?{query}" if query else request.path
