"""Over the REST API: a bad address, subject or newline-terminated value is a 422 at its pointer."""

from __future__ import annotations

import pytest

from tests.api.conftest import Caller, draft_payload, schema_errors
from tests.support.addresses import BAD_ADDRESSES

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_address_is_422_at_its_pointer_on_create(owner: Caller, address: str) -> None:
    response = owner.post("resources/", {"kind": "email_draft",
                                         "payload": draft_payload(to=[address])})
    assert [e["pointer"] for e in schema_errors(response)] == ["/payload/to/0"]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_address_is_422_at_its_pointer_on_revision(owner: Caller, address: str) -> None:
    created = owner.post("resources/", {"kind": "email_draft", "payload": draft_payload()})
    assert created.status_code == 201
    response = owner.post(f"resources/{created.json()['id']}/revisions/", {
        "base_revision": 1, "payload": draft_payload(**{"from": address})})
    assert [e["pointer"] for e in schema_errors(response)] == ["/payload/from"]


def test_subject_with_a_line_break_is_422(owner: Caller) -> None:
    response = owner.post("resources/", {"kind": "email_draft", "payload": draft_payload(
        subject="Refund\r\nBcc: x@evil.example")})
    assert [e["pointer"] for e in schema_errors(response)] == ["/payload/subject"]


def test_internationalized_address_is_created(owner: Caller) -> None:
    response = owner.post("resources/", {"kind": "email_draft",
                                         "payload": draft_payload(to=["kunde@bücher.example"])})
    assert response.status_code == 201, response.content
    assert response.json()["payload"]["to"] == ["kunde@bücher.example"]


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [({"currency": "EUR\n"}, "/arguments/currency"),
     ({"from_account": "acct-001\n"}, "/arguments/from_account")],
    ids=["currency", "account"],
)
def test_trailing_newline_is_422_at_proposal(
    owner: Caller, changes: dict[str, str], pointer: str,
) -> None:
    response = owner.post("proposals/", {"operation": "payments.transfer", "arguments": {
        "from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
        "currency": "EUR", **changes}})
    assert [e["pointer"] for e in schema_errors(response)] == [pointer]
