"""What the approval page shows beside the snapshot: address rows, and no invisible character."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.presenters import (
    AddressView,
    address_views,
    compact_json,
    paragraphs,
    pretty_json,
)


def test_internationalized_addresses_are_listed_with_both_forms() -> None:
    arguments = {"draft": {"payload": {
        "from": "support@acme.example", "subject": "Ihre Bestellung bei bücher.example",
        "to": ["customer@example.com", "kunde@bücher.example", "billing@p\u0430ypal.example"],
        "cc": ["x@xn--bcher-kva.example"]}}}
    assert address_views(arguments) == [
        AddressView("draft.payload.to[1]", "kunde@bücher.example", "kunde@bücher.example",
                    "kunde@xn--bcher-kva.example", ()),
        AddressView("draft.payload.to[2]", "billing@p\u0430ypal.example",
                    "billing@p\u0430ypal.example", "billing@xn--pypal-4ve.example",
                    (("p\u0430ypal", "Cyrillic and Latin"),)),
        AddressView("draft.payload.cc[0]", "x@xn--bcher-kva.example", "x@bücher.example",
                    "x@xn--bcher-kva.example", ()),
    ]


def test_plain_and_unparseable_values_are_left_out() -> None:
    assert address_views({"to": ["a@example.com"], "n": 5, "s": "not an address",
                          "l": [1, None], "bad": "Eve <eve@bücher.example>"}) == []


# --- invisible characters in what the page shows ---------------------------------------------

json_text = st.text(st.characters(codec="utf-8"), max_size=30)


@given(st.dictionaries(json_text, json_text, max_size=4))
def test_pretty_snapshot_is_the_same_json_with_nothing_invisible(value: dict[str, str]) -> None:
    shown = pretty_json(value)
    assert json.loads(shown) == value
    assert not any(unicodedata.category(c) == "Cf" for c in shown)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("Refund", "Refund"), ("Erstattung für Sie", "Erstattung für Sie"),
     ("Refund \u202eten", '"Refund \\u202eten"'), ("a\u200bb", '"a\\u200bb"'),
     (["x\u2066", "y"], '["x\\u2066", "y"]'), ("tag\U000e0001", '"tag\\udb40\\udc01"')],
)
def test_table_cell_shows_invisible_characters_as_escapes(value: Any, shown: str) -> None:
    assert compact_json(value) == shown


# --- a report's body, as a reader's paragraphs ------------------------------------------------


def test_a_body_splits_into_paragraphs_at_blank_lines() -> None:
    body = "\n\nFirst line\nsame paragraph.\n \t\nSecond.\n\n\n\nThird.\n"
    assert paragraphs(body) == ["First line\nsame paragraph.", "Second.", "Third."]
    assert paragraphs("One.\r\n\r\nTwo.") == ["One.", "Two."]
    assert paragraphs("") == []
    assert paragraphs("  \n\n ") == []


def test_a_paragraph_shows_its_invisible_characters() -> None:
    assert paragraphs("Pay \u202eeve\u202c now") == ["Pay \\u202eeve\\u202c now"]
