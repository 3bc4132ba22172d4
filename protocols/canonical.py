"""The canonical encoding `canon/1`, digests, the strict request parser and default materializer.

`canon/1` (docs/design.md#digest, #canonical-encoding) is RFC 8785 JSON Canonicalization Scheme
(JCS) output, UTF-8, of a *tag-expanded* value:

- object keys sorted by their UTF-16 code units (RFC 8785 §3.2.3), array order kept;
- numbers in ECMAScript form (RFC 8785 §3.2.2.3), so one encoding per number: `1.0` is `1`,
  `-0.0` is `0`; NaN and infinities are refused;
- integers beyond the IEEE 754 safe range (|n| > 2**53 - 1) become `{"$int": "<digits>"}`, and
  so do floats from 2**53 up to (not including) 1e21, with their exact integer value: JCS would
  write those as bare integer literals that re-parse as unsafe integers. So the output never holds
  a bare integer outside the safe range (I-JSON, RFC 7493 §2.2), and re-parsing canonical bytes
  with `parse_json` gives a value with the same encoding. Floats from 1e21 keep the JCS exponent
  form (`1e+30`), which re-parses as the same float;
- `decimal.Decimal` becomes `{"$decimal": "<plain digits>"}`, normalized so that equal decimals
  have one encoding (`10`, `10.0`, `10.00`, `1E+1` are all `{"$decimal":"10"}`);
- keys beginning with `$` are reserved for these tags and refused in input, so a tag can never be
  forged by data; strings (keys and values) must be valid Unicode (no lone surrogates).

Invariants: `canonicalize` is a pure function of the value (dict insertion order is irrelevant);
two accepted values have equal bytes exactly when they are equal as JSON data, numbers compared
by value within each kind: bare JSON number, `$int`, `$decimal` (so `1` and `1.0` share bytes,
`Decimal(1)` does not, nor do the float `1e21` and the int `10**21`); `parse_json` of canonical
bytes without tags canonicalizes to the same bytes; every refusal is a `CanonicalizationError`
carrying the RFC 6901 pointer of the offending value. Number formatting, string escaping and key
sorting are done by the `rfc8785` package; this module only validates, tags and hashes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

import rfc8785

__all__ = [
    "CANON_VERSION",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "CanonicalizationError",
    "canonicalize",
    "digest",
    "digest_bytes",
    "materialize_defaults",
    "parse_json",
]

CANON_VERSION: Final = "canon/1"
#: Containers nested deeper than this are refused (bounded recursion on hostile input).
MAX_DEPTH: Final = 128
#: `$int` and `$decimal` carry at most this many digits (CPython's default int/str limit).
MAX_DIGITS: Final = 4300

_SAFE_INT: Final = 2**53 - 1  # RFC 8785 §3.2.2.3 / I-JSON: integers exact in a double
_INT_LIMIT: Final = 10**MAX_DIGITS
_EXPONENT_FORM: Final = 1e21  # ECMAScript writes numbers from here on with an exponent
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_TAG_PREFIX: Final = "$"

_Json = None | bool | int | float | str | list["_Json"] | dict[str, "_Json"]


class CanonicalizationError(ValueError):
    """A value or a JSON text that `canon/1` refuses.

    `pointer` is the RFC 6901 JSON pointer of the offending value from the root (`""` is the root
    itself); `reason` says what is wrong. A key that cannot be written in a pointer (not a string,
    or holding a lone surrogate) is reported at the object that holds it.
    """

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(pointer, reason)
        self.pointer = pointer
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.pointer or '(root)'}: {self.reason}"


def _member(pointer: str, key: str | int) -> str:
    """The pointer of a member or element, escaping `~` and `/` (RFC 6901 §3)."""
    return f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _check_text(text: str, pointer: str, what: str) -> None:
    found = _SURROGATE.search(text)
    if found is not None:
        raise CanonicalizationError(pointer, f"{what} holds a lone surrogate U+{ord(found[0]):04X}")


def _type_name(value: object) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _non_finite_reason(*, nan: bool, negative: bool) -> str:
    if nan:
        return "NaN is not allowed"
    return "-Infinity is not allowed" if negative else "Infinity is not allowed"


def _plain_decimal(value: Decimal, pointer: str) -> str:
    """Plain notation of a finite decimal: no exponent, no trailing fractional zeros, -0 is 0.

    Exact (no context precision or rounding applies): equal decimals give equal text.
    """
    sign, digit_tuple, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # "n", "N" or "F": callers pass finite decimals only
        raise CanonicalizationError(pointer, "decimal is not finite")
    coefficient = "".join(map(str, digit_tuple)).lstrip("0")
    if not coefficient:
        return "0"
    stripped = coefficient.rstrip("0")
    exponent += len(coefficient) - len(stripped)
    coefficient = stripped
    point = len(coefficient) + exponent  # digits before the decimal point
    width = max(point, 1) + max(len(coefficient) - point, 0)
    if width > MAX_DIGITS:
        raise CanonicalizationError(pointer, f"decimal has more than {MAX_DIGITS} digits")
    if exponent >= 0:
        text = coefficient + "0" * exponent
    elif point > 0:
        text = f"{coefficient[:point]}.{coefficient[point:]}"
    else:
        text = f"0.{'0' * -point}{coefficient}"
    return f"-{text}" if sign else text


def _expand(value: object, pointer: str, depth: int) -> _Json:
    """Validate `value` and return its tag-expanded plain JSON form (see the module docstring)."""
    if isinstance(value, list | dict):
        if depth >= MAX_DEPTH:
            raise CanonicalizationError(pointer, f"nesting deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            return [_expand(item, _member(pointer, i), depth + 1) for i, item in enumerate(value)]
        return _expand_object(value, pointer, depth)
    if isinstance(value, str):
        _check_text(value, pointer, "string")
        return str.__str__(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        return _expand_number(value, pointer)
    raise CanonicalizationError(pointer, f"unsupported type {_type_name(value)}")


def _expand_object(value: dict[Any, Any], pointer: str, depth: int) -> _Json:
    result: dict[str, _Json] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise CanonicalizationError(
                pointer, f"object keys must be strings, not {_type_name(key)} ({key!r})")
        _check_text(key, pointer, f"object key {key!r}")
        if key.startswith(_TAG_PREFIX):
            raise CanonicalizationError(
                _member(pointer, key), 'keys beginning with "$" are reserved for type tags')
        result[str.__str__(key)] = _expand(item, _member(pointer, key), depth + 1)
    return result


def _expand_number(value: float | Decimal, pointer: str) -> _Json:
    if isinstance(value, Decimal):
        if not value.is_finite():
            reason = _non_finite_reason(nan=value.is_nan(), negative=value.is_signed())
            raise CanonicalizationError(pointer, reason)
        return {"$decimal": _plain_decimal(value, pointer)}
    if isinstance(value, float):
        if not math.isfinite(value):
            reason = _non_finite_reason(nan=math.isnan(value), negative=value < 0)
            raise CanonicalizationError(pointer, reason)
        if not _SAFE_INT < abs(value) < _EXPONENT_FORM:
            return float(value)  # rfc8785 writes -0.0 as 0 (RFC 8785 §3.2.2.3)
    number = int(value)  # exact: every float beyond 2**53 is an integer
    if -_SAFE_INT <= number <= _SAFE_INT:
        return number
    if abs(number) >= _INT_LIMIT:
        raise CanonicalizationError(pointer, f"integer has more than {MAX_DIGITS} digits")
    return {"$int": str(number)}


def canonicalize(value: object) -> bytes:
    """Encode `value` in `canon/1` (docs/design.md#canonical-encoding): UTF-8 JCS bytes of the
    tagged value.

    Accepts None, bool, int, float, str, `Decimal`, list and dict with str keys (subclasses are
    encoded as their base value, so a `StrEnum` member is its string). Refuses non-finite numbers,
    lone surrogates, `$`-prefixed keys, nesting deeper than `MAX_DEPTH`, tags of more than
    `MAX_DIGITS` digits and every other type, with `CanonicalizationError`.
    """
    expanded = _expand(value, "", 0)
    try:
        return rfc8785.dumps(expanded)
    except rfc8785.CanonicalizationError as error:  # unreachable after _expand: a backstop
        raise CanonicalizationError("", str(error)) from error


def digest_bytes(data: bytes) -> str:
    """`sha256:` and the 64 lowercase hex digits of SHA-256 over `data` (docs/design.md#digest)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest(value: object) -> str:
    """The digest of the canonical bytes of `value`: `digest_bytes(canonicalize(value))`."""
    return digest_bytes(canonicalize(value))


class _Refused:
    """A parsed token that the post-walk refuses once its pointer is known."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Pairs:
    """An object as parsed: its members in document order, duplicates kept."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def _parse_constant(name: str) -> _Refused:
    return _Refused(f"{name} is not allowed")


def _parse_float(text: str) -> float | _Refused:
    number = float(text)
    return number if math.isfinite(number) else _Refused(f"number {text} is out of range")


def _parse_int(text: str) -> int | _Refused:
    if len(text.lstrip("-")) > MAX_DIGITS:
        return _Refused(f"integer has more than {MAX_DIGITS} digits")
    return int(text)


def _thaw(node: Any, pointer: str, depth: int) -> Any:
    """Turn the parser's output into plain values, refusing with the pointer of the first problem
    in document order."""
    if isinstance(node, _Refused):
        raise CanonicalizationError(pointer, node.reason)
    if isinstance(node, str):
        _check_text(node, pointer, "string")
        return node
    if isinstance(node, list | _Pairs) and depth >= MAX_DEPTH:
        raise CanonicalizationError(pointer, f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(node, list):
        return [_thaw(item, _member(pointer, i), depth + 1) for i, item in enumerate(node)]
    if isinstance(node, _Pairs):
        result: dict[str, Any] = {}
        for key, item in node.pairs:
            _check_text(key, pointer, f"object key {key!r}")
            if key in result:
                raise CanonicalizationError(_member(pointer, key), f"duplicate key {key!r}")
            result[key] = _thaw(item, _member(pointer, key), depth + 1)
        return result
    return node


def parse_json(data: bytes | str) -> Any:
    """Parse a request body strictly (docs/design.md#denials `malformed_request`).

    Refuses invalid UTF-8 (bytes are decoded as UTF-8 only, a BOM included as text, which JSON
    refuses), syntax errors, `NaN`/`Infinity`/`-Infinity`, numbers that overflow a double,
    integers of more than `MAX_DIGITS` digits, duplicate keys (pointer of the second member), lone
    surrogates in keys or strings, and nesting deeper than `MAX_DEPTH`. Integers parse to `int`,
    other numbers to `float`. Every refusal is a `CanonicalizationError`; the pointer is `""` when
    the text cannot be parsed at all.
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CanonicalizationError("", f"invalid UTF-8 at byte {error.start}") from None
    else:
        text = data
    try:
        parsed = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_constant=_parse_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
        )
    except json.JSONDecodeError as error:
        raise CanonicalizationError("", f"invalid JSON: {error}") from None
    except RecursionError:
        raise CanonicalizationError("", f"nesting deeper than {MAX_DEPTH} levels") from None
    return _thaw(parsed, "", 0)


def materialize_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Return a copy of `value` with JSON Schema `default`s filled in (docs/design.md#permits:
    defaults are expanded before approval).

    For an object value, every member of `properties` that is missing and declares a `default`
    gets a deep copy of it; then every member with a subschema is materialized in turn (defaults
    included, so a default `{}` receives its own nested defaults). For an array value, `items`
    (a schema object) applies to every element. Nothing else (`$ref`, `allOf`, ...) is followed.
    The input is never mutated and the result shares no container with the input or the schema.
    """
    result = copy.deepcopy(value)
    _fill(schema, result)
    return result


def _fill(schema: Mapping[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            for name, subschema in properties.items():
                if not isinstance(subschema, Mapping):
                    continue
                if name not in value and "default" in subschema:
                    value[name] = copy.deepcopy(subschema["default"])
                if name in value:
                    _fill(subschema, value[name])
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for element in value:
                _fill(items, element)
