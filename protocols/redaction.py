"""Before anything is persisted in the audit (docs/design.md#audit): secrets redacted by key, and
the action's own values masked wherever a text quotes one."""

from __future__ import annotations

import functools
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
        return {k: REDACTED if _secret(str(k), needles) else _walk(v, needles)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, needles) for v in value]
    return value


@functools.lru_cache(maxsize=4096)
def _secret(key: str, needles: tuple[str, ...]) -> bool:
    """Whether `key` names a secret: every audit row of an action asks again about the same
    few keys (its binding's, its event's), so each answer is kept (bounded: keys of a
    payload are many)."""
    lowered = key.lower()
    return any(n in lowered for n in needles)


#: What stands in the audit where a text quoted one of the action's values.
MASKED = "[payload]"

#: Shorter strings identify nothing alone, and masking them would mangle ordinary words.
MIN_MASKED_LENGTH = 4


def string_values(value: Any) -> set[str]:
    """Every string of at least `MIN_MASKED_LENGTH` characters in `value` (keys excluded)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str) and len(item) >= MIN_MASKED_LENGTH:
            found.add(item)
    return found


def mask_values(text: str, values: Iterable[str]) -> str:
    """`text` with every occurrence of each of `values` replaced by `MASKED`, the longest
    first: the audit holds no payload (docs/design.md#audit), even where a destination's error or an
    admin's note quotes one of the action's arguments."""
    for found in sorted(values, key=len, reverse=True):
        if found in text:
            text = text.replace(found, MASKED)
    return text
