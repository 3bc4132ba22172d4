"""Pure presentation helpers: pretty snapshots, field diffs, summaries, durations.

Nothing here touches the database or decides anything; views hand the results to templates.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dispatch.presentation import MessagePresentation, Summary
from protocols.addresses import AddressError, parse_mailbox
from protocols.contracts import Effect
from protocols.scripts import scripts

# Fields shown first in a one-line summary of a snapshot, when present.
SUMMARY_ORDER = ("to", "subject", "amount", "currency", "to_account", "customer_id", "from",
                 "from_account")
# Bookkeeping leaves of a resolved resource reference; the summary skips them.
REFERENCE_KEYS = frozenset({"id", "revision", "digest"})


def reveal(text: str) -> str:
    """`text` with each invisible format character (Unicode category Cf: bidi controls such as
    U+202E, zero-width characters, U+FEFF, ...) written as a JSON `\\uXXXX` escape, so none can
    reorder or hide what the page shows. Inside a JSON string the result is the same value."""
    if text.isascii():  # no ASCII character is in category Cf
        return text
    return "".join(_escape(c) if unicodedata.category(c) == "Cf" else c for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def pretty_json(value: Any) -> str:
    """Indented JSON for reading only; never hashed or signed (canonical bytes come from
    `protocols.canonical`). Key order is kept as parsed, which for a snapshot is canonical.
    Invisible format characters are escaped (`reveal`); the JSON value is unchanged."""
    return reveal(json.dumps(value, indent=2, ensure_ascii=False))


def compact_json(value: Any) -> str:
    """A value for a table cell: a string as itself, or as a JSON string when it holds an
    invisible format character (so the escape cannot be mistaken for text); else JSON."""
    if isinstance(value, str):
        shown = reveal(value)
        return value if shown == value else reveal(json.dumps(value, ensure_ascii=False))
    return reveal(json.dumps(value, ensure_ascii=False))


def digest_matches(canonical: str, digest: str) -> bool:
    """The console's own check that `digest` is the SHA-256 of the canonical text shown."""
    computed = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return hmac.compare_digest(computed, digest)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaves of nested objects as (dotted path, value); lists stay whole (their order matters
    and is shown as one value)."""
    if isinstance(value, dict) and value:
        leaves: list[tuple[str, Any]] = []
        for key, item in value.items():
            leaves.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return leaves
    return [(prefix, value)]


@dataclass(frozen=True)
class DiffRow:
    field: str
    old: str | None
    new: str | None
    change: str  # "added" | "removed" | "changed" | "same"


def diff_fields(old: Any, new: Any) -> list[DiffRow]:
    """Field-by-field comparison of two payloads, in the new payload's field order."""
    before = dict(flatten(old)) if old is not None else {}
    after = dict(flatten(new))
    rows = []
    for name in [*after, *(k for k in before if k not in after)]:
        if name not in before:
            rows.append(DiffRow(name, None, compact_json(after[name]), "added"))
        elif name not in after:
            rows.append(DiffRow(name, compact_json(before[name]), None, "removed"))
        elif before[name] != after[name]:
            rows.append(DiffRow(name, compact_json(before[name]), compact_json(after[name]),
                                "changed"))
        else:
            rows.append(DiffRow(name, compact_json(before[name]), compact_json(after[name]),
                                "same"))
    return rows


def _argument_leaves(arguments: Any) -> list[tuple[str, Any]]:
    leaves = []
    for path, value in flatten(arguments):
        parts = path.split(".")
        if parts[-1] in REFERENCE_KEYS and len(parts) > 1:
            continue
        leaves.append((parts[-1], value))
    return leaves


def _readable(value: Any) -> str:
    """A list of plain strings reads as `a, b`; anything else as compact JSON."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ", ".join(compact_json(v) for v in value)
    return compact_json(value)


def snapshot_summary(snapshot: Any, limit: int = 3) -> list[tuple[str, str]]:
    """A few identifying fields of a snapshot's arguments, for a queue row or a card."""
    arguments = snapshot.get("arguments", {}) if isinstance(snapshot, dict) else {}
    leaves = _argument_leaves(arguments)
    rank = {name: i for i, name in enumerate(SUMMARY_ORDER)}
    leaves.sort(key=lambda leaf: rank.get(leaf[0], len(rank)))
    return [(name, _readable(value)) for name, value in leaves[:limit]]


@dataclass(frozen=True)
class AddressView:
    """An address whose domain a reader could misread: as held, as read and as sent."""

    field: str  # dotted path with the list index, `draft.payload.to[0]`
    address: str  # exactly as the snapshot holds it
    unicode: str  # the domain in U-labels, as a reader sees it
    ascii: str  # the domain in A-labels (punycode), as DNS and SMTP use it
    mixed: tuple[tuple[str, str], ...]  # (label, "Cyrillic and Latin") for each mixed label


