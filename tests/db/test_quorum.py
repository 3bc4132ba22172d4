"""Four-eyes approval (docs/design.md#approval-policies): a deployment rule raises the quorum;
each grant is a vote bound to the digest; the grant that completes the quorum mints the permit;
any denial denies; nobody votes twice and the requester never votes."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.models import AuditEvent, Decision, Permit, Vote
from dispatch.runtime import get_runtime
from dispatch.services.approvals import approval_decide
from dispatch.services.dispatcher import proposal_dispatch
from protocols.contracts import ApprovalRequirement
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.quorum import FOUR_EYES, four_eyes, second_operator

__all__ = ["four_eyes"]

pytestmark = pytest.mark.django_db

LARGE, SMALL = "25000.00", "9999.99"


def vote(world: World, proposal: Any, approver: Any, decision: str = "grant") -> Any:
    return approval_decide(approver=approver, approval_id=proposal.approval.id,
                           decision=decision, digest=proposal.digest, now=world.now)


def refused(world: World, proposal: Any, approver: Any, decision: str = "grant") -> Denial:
    with pytest.raises(Denial) as denial:
        vote(world, proposal, approver, decision)
    return denial.value


@pytest.mark.usefixtures("four_eyes")
def test_the_second_grant_completes_the_quorum_and_mints_the_one_permit(world: World) -> None:
    proposal = world.propose_transfer(LARGE)
    assert proposal.approval.quorum == 2
    approval, permit = vote(world, proposal, world.approver)
    assert (approval.state, permit) == ("pending", None)
    assert not Permit.objects.exists() and not Decision.objects.exists()
    assert AuditEvent.objects.filter(kind="approval.voted").count() == 1

    other = second_operator()
    approval, permit = vote(world, proposal, other)
    assert approval.state == "granted"
    assert Permit.objects.get() == permit and permit.approver_id == other.id
    assert Decision.objects.get().approver_id == other.id
    assert sorted(Vote.objects.values_list("approver__name", flat=True)) == [
        "approver", "approver2"]
    # The permit is the one a single-approver grant mints: the dispatch claims it.
    operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                  now=world.now, enqueue=False)
    assert operation.proposal_id == proposal.id


@pytest.mark.usefixtures("four_eyes")
def test_below_the_threshold_one_operator_is_enough(world: World) -> None:
    proposal = world.propose_transfer(SMALL)
    assert proposal.approval.quorum == 1
    approval, permit = vote(world, proposal, world.approver)
    assert approval.state == "granted" and permit is not None


@pytest.mark.usefixtures("four_eyes")
def test_the_same_operator_voting_twice_is_approval_decided(world: World) -> None:
    proposal = world.propose_transfer(LARGE)
    vote(world, proposal, world.approver)
    assert refused(world, proposal, world.approver).code is DenialCode.APPROVAL_DECIDED
    assert Vote.objects.count() == 1
    proposal.approval.refresh_from_db()
    assert proposal.approval.state == "pending"


@pytest.mark.usefixtures("four_eyes")
def test_a_denial_after_one_grant_denies(world: World) -> None:
    proposal = world.propose_transfer(LARGE)
    vote(world, proposal, world.approver)
    approval, permit = vote(world, proposal, second_operator(), "deny")
    assert (approval.state, permit) == ("denied", None)
    assert not Permit.objects.exists()
    # Decided: a third operator's grant comes too late.
    late = refused(world, proposal, second_operator("approver3"))
    assert late.code is DenialCode.APPROVAL_DECIDED


@pytest.mark.usefixtures("four_eyes")
def test_the_requester_never_votes(world: World) -> None:
    from dispatch.services.authority import grant_issue
    from dispatch.services.principals import human_create
    from dispatch.services.proposals import proposal_create

    human, _ = human_create(name="olga", tenant="acme", role="operator", password="pw",
                            tools=["payments.transfer"])
    grant_issue(issuer="admin", subject=human, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=world.now)
    proposal = proposal_create(principal=human, operation="payments.transfer", arguments={
        "from_account": "acct-001", "to_account": "acct-999", "amount": LARGE,
        "currency": "EUR"}, now=world.now)
    vote(world, proposal, world.approver)
    assert refused(world, proposal, human).code is DenialCode.APPROVER_IS_REQUESTER
    assert Vote.objects.count() == 1 and not Permit.objects.exists()


@pytest.mark.usefixtures("four_eyes")
def test_a_vote_is_bound_to_the_digest(world: World) -> None:
    proposal = world.propose_transfer(LARGE)
    with pytest.raises(Denial) as denial:
        approval_decide(approver=world.approver, approval_id=proposal.approval.id,
                        decision="grant", digest="sha256:" + "0" * 64, now=world.now)
    assert denial.value.code is DenialCode.PROPOSAL_MISMATCH
    assert not Vote.objects.exists()


def test_a_rule_change_between_proposal_and_dispatch_is_contract_mismatch(
        world: World, settings: Any) -> None:
    get_runtime.cache_clear()
    try:
        proposal = world.propose_transfer("500.00")
        world.grant(proposal)
        settings.APPROVAL_RULES = FOUR_EYES  # deployed after the proposal was made
        get_runtime.cache_clear()
        with pytest.raises(Denial) as denial:
            proposal_dispatch(principal=world.owner, proposal_id=proposal.id, now=world.now,
                              enqueue=False)
        assert denial.value.code is DenialCode.CONTRACT_MISMATCH
    finally:
        settings.APPROVAL_RULES = []
        get_runtime.cache_clear()


def test_a_rule_for_another_operation_leaves_a_contract_fingerprint_alone(
        settings: Any) -> None:
    contract = get_runtime().registry.resolve("email.send")
    before = get_runtime().policy_fingerprint(contract)
    settings.APPROVAL_RULES = FOUR_EYES
    get_runtime.cache_clear()
    try:
        runtime = get_runtime()
        assert runtime.policy_fingerprint(runtime.registry.resolve("email.send")) == before
        transfer = runtime.registry.resolve("payments.transfer")
        settings.APPROVAL_RULES = []
        get_runtime.cache_clear()
        assert get_runtime().policy_fingerprint(transfer) != runtime.policy_fingerprint(transfer)
    finally:
        settings.APPROVAL_RULES = []
        get_runtime.cache_clear()


def test_a_contract_may_declare_its_own_quorum() -> None:
    assert ApprovalRequirement("operator", 60, quorum=2).declaration()["quorum"] == 2
    # A quorum of one is not declared: existing contracts keep their fingerprints.
    assert "quorum" not in ApprovalRequirement("operator", 60).declaration()
    for wrong in (0, 11, True):
        with pytest.raises(ValueError, match="quorum"):
            ApprovalRequirement("operator", 60, quorum=wrong)
