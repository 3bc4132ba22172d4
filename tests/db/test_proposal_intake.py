"""Idempotent intake (docs/rest-api.md#proposal, `call_id`): the same principal, execution id and
call id answer with the proposal made first; another action under them is `proposal_mismatch`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatch.models import ApprovalRequest, AuditEvent, Proposal
from dispatch.services import admission
from dispatch.services.authority import grant_issue
from dispatch.services.principals import agent_create
from dispatch.services.proposals import proposal_create
from protocols.denials import Denial, DenialCode
from tests.conftest import ALL_TOOLS, World

pytestmark = pytest.mark.django_db


def transfer(**overrides: Any) -> dict[str, Any]:
    arguments = {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                 "currency": "EUR"}
    arguments.update(overrides)
    return arguments


def propose(world: World, arguments: dict[str, Any] | None = None, *,
            operation: str = "payments.transfer", principal: Any = None,
            **extra: Any) -> Proposal:
    return proposal_create(principal=principal or world.owner, operation=operation,
                           arguments=transfer() if arguments is None else arguments,
                           now=world.now, **extra)


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Denial:
    with pytest.raises(Denial) as caught:
        call(*args, **kwargs)
    return caught.value


def rows() -> dict[str, Any]:
    return {"proposals": sorted(Proposal.objects.values_list("id", flat=True)),
            "approvals": ApprovalRequest.objects.count(),
            "audit": AuditEvent.objects.count()}


def test_a_repeated_call_answers_the_first_proposal(world: World) -> None:
    first = propose(world, execution_id="exe-1", call_id="call-1")
    before = rows()

    again = propose(world, execution_id="exe-1", call_id="call-1")

    assert again.id == first.id
    assert rows() == before  # no second proposal, approval request or audit row


def test_a_call_without_an_execution_id_is_the_principals(world: World) -> None:
    first = propose(world, call_id="call-1")
    assert first.execution_id.startswith("exe_")  # one was made up for it

    again = propose(world, call_id="call-1")

    assert again.id == first.id
    assert Proposal.objects.count() == 1


def test_each_scope_of_a_call_id_is_its_own(world: World) -> None:
    other, _ = agent_create(name="other", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=other, operations=["payments.transfer"],
                scope={"account": ["acct-001"]}, now=world.now)
    made = {
        propose(world, execution_id="exe-1", call_id="call-1").id,
        propose(world, execution_id="exe-2", call_id="call-1").id,
        propose(world, call_id="call-1").id,
        propose(world, principal=other, execution_id="exe-1", call_id="call-1").id,
        propose(world, principal=other, call_id="call-1").id,
    }
    assert len(made) == 5
    # Without a call id, every proposal is a new one.
    assert propose(world, execution_id="exe-1").id != propose(world, execution_id="exe-1").id


@pytest.mark.parametrize("scope", [{"execution_id": "exe-1"}, {}])
def test_the_same_validated_arguments_are_the_same_action(
    world: World, scope: dict[str, str],
) -> None:
    """Defaults materialized and normalizers applied: `memo` omitted is `memo: ""`, and
    `"10"` is the amount `"10.00"`."""
    first = propose(world, transfer(amount="10.00"), call_id="call-1", **scope)
    again = propose(world, transfer(amount="10", memo=""), call_id="call-1", **scope)
    assert again.id == first.id


@pytest.mark.parametrize(("operation", "arguments"), [
    ("payments.transfer", transfer(amount="11.00")),
    ("payments.transfer", transfer(memo="another memo")),
    ("crm.lookup", {"customer_id": "cus-001"}),
])
@pytest.mark.parametrize("scope", [{"execution_id": "exe-1"}, {}])
def test_another_action_under_the_call_is_a_mismatch(
    world: World, operation: str, arguments: dict[str, Any], scope: dict[str, str],
) -> None:
    first = propose(world, call_id="call-1", **scope)
    before = rows()

    denial = refused(propose, world, arguments, operation=operation, call_id="call-1", **scope)

    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    # Nothing made; the refusal audited.
    assert rows() == {**before, "audit": before["audit"] + 1}
    assert AuditEvent.objects.latest("id").details == {"code": "proposal_mismatch"}
    assert propose(world, call_id="call-1", **scope).id == first.id


@pytest.mark.parametrize("scope", [{"execution_id": "exe-1"}, {}])
def test_a_racing_proposal_of_the_call_is_checked_too(
    world: World, monkeypatch: pytest.MonkeyPatch, scope: dict[str, str],
) -> None:
    """The other request commits its proposal of the call after this one looked for it and
    before this one inserts: the unique constraint decides, and the bodies are compared."""
    started: list[bool] = []
    rival: list[Proposal] = []
    check_authority = admission.check_authority

    def rival_commits_first(*args: Any, **kwargs: Any) -> Any:
        if not started:  # once, from the request under test; the rival's own call passes
            started.append(True)
            rival.append(propose(world, transfer(amount="99.00"), call_id="call-1", **scope))
        return check_authority(*args, **kwargs)

    monkeypatch.setattr(admission, "check_authority", rival_commits_first)

    denial = refused(propose, world, transfer(amount="10.00"), call_id="call-1", **scope)

    assert denial.code is DenialCode.PROPOSAL_MISMATCH
    assert [p.id for p in Proposal.objects.all()] == [rival[0].id]


@pytest.mark.parametrize("scope", [{"execution_id": "exe-1"}, {}])
def test_a_racing_proposal_of_the_same_action_is_the_answer(
    world: World, monkeypatch: pytest.MonkeyPatch, scope: dict[str, str],
) -> None:
    started: list[bool] = []
    rival: list[Proposal] = []
    check_authority = admission.check_authority

    def rival_commits_first(*args: Any, **kwargs: Any) -> Any:
        if not started:
            started.append(True)
            rival.append(propose(world, call_id="call-1", **scope))
        return check_authority(*args, **kwargs)

    monkeypatch.setattr(admission, "check_authority", rival_commits_first)

    assert propose(world, call_id="call-1", **scope).id == rival[0].id
    assert Proposal.objects.count() == 1


@pytest.mark.parametrize("call_id", [
    "", "x" * 201, "caf\u00e9", "tab\tbed", "new\nline", "\x7f", "nul\x00", 7, ["call-1"],
])
def test_a_call_id_is_one_to_200_printable_ascii_characters(world: World, call_id: Any) -> None:
    denial = refused(propose, world, call_id=call_id)
    assert denial.code is DenialCode.SCHEMA_INVALID
    assert [e["pointer"] for e in denial.details["errors"]] == ["/call_id"]
    assert not Proposal.objects.exists()


@pytest.mark.parametrize("call_id", ["x" * 200, " ", "~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"])
def test_every_printable_ascii_call_id_up_to_200_is_kept(world: World, call_id: str) -> None:
    first = propose(world, call_id=call_id)
    assert Proposal.objects.get(id=first.id).call_id == call_id
    assert propose(world, call_id=call_id).id == first.id
