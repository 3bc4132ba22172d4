"""A vote is cast only by a voter who counts now (docs/design.md#approval-policies): an operator
deactivated after the caller loaded them (a request that authenticated just before, a service
holding the principal) grants nothing, of an approval or of a renewal, even where one grant
would be the whole quorum. The lifecycle model over workflows found the approval's case: a
deactivated operator's grant minted a permit with no live vote (docs/reliability.md#workflows)."""

from __future__ import annotations

import pytest

from dispatch.models import Permit, Renewal, Vote
from dispatch.services.principals import human_create
from dispatch.services.renewals import operation_reauthorize
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.db.test_renewals import grant, stopped_transfer

pytestmark = pytest.mark.django_db


def deactivated_operator(name: str) -> object:
    operator, _ = human_create(name=name, tenant="acme", role="operator", password="pw")
    assert operator.user is not None
    type(operator.user).objects.filter(id=operator.user_id).update(is_active=False)
    return operator  # the caller's copy still says active


def test_a_deactivated_operators_grant_mints_no_permit(world: World) -> None:
    proposal = world.propose_transfer("10.00")
    assert proposal.approval.quorum == 1
    with pytest.raises(Denial) as refused:
        world.grant(proposal, approver=deactivated_operator("gone"))
    assert refused.value.code is DenialCode.ROLE_REQUIRED
    assert not Permit.objects.filter(proposal_id=proposal.id).exists()
    assert not Vote.objects.filter(approval_id=proposal.approval.id).exists()
    world.grant(proposal)  # an active operator still can
    assert Permit.objects.filter(proposal_id=proposal.id).exists()


def test_a_deactivated_operators_grant_renews_nothing(live: World) -> None:
    operation = stopped_transfer(live)
    renewal = operation_reauthorize(actor=live.owner, operation_id=operation.id,
                                    now=live.now, reason="check")
    with pytest.raises(Denial) as refused:
        grant(live, renewal, approver=deactivated_operator("gone"))
    assert refused.value.code is DenialCode.ROLE_REQUIRED
    assert Renewal.objects.get(id=renewal.id).state == "pending"
