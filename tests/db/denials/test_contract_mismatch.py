"""`contract_mismatch`: the handler or contract changed after the proposal."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from demo.destinations.runner import list_all
from demo.handlers import EmailSendHandler
from dispatch.models import (
    ApprovalRequest,
    Permit,
)
from dispatch.runtime import get_runtime
from protocols.denials import DenialCode
from tests.conftest import World
from tests.db.denials.support import (
    decide,
    dispatch,
    store,
)
from tests.support.claims import refused
from tests.support.destinations import Destinations
from tests.support.runtime import ChangedEmailSendHandler

pytestmark = pytest.mark.django_db


def test_changed_handler_after_the_proposal_is_a_contract_mismatch(
    live: World, destinations: Destinations, changed_handler: Callable[[], None],
) -> None:
    proposal, permit = live.approved_email()
    changed_handler()
    contract = get_runtime().contract("email.send")
    assert contract.implementation_fingerprint == ChangedEmailSendHandler.implementation_fingerprint
    assert contract.implementation_fingerprint != EmailSendHandler.implementation_fingerprint
    assert contract.fingerprint != proposal.contract_fingerprint
    before = store()
    denial = refused(dispatch, world=live, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert denial.status == 409
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert list_all(destinations.directory)["email"] == []
    # A new proposal binds the new fingerprint.
    fresh = live.propose_email(live.draft())
    assert fresh.contract_fingerprint == contract.fingerprint


def test_a_pending_approval_under_a_changed_contract_cannot_be_granted(
    world: World, changed_handler: Callable[[], None],
) -> None:
    """No human grants what could never run (docs/compatibility.md): the approval stays pending,
    to be denied or to expire, and the action is proposed again under the new contract."""
    proposal = world.propose_email(world.draft())
    changed_handler()
    before = store()
    denial = refused(decide, world=world, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert store() == before
    decide(world, proposal, "deny")
    assert ApprovalRequest.objects.get(id=proposal.approval.id).state == "denied"
    assert Permit.objects.filter(proposal=proposal).count() == 0


def test_handler_swapped_under_a_registered_contract_is_a_contract_mismatch(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposal, permit = world.approved_email()
    monkeypatch.setitem(get_runtime().handlers, ("email.send", 1), ChangedEmailSendHandler())
    before = store()
    denial = refused(dispatch, world=world, proposal=proposal)
    assert denial.code is DenialCode.CONTRACT_MISMATCH
    assert store() == before
    assert Permit.objects.get(id=permit.id).state == "issued"
