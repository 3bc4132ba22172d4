"""What changed between two versions of an action, leaf by leaf, for the "changed" badge.

Pure: no database, no Django. Objects are compared member by member down to their leaves
(dotted paths); a list is compared as a collection of items, so that a recipient added to `cc`
reads `cc: + exfil@evil.example` rather than "cc changed". A resolved resource reference of a
snapshot (`{"id","revision","digest","payload"}`) is compared by its payload: its bookkeeping
moves with every revision and says nothing about what the action does (`comparable`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from console.presenters import reveal
from protocols.addresses import AddressError, parse_mailbox

# The members of a resolved resource reference that only say which revision it is.
BOOKKEEPING = frozenset({"id", "revision", "digest", "read"})
# A value longer than this is named, not quoted, in a badge; the page shows it whole.
QUOTED = 60


@dataclass(frozen=True)
class FieldChange:
    """One change: at `field` (a dotted path), an `added` or `removed` member or list item
    (`value`), or a `changed` leaf (`old` to `value`); `reordered` for a list whose items are
    the same in another order. `recipient`: what was added or now stands there is an email
    address, which the console shows so that it cannot be missed."""

    field: str
    change: str  # "added" | "removed" | "changed" | "reordered"
    value: str | None = None
    old: str | None = None
    recipient: bool = False

    @property
    def label(self) -> str:
        """`cc: + exfil@evil.example`, `cc: − a@example.com`, `subject changed`."""
        if self.change in ("added", "removed") and self.value is not None:
            sign = "+" if self.change == "added" else "−"
            return f"{self.field}: {sign} {_quoted(self.value)}"
        if self.change == "changed" and self.recipient and self.value is not None:
            return f"{self.field}: now {_quoted(self.value)}"
        return f"{self.field} {self.change}"


def _quoted(text: str) -> str:
    return text if len(text) <= QUOTED else text[: QUOTED - 1] + "…"


def _shown(value: Any) -> str:
    """A value as a badge shows it, its invisible format characters revealed (`reveal`)."""
    if isinstance(value, str):
        return reveal(value)
    return reveal(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _key(value: Any) -> str:
    """Items compare by their JSON encoding (`1` and `true` differ, key order does not)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def is_address(value: Any) -> bool:
    if not isinstance(value, str) or "@" not in value:
        return False
    try:
        parse_mailbox(value)
    except AddressError:
        return False
    return True


def field_changes(old: Any, new: Any, prefix: str = "") -> list[FieldChange]:
    """Every difference from `old` to `new`, in `new`'s member order, removed members last."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[FieldChange] = []
        for name, value in new.items():
            path = f"{prefix}.{name}" if prefix else str(name)
            if name in old:
                changes.extend(field_changes(old[name], value, path))
            else:
                changes.extend(_whole(path, "added", value))
        for name, value in old.items():
            if name not in new:
                changes.extend(_whole(f"{prefix}.{name}" if prefix else str(name), "removed",
                                      value))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        return _list_changes(prefix, old, new)
    if _key(old) == _key(new):
        return []
    return [FieldChange(prefix or "value", "changed", value=_shown(new), old=_shown(old),
                        recipient=is_address(new))]


def _whole(path: str, change: str, value: Any) -> list[FieldChange]:
    """A member added or removed whole: each of its list items or leaves is named."""
    if isinstance(value, dict) and value:
        return [c for name, item in value.items()
                for c in _whole(f"{path}.{name}", change, item)]
    if isinstance(value, list) and value:
        return [FieldChange(path, change, value=_shown(item),
                            recipient=change == "added" and is_address(item)) for item in value]
    return [FieldChange(path, change, value=_shown(value),
                        recipient=change == "added" and is_address(value))]


def _list_changes(path: str, old: list[Any], new: list[Any]) -> list[FieldChange]:
    """Items added and removed (counted, so a duplicate added is seen), else `reordered`."""
    field = path or "value"
    before = Counter(_key(item) for item in old)
    after = Counter(_key(item) for item in new)
    added, removed = after - before, before - after
    changes: list[FieldChange] = []
    for item in new:
        if added[_key(item)]:
            added[_key(item)] -= 1
            changes.append(FieldChange(field, "added", value=_shown(item),
                                       recipient=is_address(item)))
    for item in old:
        if removed[_key(item)]:
            removed[_key(item)] -= 1
            changes.append(FieldChange(field, "removed", value=_shown(item)))
    if not changes and [_key(i) for i in old] != [_key(i) for i in new]:
        changes.append(FieldChange(field, "reordered"))
    return changes


def comparable(value: Any) -> Any:
    """A snapshot's arguments with each resolved resource reference replaced by what it holds:
    its payload's members, and its other members but the bookkeeping (a report's `links`, each
    by its own payload in turn)."""
    if isinstance(value, dict):
        if "payload" in value and {"id", "revision"} <= value.keys():
            payload = value["payload"]
            rest = {k: comparable(v) for k, v in value.items()
                    if k not in BOOKKEEPING and k != "payload"}
            if isinstance(payload, dict):
                return {**rest, **{k: comparable(v) for k, v in payload.items()}}
            return {**rest, "payload": comparable(payload)}
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value
