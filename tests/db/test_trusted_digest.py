"""Trust the store's digest at dispatch (docs/design.md#dispatcher): with the stored snapshot's
digest and the contract, destination and policy fingerprints unchanged, the stored arguments are
not validated or canonicalized again; authority and resources are checked every time; anything
changed runs the whole pipeline."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import dispatch.services.admission as admission
from dispatch.models import Operation, Proposal
from dispatch.runtime import get_runtime
from dispatch.services.admission import admit_proposal
from dispatch.services.authority import grant_revoke
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.proposals import proposal_create
from protocols.denials import Denial, DenialCode
from tests.conftest import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often admission validates the arguments and canonicalizes the snapshot."""
    seen: Counter[str] = Counter()
    for name in ("validate_arguments", "canonicalize"):
        real = getattr(admission, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            seen[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(admission, name, spy)
    return seen


def admit(world: World, proposal: Proposal) -> Any:
    contract = get_runtime().contract_for(proposal.operation, proposal.contract_fingerprint)
    return admit_proposal(contract, world.owner, proposal, now=world.now)


def test_an_unchanged_snapshot_is_trusted_at_dispatch(world: World, calls: Counter[str]) -> None:
    proposal, permit = world.approved_email()
    calls.clear()
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                                  enqueue=False)
    assert operation.permit_id == permit.id
    assert calls == {}  # neither validated nor canonicalized again


def test_authority_is_checked_every_time(world: World, calls: Counter[str]) -> None:
    proposal, permit = world.approved_email()
    grant_revoke(actor=world.admin, grant_id=permit.grant_id, now=world.now)
    calls.clear()
    with pytest.raises(Denial) as denied:
        admit(world, proposal)
    assert denied.value.code is DenialCode.AUTHORITY_REVOKED
    assert calls == {}


@pytest.mark.parametrize("field", ["policy_fingerprint", "destination_fingerprint",
                                   "contract_fingerprint"])
def test_a_changed_fingerprint_forces_the_whole_pipeline(
    world: World, calls: Counter[str], field: str,
) -> None:
    proposal, _ = world.approved_email()
    setattr(proposal, field, "sha256:" + "0" * 64)  # what the deployment runs now differs
    calls.clear()
    admit(world, proposal)  # the snapshot itself still matches: admitted, the long way
    assert calls == {"validate_arguments": 1, "canonicalize": 1}


def test_a_changed_fingerprint_catches_arguments_that_no_longer_match(
    world: World, calls: Counter[str],
) -> None:
    proposal, _ = world.approved_email()
    proposal.policy_fingerprint = "sha256:" + "0" * 64
    proposal.arguments = {"draft": {"id": proposal.arguments["draft"]["id"], "revision": 1},
                          "extra": True}
    with pytest.raises(Denial) as denied:
        admit(world, proposal)
    assert denied.value.code is DenialCode.SCHEMA_INVALID
    assert calls["validate_arguments"] == 1


def test_snapshot_bytes_that_no_longer_hash_to_the_digest_are_not_trusted(
    world: World, calls: Counter[str],
) -> None:
    proposal, _ = world.approved_email()
    stored = proposal.canonical
    proposal.canonical = stored.replace("Your refund", "Your refunds")
    calls.clear()
    admitted = admit(world, proposal)
    # The long way: the snapshot is made again from the arguments and the store, and it is
    # the one the digest names, not the bytes that changed.
    assert calls == {"validate_arguments": 1, "canonicalize": 1}
    assert admitted.canonical == stored.encode() and admitted.digest == proposal.digest


def test_an_arguments_column_edited_in_the_store_is_not_trusted(
    world: World, calls: Counter[str],
) -> None:
    """The checks read the `arguments` column and the handler sends the snapshot's bytes: an
    amount edited in the column (50 where the approved snapshot says 5000) would pass authority
    and the spend caps on 50 while 5000 left. Not trusted: the whole pipeline makes the
    snapshot again from the column, which no longer matches the digest."""
    proposal = proposal_create(principal=world.owner, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-999", "amount": "5000.00",
        "currency": "EUR", "memo": ""}, now=world.now)
    world.grant(proposal)
    Proposal.objects.filter(id=proposal.id).update(arguments={
        **proposal.arguments, "amount": "50.00"})
    calls.clear()
    with pytest.raises(Denial) as denied:
        proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                          enqueue=False)
    assert denied.value.code is DenialCode.PROPOSAL_MISMATCH
    assert calls["canonicalize"] == 1  # the long way
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
