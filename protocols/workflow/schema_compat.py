"""Does a new JSON schema accept everything the old one did? (docs/design.md#extensions,
conservative).

`narrowings(old, new)` lists the ways `new` may refuse a value `old` accepted: a required member
added, a type dropped, a bound tightened, a pattern, format or enum changed, a closed object, a
member no longer allowed. Keywords it cannot compare (`anyOf`, `$ref`, ...) count as narrowing
when they differ, so "compatible" is only claimed when it is evident. Changing a `default`
also counts: defaults are materialized into the approved snapshot (docs/design.md#proposals).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

LOWER: Final = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")
UPPER: Final = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")
EXACT: Final = ("pattern", "format", "const", "multipleOf", "default", "uniqueItems",
                "contentEncoding", "contentMediaType")
HANDLED: Final = frozenset({"type", "properties", "required", "additionalProperties", "items",
                            "enum", *LOWER, *UPPER, *EXACT})
ANNOTATIONS: Final = frozenset({"title", "description", "examples", "$comment", "deprecated",
                                "readOnly", "writeOnly", "$schema", "$id"})


def narrowings(old: Mapping[str, object], new: Mapping[str, object], where: str) -> list[str]:
    """Reasons `new` is narrower than `old`; empty when it provably accepts all `old` did."""
    reasons: list[str] = []
    _compare(old, new, where, reasons, depth=0)
    return reasons


def _types(schema: Mapping[str, object]) -> frozenset[str] | None:
    value = schema.get("type")
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list):
        return frozenset(str(v) for v in value)
    return frozenset()


def _covered(old: frozenset[str], new: frozenset[str]) -> bool:
    return all(t in new or (t == "integer" and "number" in new) for t in old)


def _compare(old: object, new: object, path: str, out: list[str], depth: int) -> None:
    if old == new:
        return
    if new is True or new == {}:
        return  # accepts anything
    if not isinstance(old, Mapping) or not isinstance(new, Mapping) or depth > 32:
        out.append(f"{path}: schema changed")
        return
    old_types, new_types = _types(old), _types(new)
    if new_types is not None and (old_types is None or not _covered(old_types, new_types)):
        before = "any" if old_types is None else "|".join(sorted(old_types))
        out.append(f"{path}: type {before} -> {'|'.join(sorted(new_types))}")
    _objects(old, new, path, out, depth)
    if "items" in new and old.get("items") != new.get("items"):
        _compare(old.get("items", {}), new["items"], f"{path}[]", out, depth + 1)
    for key in LOWER:
        if key in new and _number(new[key]) > _number(old.get(key, float("-inf"))):
            out.append(f"{path}: {key} {old.get(key, 'unset')} -> {new[key]}")
    for key in UPPER:
        if key in new and _number(new[key]) < _number(old.get(key, float("inf"))):
            out.append(f"{path}: {key} {old.get(key, 'unset')} -> {new[key]}")
    for key in EXACT:
        if key in new and old.get(key) != new[key]:
            out.append(f"{path}: {key} {old.get(key, 'unset')!r} -> {new[key]!r}")
    if "enum" in new:
        old_enum, new_enum = old.get("enum"), new["enum"]
        if not isinstance(old_enum, list) or not isinstance(new_enum, list) or any(
                value not in new_enum for value in old_enum):
            out.append(f"{path}: enum narrowed")
    for key in sorted(set(new) - HANDLED - ANNOTATIONS):
        if old.get(key) != new[key]:
            out.append(f"{path}: {key} changed (not comparable; treated as narrowing)")


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else float("nan")


def _objects(old: Mapping[str, object], new: Mapping[str, object], path: str,
             out: list[str], depth: int) -> None:
    old_props = old.get("properties")
    new_props = new.get("properties")
    old_props = old_props if isinstance(old_props, Mapping) else {}
    new_props = new_props if isinstance(new_props, Mapping) else {}
    old_required = old.get("required")
    new_required = new.get("required")
    before = set(old_required) if isinstance(old_required, list) else set()
    after = set(new_required) if isinstance(new_required, list) else set()
    for name in sorted(after - before):
        out.append(f"{path}/{name}: now required")
    old_extra = old.get("additionalProperties", True)
    new_extra = new.get("additionalProperties", True)
    if new_extra is False and old_extra is not False:
        out.append(f"{path}: additional members are now refused")
    elif isinstance(new_extra, Mapping) and new_extra != old_extra and old_extra is not False:
        _compare(old_extra if isinstance(old_extra, Mapping) else {}, new_extra,
                 f"{path}/*", out, depth + 1)
    for name in sorted(old_props):
        if name in new_props:
            _compare(old_props[name], new_props[name], f"{path}/{name}", out, depth + 1)
        elif new_extra is False:
            out.append(f"{path}/{name}: no longer accepted")
        elif isinstance(new_extra, Mapping):
            _compare(old_props[name], new_extra, f"{path}/{name}", out, depth + 1)
    for name in sorted(set(new_props) - set(old_props)):
        if old_extra is False:
            continue  # was refused before: any acceptance now is a widening
        prior = old_extra if isinstance(old_extra, Mapping) else {}
        _compare(prior, new_props[name], f"{path}/{name}", out, depth + 1)
