"""Opaque keyset cursors for page links: `(timestamp, id)` or an integer id, base64url-encoded.

A cursor that does not decode is treated as absent (the first page), never as an error.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any


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
