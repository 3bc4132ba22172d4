"""Strict request fields: JSON types are never coerced (`"1"` is not an integer, `1` is not a
string, `"true"` is not a boolean), and unknown members of a body are refused.

Strings anywhere in a body may not hold U+0000: PostgreSQL cannot store it in text or jsonb, so
it is refused on every database alike, with the pointer of the offending value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import MAXYEAR, UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dispatch.api.exceptions import pointer_of, validation_errors
from dispatch.services.proposals import EXECUTION_ID, EXECUTION_ID_RULE, EXECUTION_ID_SHAPE
from protocols.denials import Denial, DenialCode
from protocols.expiry import TOO_LATE
from protocols.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

NUL = "\x00"


class StrictCharField(serializers.CharField):
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {"invalid": "must be a string"}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: JSONValue) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return data


class IdField(StrictCharField):
    """An id, or a name, that selects a record: any string at all. One that names nothing
    visible is the service's `not_found`, whatever its length or shape (docs/design.md#denials);
    only a non-string is refused here."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)


@extend_schema_field({"type": "string", "pattern": f"^{EXECUTION_ID_SHAPE}$"})
class ExecutionIdField(StrictCharField):
    """Groups the proposals of one run; fully matched (no trailing newline slips through)."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": EXECUTION_ID_RULE.replace("{", "{{").replace("}", "}}")}

    def to_internal_value(self, data: JSONValue) -> str:
        if not isinstance(data, str) or not EXECUTION_ID.fullmatch(data):
            self.fail("invalid")
        return data


class StrictIntegerField(serializers.IntegerField):
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {"invalid": "must be an integer"}

    def to_internal_value(self, data: JSONValue) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class StrictBooleanField(serializers.BooleanField):
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {"invalid": "must be true or false"}

    def to_internal_value(self, data: JSONValue) -> bool:
        if data is True or data is False:
            return data
        self.fail("invalid")
        raise AssertionError  # unreachable: fail() raises


class StrictDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time with an explicit offset, returned in UTC; one after the last
    instant a datetime can hold (a five-digit year, or an offset past 9999-12-31) says so."""

    #: A year of five digits or more (ISO 8601 expanded years), later than any datetime.
    EXPANDED_YEAR = re.compile(r"\+?[0-9]{5,}-")
    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": "must be an ISO 8601 date and time with an offset, such as "
                   "2030-01-01T00:00:00Z",
        "too_late": TOO_LATE,
    }

    def to_internal_value(self, value: JSONValue) -> datetime:
        if not isinstance(value, str) or len(value) > 64:
            self.fail("invalid")
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            self.fail("too_late" if self.EXPANDED_YEAR.match(value) else "invalid")
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail("invalid")
        try:
            return parsed.astimezone(UTC)
        except OverflowError:  # the offset carries it past one end of the calendar
            self.fail("too_late" if parsed.year == MAXYEAR else "invalid")
        raise AssertionError  # unreachable: fail() raises


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JsonObjectField(serializers.JSONField):
    """Any JSON object; checked for U+0000 in keys and strings, refused at its own pointer."""

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {"invalid": "must be an object"}

    def to_internal_value(self, data: JSONValue) -> JSONObject:
        if not isinstance(data, dict):
            self.fail("invalid")
        problem = _find_nul(data)
        if problem is not None:
            path, message = problem
            detail: Any = [message]
            for token in reversed(path):
                detail = {token: detail}
            raise serializers.ValidationError(detail)
        return data


def _find_nul(value: JSONValue) -> tuple[list[str | int], str] | None:
    """The path of the first string holding U+0000, and what is wrong there."""
    if isinstance(value, str):
        return ([], "must not contain U+0000") if NUL in value else None
    items: list[tuple[str | int, JSONValue]]
    if isinstance(value, Mapping):
        if any(NUL in key for key in value):
            return [], "object keys must not contain U+0000"
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return None
    for key, item in items:
        found = _find_nul(item)
        if found is not None:
            return [key, *found[0]], found[1]
    return None


class StrictInputSerializer(serializers.Serializer[JSONObject]):
    """A request body: an object with exactly the declared members, types never coerced.

    Its errors, unknown members included, are raised as one `schema_invalid` denial.
    """

    default_error_messages: ClassVar[dict[str, StrOrPromise]] = {
        "invalid": "the body must be a JSON object",
        "null": "the body must be a JSON object",
    }

    def to_internal_value(self, data: JSONValue) -> JSONValue:
        extra = sorted(set(data) - set(self.fields)) if isinstance(data, Mapping) else []
        errors: list[dict[str, str]] = []
        value = None
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not isinstance(exc.detail, dict):
                raise
            errors = list(validation_errors(exc.detail))
        if errors or extra:
            # Straight to the denial, which keeps 50: a body of 100,000 unknown members must
            # not become 100,000 DRF error objects first.
            errors.extend({"pointer": pointer_of(name), "message": "is not allowed"}
                          for name in extra)
            raise Denial(DenialCode.SCHEMA_INVALID,
                         errors=sorted(errors, key=lambda e: e["pointer"]))
        return value
