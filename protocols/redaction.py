"""Secret redaction before anything is persisted in the audit (spec §12)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"


def redact(value: Any, fields: Iterable[str]) -> Any:
    """A copy of `value` with every member whose key contains one of `fields` replaced.

    Matching is case-insensitive on substrings, so `api_key` also hides `stripe_api_key`.
    """
    needles = tuple(f.lower() for f in fields)
    return _walk(value, needles)


def _walk(value: Any, needles: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if any(n in str(k).lower() for n in needles) else _walk(v, needles)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(v, needles) for v in value]
    return value
