"""Nobody decides an approval they requested."""

from __future__ import annotations

import pytest

from dispatch.models import Permit
from dispatch.services.approvals import approval_decide
from dispatch.services.principals import human_create
from dispatch.services.proposals import proposal_create
from protocols.denials import DenialCode
from tests.conftest import World
from tests.support.claims import refused

pytestmark = pytest.mark.django_db

def test_nobody_decides_an_approval_they_requested(world: World) -> None:
    human, _ = human_create(name="olga", tenant="acme", role="operator", password="pw",
                            tools=["crm.lookup", "payments.transfer"])
    from dispatch.services.authority import grant_issue

    grant_issue(issuer="admin", subject=human, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=world.now)
    proposal = proposal_create(principal=human, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-999", "amount": "5",
        "currency": "EUR"}, now=world.now)
    denial = refused(approval_decide, approver=human, approval_id=proposal.approval.id,
                     decision="grant", digest=proposal.digest, now=world.now)
    assert denial.code is DenialCode.APPROVER_IS_REQUESTER
    assert denial.status == 403
    proposal.approval.refresh_from_db()
    assert proposal.approval.state == "pending"
    assert not Permit.objects.exists()
    # Another operator may.
    approval, permit = approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                                       decision="grant", digest=proposal.digest, now=world.now)
    assert (approval.state, permit is not None) == ("granted", True)
