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
from tests.support.addresses import BAD_ADDRESSES

pytestmark = pytest.mark.django_db

def draft(**changes: Any) -> dict[str, Any]:
    return {"from": MAILBOX, "to": ["customer@example.com"], "subject": "Your refund",
            "body": "We have refunded your order.", **changes}


def refusal(call: Callable[..., Any], **kwargs: Any) -> tuple[list[str], list[str]]:
    """The pointers and messages of the `schema_invalid` refusal that `call` must raise."""
    with pytest.raises(Denial) as caught:
        call(**kwargs)
    denial = caught.value
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.status == 422
    errors = denial.details["errors"]
    assert all(e["message"] for e in errors)
    return [e["pointer"] for e in errors], [e["message"] for e in errors]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_recipient_is_refused_at_resource_creation(world: World, address: str) -> None:
    found, _ = refusal(resource_create, principal=world.owner, kind="email_draft",
                       payload=draft(to=[address]), now=world.now)
    assert found == ["/payload/to/0"]
    assert not Resource.objects.exists()


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_bad_address_is_refused_at_revision(world: World, address: str) -> None:
    resource = world.draft()
    found, _ = refusal(revision_create, principal=world.owner, resource_id=resource.id,
                       base_revision=1, now=world.now,
                       payload=draft(cc=["boss@acme.example", address]))
    assert found == ["/payload/cc/1"]
    assert Revision.objects.filter(resource_id=resource.id).count() == 1


def test_bad_sender_is_refused_at_its_pointer(world: World) -> None:
    found, _ = refusal(resource_create, principal=world.owner, kind="email_draft",
                       payload=draft(**{"from": f"{MAILBOX}\r\nBcc: x@evil.example"}),
                       now=world.now)
    assert found == ["/payload/from"]


def test_refusal_says_why(world: World) -> None:
    _, [message] = refusal(resource_create, principal=world.owner, kind="email_draft",
                           payload=draft(to=["support@acme\u202e.example"]), now=world.now)
    assert "U+202E" in message
    assert "\u202e" not in message  # the message itself hides nothing


@pytest.mark.parametrize("subject", ["Refund\r\nBcc: x@evil.example", "Refund\n", "Re\x00fund"])
def test_subject_with_a_control_character_is_refused(world: World, subject: str) -> None:
    found, _ = refusal(resource_create, principal=world.owner, kind="email_draft",
                       payload=draft(subject=subject), now=world.now)
    assert found == ["/payload/subject"]


def test_internationalized_address_is_accepted(world: World) -> None:
    proposal = world.propose_email(world.draft(
        to=["kunde@bücher.example", "kunde@xn--bcher-kva.example"],
        subject="Ihre Erstattung\tjetzt"))
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
    found, _ = refusal(proposal_create, principal=world.owner, operation="payments.transfer",
                       arguments=arguments, now=world.now)
    assert found == [pointer]
