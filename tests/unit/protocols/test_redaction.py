"""Secret redaction before the audit: nested, case-insensitive substrings, input untouched."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from protocols.redaction import MASKED, REDACTED, mask_values, redact, string_values

FIELDS = ["password", "secret", "token", "api_key", "authorization"]


@pytest.mark.parametrize(
    "key",
    ["password", "PASSWORD", "Password", "db_password", "passwordHash", "client_secret",
     "SECRET_KEY", "token", "access_token", "Bearer-Token", "api_key", "stripe_api_key",
     "API_KEY_ID", "Authorization", "proxy-authorization"],
)
def test_matching_key_is_redacted(key: str) -> None:
    assert redact({key: "hunter2", "subject": "hello"}, FIELDS) == {
        key: REDACTED, "subject": "hello"}


@pytest.mark.parametrize("key", ["subject", "to", "amount", "apikey", "pass", "tok", "author"])
def test_other_keys_are_kept(key: str) -> None:
    assert redact({key: "value"}, FIELDS) == {key: "value"}


def test_nested_dicts_and_lists_are_redacted() -> None:
    value = {
        "arguments": {
            "draft": {"payload": {"body": "hi", "smtp": {"password": "p", "host": "h"}}},
            "headers": [{"Authorization": "Bearer abc", "Accept": "json"},
                        [{"api_key": "k"}, "plain"]],
        },
        "tokens": ["a", "b"],
        "count": 3,
    }
    assert redact(value, FIELDS) == {
        "arguments": {
            "draft": {"payload": {"body": "hi", "smtp": {"password": REDACTED, "host": "h"}}},
            "headers": [{"Authorization": REDACTED, "Accept": "json"},
                        [{"api_key": REDACTED}, "plain"]],
        },
        "tokens": REDACTED,
        "count": 3,
    }


def test_a_matching_key_hides_its_whole_subtree() -> None:
    assert redact({"secret": {"a": 1, "b": [1, 2]}}, FIELDS) == {"secret": REDACTED}


def test_values_are_never_matched_only_keys() -> None:
    assert redact({"note": "my password is hunter2"}, FIELDS) == {
        "note": "my password is hunter2"}


def test_field_names_match_case_insensitively() -> None:
    assert redact({"x_token": 1}, ["TOKEN"]) == {"x_token": REDACTED}


def test_non_string_keys_are_compared_as_strings() -> None:
    assert redact({1: "a", "2token": "b"}, FIELDS) == {1: "a", "2token": REDACTED}


@pytest.mark.parametrize("value", ["plain", 3, 2.5, None, True, [], {}])
def test_scalars_and_empty_containers_are_returned_unchanged(value: Any) -> None:
    assert redact(value, FIELDS) == value


def test_input_is_not_mutated() -> None:
    value = {"password": "p", "nested": {"token": "t", "list": [{"secret": "s"}]}}
    before = copy.deepcopy(value)
    result = redact(value, FIELDS)
    assert value == before
    assert result is not value
    assert result["nested"] is not value["nested"]
    assert result["nested"]["list"] is not value["nested"]["list"]
    assert result["nested"]["list"][0] is not value["nested"]["list"][0]


def test_no_fields_redact_nothing() -> None:
    value = {"password": "p", "a": [{"token": "t"}]}
    assert redact(value, []) == value


def test_fields_may_be_any_iterable() -> None:
    assert redact({"token": "t"}, iter(["token"])) == {"token": REDACTED}


def test_secrets_inside_tuples_are_redacted() -> None:
    """Audit details are built in Python; a tuple is stored as a JSON array like a list."""
    assert redact({"calls": ({"api_key": "k"},)}, FIELDS) in (
        {"calls": ({"api_key": REDACTED},)}, {"calls": [{"api_key": REDACTED}]})


# --- values quoted in text: masked before the audit (docs/design.md#audit, no payloads) -----------

def test_every_string_value_quoted_in_text_is_masked() -> None:
    arguments = {"draft": {"payload": {"to": ["ada@example.com"], "subject": "Refund 42",
                                       "cc": []}}, "amount": "10.00", "count": 7}
    text = "recipients refused at RCPT: {'ada@example.com': (550, b'no')} re Refund 42"
    assert mask_values(text, string_values(arguments)) == (
        f"recipients refused at RCPT: {{'{MASKED}': (550, b'no')}} re {MASKED}")


def test_the_longest_value_is_masked_first() -> None:
    """A value inside a longer one never leaves the rest of the longer one behind."""
    assert mask_values("to bob@example.com.au", ["bob@example.com", "bob@example.com.au"]) \
        == f"to {MASKED}"


def test_short_values_and_non_strings_are_not_values_to_mask() -> None:
    """Too short to identify anything, and masking them would mangle ordinary words."""
    assert sorted(string_values({"currency": "EUR", "memo": "", "n": 1234, "ok": True,
                                 "to": ["abcd"]})) == ["abcd"]
    assert mask_values("bank answered 500 for EUR", string_values({"c": "EUR"})) == (
        "bank answered 500 for EUR")


def test_text_without_a_value_is_unchanged() -> None:
    assert mask_values("no outcome within the contract timeout of 15s",
                       string_values({"to": "ada@example.com"})) == (
        "no outcome within the contract timeout of 15s")
    assert mask_values("", ["ada@example.com"]) == ""