def address_views(arguments: Any) -> list[AddressView]:
    """Every address in the arguments with an internationalized domain, in field order.

    Beside the snapshot, never instead of it: the canonical text stays the bytes that were
    hashed. Plain ASCII domains read one way only and are left out.
    """
    views = []
    for path, value in flatten(arguments):
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if not isinstance(item, str):
                continue
            try:
                mailbox = parse_mailbox(item)
            except AddressError:
                continue
            if not mailbox.internationalized:
                continue
            views.append(AddressView(
                field=path if index is None else f"{path}[{index}]",
                address=item, unicode=mailbox.unicode, ascii=mailbox.ascii,
                mixed=tuple((label, " and ".join(sorted(scripts(label))))
                            for label in mailbox.mixed_script_labels)))
    return views


def paragraphs(text: str) -> list[str]:
    """Text as a reader's paragraphs (split at blank lines), each with its invisible format
    characters revealed; the template escapes them and keeps single line breaks."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [reveal(part.strip("\n")) for part in re.split(r"\n[ \t]*\n", text.strip())
            if part.strip()]


# Effects that reach beyond the store: money moved, or something sent. Shown red.
ALARMING_EFFECTS = frozenset({Effect.FINANCIAL_WRITE.value, Effect.EXTERNAL_WRITE.value})


@dataclass(frozen=True)
class Headline:
    """The sentence on top of an approval, as shown: its text with invisible characters
    revealed (the template escapes it), the effects that earn a red badge, and whether it moves
    a large amount (one the deployment's approval rules ask more approvers for)."""

    text: str
    alarming: tuple[str, ...]
    large: bool


def headline(summary: Summary, effects: Iterable[str], large: bool) -> Headline:
    """`large`: the deployment's approval rules ask more approvers for the amount it moves."""
    return Headline(text=reveal(summary.text),
                    alarming=tuple(sorted(set(effects) & ALARMING_EFFECTS)), large=large)


@dataclass(frozen=True)
class HeaderLine:
    label: str
    values: tuple[str, ...]
    listed: bool  # a list in the payload, shown as one (an empty one reads "none")


@dataclass(frozen=True)
class MessageView:
    """A resource argument read as its kind's presentation declares: header lines (every
    payload member, the undeclared ones under their own names), the body as text, and the
    reference's bookkeeping (id, revision, digest, links) as dotted fields."""

    argument: str
    kind: str
    title: str
    headers: tuple[HeaderLine, ...]
    body: str | None
    bookkeeping: tuple[tuple[str, str], ...]


def _header(label: str, value: Any) -> HeaderLine:
    if isinstance(value, list):
        return HeaderLine(label, tuple(compact_json(v) for v in value), listed=True)
    return HeaderLine(label, (compact_json(value),), listed=False)


def message_view(argument: str, kind: str, presentation: MessagePresentation,
                 resolved: Any) -> MessageView | None:
    """`resolved` (a snapshot's resource argument) as a message; None if it holds no payload
    object to read."""
    if not isinstance(resolved, dict) or not isinstance(resolved.get("payload"), dict):
        return None
    payload = resolved["payload"]
    named = {header.member for header in presentation.headers} | {presentation.body}
    headers = [_header(h.label, payload[h.member]) for h in presentation.headers
               if h.member in payload]
    headers += [_header(member, value) for member, value in payload.items()
                if member not in named]
    body = payload.get(presentation.body) if presentation.body else None
    rest = {key: value for key, value in resolved.items() if key != "payload"}
    return MessageView(
        argument=argument, kind=kind, title=presentation.title, headers=tuple(headers),
        body=None if body is None else reveal(body if isinstance(body, str)
                                              else compact_json(body)),
        bookkeeping=tuple((path, compact_json(value))
                          for path, value in flatten(rest, argument)))


def parse_snapshot(canonical: str) -> dict[str, Any]:
    parsed = json.loads(canonical)
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def cancellation_outcome(operation_id: str | None, state: str | None, attempt: int) -> str:
    """What a cancellation did, for the page it returns to. `state` is the operation's after
    it; None when there is no operation (the action was withdrawn before any claim)."""
    if operation_id is None or state is None:
        return "Cancelled: the approval is revoked and the action will not run."
    if state == "claimed":
        return (f"Cancellation requested: attempt {attempt} is running and is asked to stop; "
                "what it answers is the outcome.")
    return f"Cancelled: operation {operation_id} is now {state}."


def duration(delta: timedelta) -> str:
    """`1 h 05 min`, `4 min 10 s`, `12 s`; negative durations read as `0 s`."""
    seconds = max(int(delta.total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"
