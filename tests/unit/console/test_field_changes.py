"""What changed between two versions of an action, for the "changed" badge: leaves by dotted
path, list items one by one (an added recipient flagged), resource bookkeeping ignored."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from console.field_changes import FieldChange, comparable, field_changes

DRAFT = {"from": "support@acme.example", "to": ["ada@example.com"], "cc": [],
         "subject": "About your renewal", "body": "Dear Ada,"}


def test_an_added_cc_recipient_is_named_and_flagged() -> None:
    revised = {**DRAFT, "cc": ["exfil@evil.example"]}
    assert field_changes(DRAFT, revised) == [
        FieldChange("cc", "added", value="exfil@evil.example", recipient=True)]
    assert field_changes(DRAFT, revised)[0].label == "cc: + exfil@evil.example"


def test_identical_values_have_no_changes() -> None:
    assert field_changes(DRAFT, dict(DRAFT)) == []
    assert field_changes({"a": {"b": [1, {"c": 2}]}}, {"a": {"b": [1, {"c": 2}]}}) == []


def test_a_replaced_recipient_reads_as_one_removed_and_one_added() -> None:
    changes = field_changes(DRAFT, {**DRAFT, "to": ["eve@evil.example"]})
    assert [c.label for c in changes] == ["to: + eve@evil.example", "to: − ada@example.com"]
    assert [c.recipient for c in changes] == [True, False]


def test_a_changed_leaf_keeps_both_values_and_names_the_field() -> None:
    changes = field_changes(DRAFT, {**DRAFT, "subject": "Pay now"})
    assert changes == [FieldChange("subject", "changed", value="Pay now",
                                   old="About your renewal")]
    assert changes[0].label == "subject changed"


def test_a_changed_sender_address_is_flagged() -> None:
    [change] = field_changes(DRAFT, {**DRAFT, "from": "ceo@evil.example"})
    assert change.recipient
    assert change.label == "from: now ceo@evil.example"


def test_nested_members_are_dotted_paths_and_removed_come_last() -> None:
    old = {"a": {"b": 1, "gone": "x"}, "keep": True}
    new = {"keep": True, "a": {"b": 2, "new": {"deep": "y"}}}
    assert field_changes(old, new) == [
        FieldChange("a.b", "changed", value="2", old="1"),
        FieldChange("a.new.deep", "added", value="y"),
        FieldChange("a.gone", "removed", value="x"),
    ]


def test_a_member_added_whole_names_each_item() -> None:
    old = {"to": ["ada@example.com"]}
    new = {"to": ["ada@example.com"], "bcc": ["spy@evil.example", "not an address"]}
    assert field_changes(old, new) == [
        FieldChange("bcc", "added", value="spy@evil.example", recipient=True),
        FieldChange("bcc", "added", value="not an address"),
    ]


def test_a_duplicate_item_added_is_seen() -> None:
    [change] = field_changes({"to": ["a@example.com"]},
                             {"to": ["a@example.com", "a@example.com"]})
    assert change == FieldChange("to", "added", value="a@example.com", recipient=True)


def test_the_same_items_in_another_order_are_reordered() -> None:
    assert field_changes({"to": ["a@x.example", "b@x.example"]},
                         {"to": ["b@x.example", "a@x.example"]}) == [
        FieldChange("to", "reordered")]


def test_types_are_told_apart() -> None:
    """`1` and `true`, `"1"` and `1` are different values, as in the canonical encoding."""
    assert field_changes({"n": 1}, {"n": True}) == [
        FieldChange("n", "changed", value="true", old="1")]
    assert field_changes({"n": "1"}, {"n": 1}) == [
        FieldChange("n", "changed", value="1", old="1")]
    assert field_changes({"n": [1]}, {"n": 1})[0].change == "changed"


def test_long_values_are_shortened_in_the_label_only() -> None:
    body = "x" * 200
    [change] = field_changes({"items": []}, {"items": [body]})
    assert change.value == body
    assert change.label == "items: + " + "x" * 59 + "…"


def test_invisible_characters_are_revealed() -> None:
    [change] = field_changes({"to": []}, {"to": ["a\u202egro.live@x.example"]})
    assert change.value == "a\\u202egro.live@x.example"


def test_a_snapshot_compares_resources_by_payload_not_bookkeeping() -> None:
    def snapshot(revision: int, payload: dict[str, object]) -> dict[str, object]:
        return {"draft": {"id": "res_1", "revision": revision, "digest": f"sha256:{revision}",
                          "payload": payload}, "send_at": None}

    old = comparable(snapshot(1, DRAFT))
    new = comparable(snapshot(2, {**DRAFT, "cc": ["exfil@evil.example"]}))
    assert old == {"draft": DRAFT, "send_at": None}
    assert [c.label for c in field_changes(old, new)] == ["draft.cc: + exfil@evil.example"]


def test_a_linked_resource_compares_by_its_payload_too() -> None:
    report = {"id": "res_r", "revision": 3, "digest": "sha256:r", "payload": {"text": "a"},
              "links": {"question": {"id": "res_q", "revision": 1, "digest": "sha256:q",
                                     "payload": {"text": "Why?"}}}}
    assert comparable({"report": report}) == {
        "report": {"text": "a", "links": {"question": {"text": "Why?"}}}}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=12)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@given(JSON, JSON)
def test_there_are_changes_exactly_when_the_values_differ(old: Any, new: Any) -> None:
    assert (field_changes(old, new) == []) == _same(old, new)
    assert field_changes(new, new) == []


ITEMS = st.lists(st.text("abc@.", max_size=6), max_size=6)


@given(ITEMS, ITEMS)
def test_list_changes_account_for_every_item(old: list[str], new: list[str]) -> None:
    """Of a list of (visible) strings, the items reported added and removed turn `old` into
    `new` as collections."""
    changes = field_changes({"to": old}, {"to": new})
    added = [c.value for c in changes if c.change == "added"]
    removed = [c.value for c in changes if c.change == "removed"]
    result = list(old)
    for item in removed:
        result.remove(item)
    assert sorted(result + added) == sorted(new)
