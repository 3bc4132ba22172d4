"""Whether a source URL is on a deployment's allow-list (docs/design.md#evidence, `research.fetch`).

An allow-list entry is a URL prefix in the structural sense, never a string prefix: the URL's
scheme, host and effective port must equal the entry's, and the entry's path must be a prefix
of the URL's path by whole segments. So `https://docs.example.org` does not admit
`https://docs.example.org.attacker.net/`, nor `https://docs.example.org@169.254.169.254/`, and
`https://docs.example.org/public/` does not admit `/public-internal/` or
`/public/../admin`. Refused outright, whatever the list: anything but http(s), a URL naming
credentials (`user@host`), a fragment, a backslash, white space or a control character, and a
path with a dot segment or an encoded slash or backslash (which servers may resolve otherwise
than this check reads them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import SplitResult, unquote, urlsplit

__all__ = ["allowlist_entry_problem", "source_allowed", "source_problem"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_UNSAFE_CHARACTERS: Final = re.compile(r"[\s\\\x00-\x1f\x7f]")
_ENCODED_SEPARATOR: Final = re.compile(r"%(2f|5c)", re.IGNORECASE)


def source_problem(url: str) -> str | None:
    """Why `url` can never be a source, or None."""
    if _UNSAFE_CHARACTERS.search(url):
        return "it holds white space, a backslash or a control character"
    parts = _split(url)
    if parts is None:
        return "it is not an http or https URL with a host"
    if "@" in parts.netloc:
        return "it names credentials (user@host)"
    if parts.fragment or url.endswith("#"):
        return "it has a fragment"
    if _ENCODED_SEPARATOR.search(parts.path):
        return "its path holds an encoded slash or backslash"
    if any(unquote(segment) in (".", "..") for segment in parts.path.split("/")):
        return "its path holds a dot segment"
    return None


def allowlist_entry_problem(entry: str) -> str | None:
    """Why `entry` cannot be an allow-list entry, or None: as `source_problem`, and no query."""
    problem = source_problem(entry)
    if problem is None and "?" in entry:
        problem = "it has a query"
    return problem


def source_allowed(url: str, allowlist: Iterable[str]) -> bool:
    """Whether `url` is a usable source under one of the `allowlist` entries (module doc)."""
    if source_problem(url) is not None:
        return False
    parts = _split(url)
    assert parts is not None
    return any(_under(parts, entry) for entry in allowlist
               if allowlist_entry_problem(entry) is None)


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed port raises here
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts


def _under(url: SplitResult, entry: str) -> bool:
    allowed = _split(entry)
    if allowed is None:
        return False
    if (url.scheme, url.hostname, _port(url)) != (allowed.scheme, allowed.hostname,
                                                   _port(allowed)):
        return False
    prefix = [s for s in allowed.path.split("/") if s]
    path = [s for s in url.path.split("/") if s]
    return path[:len(prefix)] == prefix


def _port(parts: SplitResult) -> int:
    return parts.port or _DEFAULT_PORTS[parts.scheme]
