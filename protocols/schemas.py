"""JSON schemas as the console reads them: compiled once, ECMA-262 patterns, mailbox formats,
and violations as pointers (docs/design.md#contracts, #console).

Split out of `protocols.contracts`, which re-exports `compile_schema` and `schema_errors` for
its callers: a contract's input and output types are compiled and reported through here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema
import referencing
from jsonschema.exceptions import FormatError, SchemaError, ValidationError

from protocols.addresses import AddressError, is_mailbox
from protocols.denials import ELLIPSIS
from protocols.patterns import PatternError, compile_pattern


def compile_schema(schema: Mapping[str, Any]) -> Any:
    """A validator compiled once. An empty registry: a schema's $ref never fetches a URL.

    What a value must be is what the operator will read it as (docs/design.md#console):

    - `pattern` has its ECMA-262 meaning (`protocols.patterns`): `$` is the end of the text, so
      `^[A-Z]{3}$` refuses `"EUR\\n"`, and `\\d` is `[0-9]`. A pattern that cannot have that
      meaning is a `SchemaError` here, never a surprise at validation;
    - `format: "mailbox"` is one plain address (`protocols.addresses`), and so are `email` and
      `idn-email`, whose built-in check only looks for an `@`. A refusal says why.
    """
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    for pattern in _patterns(schema):
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            raise SchemaError(str(exc)) from None
    cls = _strict(base)
    return cls(schema, registry=referencing.Registry(), format_checker=cls.FORMAT_CHECKER)


# Keywords whose values are data, not subschemas: a "pattern" member there is not a pattern.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})


def _patterns(schema: Any) -> list[str]:
    if isinstance(schema, list):
        return [p for item in schema for p in _patterns(item)]
    if not isinstance(schema, Mapping):
        return []
    found = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
    for key, value in schema.items():
        if key not in _DATA_KEYWORDS:
            found.extend(_patterns(value))
    return found


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _search(pattern: str, instance: str) -> bool:
    try:
        return compile_pattern(pattern).search(instance) is not None
    except PatternError:
        return False  # unreachable after compile_schema's check; refuse rather than pass


def _format_keyword(validator: Any, fmt: str, instance: Any, schema: Any) -> Any:
    if validator.format_checker is None:
        return
    try:
        validator.format_checker.check(instance, fmt)
    except FormatError as error:
        reason = f": {error.cause}" if isinstance(error.cause, AddressError) else ""
        yield ValidationError(error.message + reason, cause=error.cause)


@functools.cache
def _strict(base: Any) -> Any:
    """`base` (a draft's validator class) with the pattern and format semantics above."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {**base.FORMAT_CHECKER.checkers,
                        **dict.fromkeys(ADDRESS_FORMATS, (is_mailbox, AddressError))}
    return jsonschema.validators.extend(
        base, {"pattern": _pattern_keyword, "format": _format_keyword}, format_checker=checker)


ADDRESS_FORMATS = ("mailbox", "email", "idn-email")


def schema_errors(validator: Any, instance: Any, *, root: str) -> list[dict[str, str]]:
    """Violations as `{"pointer","message"}`, sorted; pointers start at `root`.

    A missing member is reported at its own place (`/arguments/to`), an extra one too.
    """
    errors: list[dict[str, str]] = []
    for error in validator.iter_errors(instance):
        base = root + "".join("/" + escape_pointer(str(p)) for p in error.absolute_path)
        found = error.instance
        if error.validator == "required" and isinstance(found, dict):
            errors.extend(
                {"pointer": f"{base}/{escape_pointer(name)}", "message": "is required"}
                for name in error.validator_value
                if name not in found
            )
        elif error.validator == "additionalProperties" and isinstance(found, dict):
            known = set(error.schema.get("properties", {}))
            errors.extend(
                {"pointer": f"{base}/{escape_pointer(name)}", "message": "is not allowed"}
                for name in sorted(set(found) - known)
            )
        else:
            errors.append({"pointer": base, "message": _quoting_less(error.message, found)})
    # jsonschema reports `required` once per missing member, each time with the whole list.
    unique = {(e["pointer"], e["message"]): e for e in errors}
    return [unique[k] for k in sorted(unique)]


#: How much of a value an error message quotes (characters of its repr).
MAX_QUOTED = 64


def _quoting_less(message: str, instance: Any) -> str:
    """`message` with its quote of `instance` (jsonschema quotes the repr) cut to `MAX_QUOTED`
    characters and an ellipsis: `'xxxx…' is too long` says what the value began with and what
    is wrong with it, whatever its length."""
    shown = repr(instance)
    if len(shown) <= MAX_QUOTED or shown not in message:
        return message
    short = (repr(instance[:MAX_QUOTED - 3] + ELLIPSIS) if isinstance(instance, str)
             else shown[:MAX_QUOTED - 1] + ELLIPSIS)
    return message.replace(shown, short)


def escape_pointer(token: str) -> str:
    """A JSON-pointer token (RFC 6901): `~` and `/` escaped."""
    return token.replace("~", "~0").replace("/", "~1")
