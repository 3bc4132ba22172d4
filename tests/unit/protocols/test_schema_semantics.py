"""`compile_schema`: patterns with their ECMA-262 meaning everywhere, and strict address formats."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from demo.contracts import EMAIL_DRAFT_KIND, payments_transfer
from protocols.schemas import MAX_QUOTED, compile_schema, schema_errors


def errors(schema: dict[str, Any], instance: Any) -> list[dict[str, str]]:
    return schema_errors(compile_schema(schema), instance, root="")


@pytest.mark.parametrize("fmt", ["mailbox", "email", "idn-email"])
def test_address_formats_refuse_what_is_not_one_plain_address(fmt: str) -> None:
    schema = {"type": "array", "items": {"type": "string", "format": fmt}}
    found = errors(schema, ["ok@example.com", "Eve <eve@x.example>", "a@example.com\n"])
    assert [e["pointer"] for e in found] == ["/1", "/2"]
    assert "display name" in found[0]["message"]
    assert "U+000A" in found[1]["message"]


def test_other_formats_keep_their_messages() -> None:
    [error] = errors({"type": "string", "format": "date"}, "2026-13-01")
    assert error["message"] == "'2026-13-01' is not a 'date'"


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [({"type": "string", "pattern": "^a$"}, "a", "a\n"),
     ({"type": "array", "items": {"pattern": "^a$"}}, ["a"], ["a\n"]),
     ({"type": "object", "properties": {"p": {"pattern": "^a$"}}}, {"p": "a"}, {"p": "a\n"}),
     ({"type": "object", "propertyNames": {"pattern": "^a$"}}, {"a": 1}, {"a\n": 1}),
     ({"anyOf": [{"pattern": "^a$"}, {"pattern": "^b$"}]}, "b", "b\n")],
    ids=["top", "items", "properties", "property-names", "any-of"],
)
def test_every_pattern_refuses_a_trailing_newline(
    schema: dict[str, Any], good: Any, bad: Any,
) -> None:
    assert errors(schema, good) == []
    assert errors(schema, bad)


@pytest.mark.parametrize(
    "schema",
    [{"pattern": "(?x)a $"}, {"properties": {"p": {"pattern": "(?x)a"}}},
     {"items": [{"pattern": "(?u)a"}]} | {"$schema": "http://json-schema.org/draft-07/schema#"}],
)
def test_pattern_without_a_json_schema_meaning_is_refused_when_compiled(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(SchemaError):
        compile_schema(schema)


def test_pattern_shaped_data_is_not_compiled() -> None:
    schema = {"enum": [{"pattern": "(?x)a"}], "default": {"pattern": "(?x)"}}
    assert errors(schema, {"pattern": "(?x)a"}) == []


def test_demo_transfer_refuses_newline_terminated_codes() -> None:
    contract = payments_transfer("fp")
    arguments = {"from_account": "acct-001\n", "to_account": "acct-999", "amount": "1",
                 "currency": "EUR\n"}
    assert [e["pointer"] for e in contract.schema_errors(arguments)] == [
        "/arguments/currency", "/arguments/from_account"]


@pytest.mark.parametrize(
    ("subject", "refused"),
    [("Refund", False), ("Refund\tnow", False), ("Erstattung für Sie ✓", False),
     ("Refund\n", True), ("Refund\r\nBcc: x@evil.example", True), ("Re\x00fund", True),
     ("Re\x7ffund", True), ("Re\x85fund", True)],
)
def test_demo_subject_is_one_header_line(subject: str, refused: bool) -> None:
    payload = {"from": "a@example.com", "to": ["b@example.com"], "subject": subject, "body": ""}
    found = errors(dict(EMAIL_DRAFT_KIND.payload_schema), payload)
    assert [e["pointer"] for e in found] == (["/subject"] if refused else [])


@pytest.mark.parametrize(("schema", "instance", "says"), [
    ({"type": "string", "maxLength": 5}, "y" * 10_000, "is too long"),
    ({"type": "string", "pattern": "^x$"}, "y" * 10_000, "does not match '^x$'"),
    ({"type": "string", "format": "date"}, "y" * 10_000, "is not a 'date'"),
    ({"type": "string"}, {"k": "v" * 10_000}, "is not of type 'string'"),
    ({"enum": ["a", "b"]}, ["y" * 10_000], "is not one of ['a', 'b']"),
], ids=["max-length", "pattern", "format", "type", "enum"])
def test_a_quoted_value_is_cut_and_the_message_kept(
    schema: dict[str, Any], instance: Any, says: str,
) -> None:
    [error] = errors(schema, instance)
    assert error["message"].endswith(says)
    quoted = error["message"].removesuffix(says)
    assert "…" in quoted
    assert len(quoted) <= MAX_QUOTED + 1


def test_a_short_value_is_quoted_whole() -> None:
    [error] = errors({"type": "string", "maxLength": 2}, "y" * 40)
    assert error["message"] == f"'{'y' * 40}' is too long"
