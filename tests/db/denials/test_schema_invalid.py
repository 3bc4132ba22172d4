"""`schema_invalid`: arguments, drafts, options and decisions against their schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dispatch.services.approvals import approval_decide
from dispatch.services.proposals import proposal_create
from dispatch.services.resources import resource_create
from protocols.denials import DenialCode
from tests.conftest import World
from tests.db.denials.support import (
    PAYLOAD,
    email_arguments,
    state_of,
    store,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("arguments", "pointers"),
    [
        ({}, ["/arguments/draft"]),
        ({"draft": "DRAFT"}, ["/arguments/draft"]),
        ({"draft": {"id": "DRAFT", "revision": 1}, "bcc": ["boss@acme.example"]},
         ["/arguments/bcc"]),
        ({"draft": {"id": "DRAFT", "revision": "1"}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "DRAFT", "revision": 0}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "DRAFT"}}, ["/arguments/draft/revision"]),
        ({"draft": {"id": "DRAFT", "revision": 1, "payload": {"to": ["x@evil.example"]}}},
         ["/arguments/draft/payload"]),
        ([], ["/arguments"]),
        ("draft", ["/arguments"]),
        (None, ["/arguments"]),
    ],
    ids=["missing", "not-a-ref", "extra", "wrong-type", "revision-0", "missing-revision",
         "client-payload", "list", "string", "null"],
)
def test_email_arguments_against_the_schema(
    world: World, arguments: Any, pointers: list[str],
) -> None:
    draft = world.draft()
    arguments = json.loads(json.dumps(arguments).replace("DRAFT", draft.id))
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=arguments, now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.status == 422
    assert [e["pointer"] for e in denial.details["errors"]] == pointers
    assert all(e["message"] for e in denial.details["errors"])
    assert store() == before
    assert state_of(draft) == "draft"


@pytest.mark.parametrize(
    ("changes", "pointers"),
    [
        ({"amount": "10.001"}, ["/arguments/amount"]),
        ({"amount": "-10"}, ["/arguments/amount"]),
        ({"amount": "0"}, ["/arguments/amount"]),
        ({"amount": "1e3"}, ["/arguments/amount"]),
        ({"amount": 10}, ["/arguments/amount"]),
        ({"currency": "XXX"}, ["/arguments/amount"]),
        ({"currency": "eur"}, ["/arguments/currency"]),
        ({"memo": 5}, ["/arguments/memo"]),
        ({"to_account": "acct 999"}, ["/arguments/to_account"]),
        ({"fee": "1.00"}, ["/arguments/fee"]),
        ({"amount": None, "currency": None}, ["/arguments/amount", "/arguments/currency"]),
    ],
    ids=["three-places", "negative", "zero", "exponent", "number", "unknown-currency",
         "lowercase-currency", "memo-type", "account-pattern", "extra", "two-wrong"],
)
def test_transfer_arguments_against_the_schema(
    world: World, changes: dict[str, Any], pointers: list[str],
) -> None:
    arguments = {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                 "currency": "EUR", "memo": "", **changes}
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments=arguments, now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == pointers
    assert store() == before


def test_missing_transfer_members_are_each_reported_once(world: World) -> None:
    denial = refused(proposal_create, principal=world.owner, operation="payments.transfer",
                     arguments={"from_account": "acct-001", "to_account": "acct-999"},
                     now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert denial.details["errors"] == [
        {"pointer": "/arguments/amount", "message": "is required"},
        {"pointer": "/arguments/currency", "message": "is required"},
    ]


def test_equal_amounts_are_one_proposal_digest(world: World) -> None:
    digests = {world.propose_transfer(amount=a).digest for a in ("10", "10.0", "10.00")}
    assert len(digests) == 1


@pytest.mark.parametrize(
    ("payload", "pointers"),
    [
        ({k: v for k, v in PAYLOAD.items() if k != "to"}, ["/payload/to"]),
        ({k: v for k, v in PAYLOAD.items() if k not in ("to", "subject")},
         ["/payload/subject", "/payload/to"]),
        ({**PAYLOAD, "to": ["not-an-address"]}, ["/payload/to/0"]),
        ({**PAYLOAD, "to": []}, ["/payload/to"]),
        ({**PAYLOAD, "bcc": ["x@example.com"]}, ["/payload/bcc"]),
        ({**PAYLOAD, "subject": 5}, ["/payload/subject"]),
    ],
    ids=["missing-to", "missing-two", "bad-address", "no-recipient", "extra", "wrong-type"],
)
def test_draft_payload_against_the_schema(
    world: World, payload: dict[str, Any], pointers: list[str],
) -> None:
    before = store()
    denial = refused(resource_create, principal=world.owner, kind="email_draft",
                     payload=payload, now=world.now)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == pointers
    assert store() == before


@pytest.mark.parametrize(
    ("extra", "pointer"),
    [({"execution_id": "has space"}, "/execution_id"),
     ({"execution_id": 5}, "/execution_id"),
     ({"execution_id": "x" * 81}, "/execution_id"),
     ({"approval_expires_in": 0}, "/approval_expires_in"),
     ({"approval_expires_in": "60"}, "/approval_expires_in"),
     ({"approval_expires_in": True}, "/approval_expires_in"),
     ({"dispatch_on_approval": "yes"}, "/dispatch_on_approval")],
)
def test_proposal_options_against_the_schema(
    world: World, extra: dict[str, Any], pointer: str,
) -> None:
    draft = world.draft()
    before = store()
    denial = refused(proposal_create, principal=world.owner, operation="email.send",
                     arguments=email_arguments(draft), now=world.now, **extra)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == [pointer]
    assert store() == before


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [({"decision": "approve"}, "/decision"), ({"decision": None}, "/decision"),
     ({"digest": 5}, "/digest"), ({"reason": 5}, "/reason")],
)
def test_decision_against_the_schema(
    world: World, changes: dict[str, Any], pointer: str,
) -> None:
    proposal = world.propose_email(world.draft())
    call = {"approver": world.approver, "approval_id": proposal.approval.id,
            "decision": "grant", "digest": proposal.digest, "now": world.now, **changes}
    before = store()
    denial = refused(approval_decide, **call)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == [pointer]
    assert store() == before
