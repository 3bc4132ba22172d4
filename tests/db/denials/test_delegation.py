"""Delegation: a child grant that widens or outlives its parent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dispatch.models import (
    Principal,
)
from dispatch.services.authority import grant_delegate, grant_issue
from protocols.denials import DenialCode
from tests.conftest import MAILBOX, World
from tests.db.denials.support import (
    grant_of,
    store,
)
from tests.support.claims import refused

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("operations", "scope", "widened"),
    [
        (["email.send", "payments.transfer"], {"mailbox": [MAILBOX]},
         {"operations": ["payments.transfer"]}),
        (["email.send"], {"mailbox": [MAILBOX, "sales@acme.example"]},
         {"scope": {"mailbox": ["sales@acme.example"]}}),
        (["email.send"], {"mailbox": "*"}, {"scope": {"mailbox": "*"}}),
        (["email.send"], {"mailbox": [MAILBOX], "account": ["acct-001"]},
         {"scope": {"account": ["acct-001"]}}),
        (["*"], {"mailbox": [MAILBOX]}, {"operations": ["*"]}),
    ],
    ids=["more-operations", "wider-mailbox", "any-mailbox", "new-key", "every-operation"],
)
def test_delegation_that_widens_is_refused(
    world: World, colleague: Principal, operations: list[str], scope: dict[str, Any],
    widened: dict[str, Any],
) -> None:
    before = store()
    denial = refused(grant_delegate, actor=world.owner,
                     grant_id=grant_of(world.owner, "email.send").id,
                     subject_name=colleague.name, operations=operations, scope=scope,
                     expires_at=None, now=world.now)
    assert denial.code is DenialCode.DELEGATION_WIDENS
    assert denial.status == 403
    assert denial.details == widened
    assert store() == before


@pytest.mark.parametrize("expires_at", [timedelta(hours=2), None],
                         ids=["later", "unbounded"])
def test_delegation_that_outlives_its_parent_is_refused(
    world: World, colleague: Principal, expires_at: timedelta | None,
) -> None:
    parent = grant_issue(issuer="admin", subject=world.owner, operations=["crm.lookup"],
                         scope={"customer": ["cus-001"]}, now=world.now, expires_in=3600)
    before = store()
    denial = refused(grant_delegate, actor=world.owner, grant_id=parent.id,
                     subject_name=colleague.name, operations=["crm.lookup"],
                     scope={"customer": ["cus-001"]},
                     expires_at=None if expires_at is None else world.now + expires_at,
                     now=world.now)
    assert denial.code is DenialCode.DELEGATION_WIDENS
    assert set(denial.details) == {"expires_at"}
    assert store() == before


def test_narrower_delegation_is_granted(world: World, colleague: Principal) -> None:
    child = grant_delegate(actor=world.owner, grant_id=grant_of(world.owner, "email.send").id,
                           subject_name=colleague.name, operations=["email.send"],
                           scope={"mailbox": [MAILBOX]},
                           expires_at=world.now + timedelta(minutes=5), now=world.now)
    assert child.parent_id == grant_of(world.owner, "email.send").id
    assert child.subject_id == colleague.id
