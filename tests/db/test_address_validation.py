"""What runs is what the operator sees: addresses, subjects and anchored patterns are refused at
intake (resource creation, revision and proposal) with `schema_invalid` at their own pointer,
never left for the SMTP client to find at send time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatch.models import Resource, Revision
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create, revision_create
from protocols.denials import Denial, DenialCode
from tests.conftest import MAILBOX, World

pytestmark = pytest.mark.django_db

PAYLOAD = {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
           "body": "We have refunded your order."}

# One plain addr-spec per field; anything a mail client would read differently is refused.
BAD_ADDRESSES = [
    pytest.param("a@example.com\r\nBcc: x@evil.example", id="crlf-header-injection"),
    pytest.param("a@example.com\n", id="trailing-newline"),
    pytest.param("support@acme\u202e.example", id="bidi-override"),
    pytest.param("support@acme.example\u200b", id="zero-width-space"),
    pytest.param("Eve <eve@x.example>", id="display-name"),
    pytest.param("<eve@x.example>", id="angle-brackets"),
    pytest.param("a@x.example, b@y.example", id="two-addresses"),
    pytest.param("a@x.example b@y.example", id="two-addresses-by-space"),
    pytest.param("a@-bad-.example", id="label-hyphens"),
    pytest.param("a@" + "l" * 64 + ".example", id="label-too-long"),
    pytest.param("a@exa_mple.com", id="label-underscore"),
    pytest.param("a@example..com", id="empty-label"),
    pytest.param("a@xn--zzzz.example", id="bogus-a-label"),
    pytest.param("a@BÜCHER.example", id="uppercase-u-label"),
]


def refused(call: Callable[..., Any], **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as caught:
        call(**kwargs)
    return caught.value


def pointers(denial: Denial) -> list[str]:
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.status == 422
    assert all(e["message"] for e in denial.details["errors"])
    return [e["pointer"] for e in denial.details["errors"]]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_recipient_is_refused_at_resource_creation(world: World, address: str) -> None:
    denial = refused(resource_create, principal=world.owner, kind="email_draft",
                     payload={**PAYLOAD, "to": [address]}, now=world.now)
    assert pointers(denial) == ["/payload/to/0"]
    assert not Resource.objects.exists()


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_address_is_refused_at_revision(world: World, address: str) -> None:
    draft = world.draft()
    denial = refused(revision_create, principal=world.owner, resource_id=draft.id,
                     base_revision=1, now=world.now,
                     payload={**PAYLOAD, "cc": ["boss@acme.example", address]})
    assert pointers(denial) == ["/payload/cc/1"]
    assert Revision.objects.filter(resource_id=draft.id).count() == 1


def test_bad_sender_is_refused_at_its_pointer(world: World) -> None:
    denial = refused(resource_create, principal=world.owner, kind="email_draft",
                     payload={**PAYLOAD, "from": f"{MAILBOX}\r\nBcc: x@evil.example"},
                     now=world.now)
    assert pointers(denial) == ["/payload/from"]


def test_refusal_says_why(world: World) -> None:
    denial = refused(resource_create, principal=world.owner, kind="email_draft",
                     payload={**PAYLOAD, "to": ["support@acme\u202e.example"]}, now=world.now)
    [error] = denial.details["errors"]
    assert "U+202E" in error["message"]
    assert "\u202e" not in error["message"]  # the message itself hides nothing


@pytest.mark.parametrize("subject", ["Refund\r\nBcc: x@evil.example", "Refund\n", "Re\x00fund"])
def test_subject_with_a_control_character_is_refused(world: World, subject: str) -> None:
    denial = refused(resource_create, principal=world.owner, kind="email_draft",
                     payload={**PAYLOAD, "subject": subject}, now=world.now)
    assert pointers(denial) == ["/payload/subject"]


def test_internationalized_address_is_accepted(world: World) -> None:
    draft = world.draft(to=["kunde@bücher.example", "kunde@xn--bcher-kva.example"],
                        subject="Ihre Erstattung\tjetzt")
    proposal = world.propose_email(draft)
    assert "kunde@bücher.example" in proposal.canonical


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [({"currency": "EUR\n"}, "/arguments/currency"),
     ({"from_account": "acct-001\n"}, "/arguments/from_account"),
     ({"to_account": "acct-999\n"}, "/arguments/to_account")],
    ids=["currency", "from-account", "to-account"],
)
def test_trailing_newline_is_refused_at_proposal(
    world: World, changes: dict[str, str], pointer: str,
) -> None:
    arguments = {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                 "currency": "EUR", "memo": "", **changes}
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments=arguments, now=world.now)
    assert pointers(denial) == [pointer]
