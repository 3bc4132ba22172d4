"""An audit event's details as labelled fields: known keys under their label in a fixed order,
unknown keys under their own name after them, every value in words, nothing left out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.audit_presenters import LABELS, DetailField, detail_fields, kind_title, readable


def test_known_keys_read_under_their_labels_in_a_fixed_order() -> None:
    details = {"resources": [{"id": "res_a", "revision": 2}], "permit_id": "prm_1",
               "execution_id": "exe_1", "approval_id": "apr_1",
               "resource_moves": [{"id": "res_a", "revision": 2, "event": "claim"}]}
    assert detail_fields(details) == [
        DetailField("approval_id", "Approval", "apr_1", mono=True),
        DetailField("permit_id", "Permit", "prm_1", mono=True),
        DetailField("resource_moves", "Resource moves", "res_a revision 2 (claim)", mono=True),
        DetailField("resources", "Resources", "res_a revision 2", mono=True),
        DetailField("execution_id", "Execution", "exe_1", mono=True),
    ]


def test_unknown_keys_follow_under_their_own_name() -> None:
    fields = detail_fields({"zeta": 1, "reason": "late", "alpha": [], "Mixed Key": {"k": "v"}})
    assert [(f.label, f.value) for f in fields] == [
        ("Reason", "late"), ("Mixed Key", "k: v"), ("alpha", "none"), ("zeta", "1")]


def test_times_carry_their_moment_and_other_values_none() -> None:
    at = datetime(2026, 12, 3, 14, 57, 18, tzinfo=UTC)
    retry, role, expires = detail_fields({"expires_at": at.isoformat(), "role": "operator",
                                          "retry_at": "not a time"})
    assert expires.at == at and expires.label == "Expires at"
    assert retry.at is None and retry.value == "not a time"
    assert role.at is None
    offset = datetime(2026, 12, 3, 20, 27, 18, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    (field,) = detail_fields({"expires_at": offset.isoformat()})
    assert field.at == at


@pytest.mark.parametrize(("value", "words"), [
    (None, "none"), (True, "yes"), (False, "no"), ("", "none"), ([], "none"), ({}, "none"),
    (3, "3"), (2.5, "2.5"), ("text", "text"), (["a", "b"], "a, b"), ([1, [2, 3]], "1; 2, 3"),
    ({"mailbox": ["a@x.example", "b@x.example"], "account": "*"},
     "mailbox: a@x.example, b@x.example; account: *"),
    ([{"id": "res_a", "revision": 1}, {"id": "res_b", "revision": 4, "event": "grant"}],
     "res_a revision 1; res_b revision 4 (grant)"),
    ({"id": "x", "revision": 1, "other": 2}, "id: x; revision: 1; other: 2"),
    ("a\u202eb", '"a\\u202eb"'),  # an invisible character is shown, never obeyed
])
def test_values_read_in_words(value: Any, words: str) -> None:
    assert readable(value) == words


def test_details_that_are_not_an_object_read_as_one_field() -> None:
    assert detail_fields(["x", "y"]) == [DetailField("", "Details", "x, y")]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10)


@given(st.dictionaries(st.sampled_from([*LABELS, "x", "custom_key", ""]) | st.text(), JSON,
                       max_size=8))
def test_every_key_is_shown_once(details: dict[str, Any]) -> None:
    fields = detail_fields(details)
    assert sorted(f.key for f in fields) == sorted(details)
    assert all(f.label == LABELS.get(f.key, f.key) for f in fields)


def test_an_event_of_no_action_is_titled_by_its_kind() -> None:
    assert kind_title("grant.issued") == "Grant issued"
    assert kind_title("operation.failed_no_effect") == "Operation failed no effect"
    assert kind_title("") == "Event"


def test_a_vote_toward_a_quorum_reads_in_words() -> None:
    assert kind_title("approval.voted") == "Approval vote recorded"
    fields = detail_fields({"approval_id": "apr_1", "votes": 1, "quorum": 2})
    assert [(f.label, f.value) for f in fields] == [
        ("Approval", "apr_1"), ("Approvals so far", "1"), ("Approvals needed", "2")]
