"""JSON Schema `pattern` with the anchors and classes its spec means (JSON Schema 2020-12 §6.3.3).

A schema's patterns are ECMA-262 regular expressions, but jsonschema applies them with Python's
`re.search`, where `$` also matches before a trailing newline: `^[A-Z]{3}$` accepts `"EUR\\n"`,
and `\\d` accepts any Unicode decimal digit (`"١٢٣"`). A value that passes the schema that way
reaches a destination that reads it differently. `compile_pattern` gives a pattern its
ECMA-262 meaning instead:

- every `$` that is an anchor (not escaped, not inside a character class, not in a `(?#...)`
  comment) becomes `\\Z`, the end of the text and nothing else;
- the pattern is compiled with `re.ASCII`, so `\\d`, `\\w`, `\\s` and `\\b` are ASCII classes as in
  ECMA-262 (which also matches `[0-9]`-style explicit classes written by authors).

A verbose pattern (`(?x)`) is refused: its comments and ignored whitespace are not ECMA-262
syntax, and a `$` inside them could not be told from an anchor.
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = ["PatternError", "anchor_end", "compile_pattern"]

_FLAG_LETTERS: Final = frozenset("aiLmsux-")


class PatternError(ValueError):
    """A pattern that cannot be given its JSON Schema meaning."""


def anchor_end(pattern: str) -> str:
    """`pattern` with each end-of-text anchor `$` written `\\Z`; nothing else is changed.

    Escapes (`\\$`, `\\\\`), character classes (`[$]`, `[]$]`, `[^]$]`, `[\\]$]`) and comment
    groups (`(?#$)`) are copied as they are, which is how Python's own parser reads them.
    """
    out: list[str] = []
    i, end = 0, len(pattern)
    while i < end:
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif char == "[":
            j = _class_end(pattern, i)
            out.append(pattern[i:j])
            i = j
        elif pattern.startswith("(?#", i):
            j = pattern.find(")", i)
            j = end if j < 0 else j + 1
            out.append(pattern[i:j])
            i = j
        elif pattern.startswith("(?", i):
            flags = _flags_at(pattern, i + 2)
            if "x" in flags:
                raise PatternError(f"verbose patterns are not JSON Schema patterns: {pattern!r}")
            out.append("(?")
            i += 2
        elif char == "$":
            out.append(r"\Z")
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class opening at `start` (as `re` parses it: a `]`
    right after `[` or `[^` is a member, not the end)."""
    j = start + 1
    if pattern.startswith("^", j):
        j += 1
    if pattern.startswith("]", j):
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return min(j + 1, len(pattern))


def _flags_at(pattern: str, start: int) -> str:
    j = start
    while j < len(pattern) and pattern[j] in _FLAG_LETTERS:
        j += 1
    return pattern[start:j]


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled pattern with ECMA-262 `$` and ASCII classes; `PatternError` if it has none.

    Matching uses `search`, as JSON Schema patterns are not implicitly anchored.
    """
    rewritten = anchor_end(pattern)
    try:
        return re.compile(rewritten, re.ASCII)
    except (re.error, ValueError) as exc:  # ValueError: `(?u)` against re.ASCII
        raise PatternError(f"not a usable pattern {pattern!r}: {exc}") from None
