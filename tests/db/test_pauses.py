"""The emergency stop (docs/design.md#approval-policies): an admin pauses a tenant, a contract or
an agent; from that commit on every claim and every attempt start in its scope is refused with
`paused` (403), pending approvals stay and can be decided, and resuming, audited, lets the
waiting work go on."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from dispatch.models import Attempt, AuditEvent, Operation, Pause, Permit, Tenant
from dispatch.selectors.pauses import pauses_in_force
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.pauses import pause_lift, pause_set
from dispatch.services.worker import operation_execute
from protocols.denials import Denial, DenialCode
from tests.conftest import World
from tests.support.caps import second_agent

pytestmark = pytest.mark.django_db


def dispatch(world: World, proposal: Any, agent: Any = None) -> Operation:
    return proposal_dispatch(principal=agent or world.owner, proposal_id=proposal.id,
                             now=timezone.now(), enqueue=False)


def refused(world: World, proposal: Any, agent: Any = None) -> Denial:
    with pytest.raises(Denial) as denial:
        dispatch(world, proposal, agent)
    return denial.value


def approved_transfer(world: World, agent: Any = None) -> Any:
    from dispatch.services.proposals import proposal_create

    proposal = proposal_create(principal=agent or world.owner, operation="payments.transfer",
                               arguments={"from_account": "acct-001", "to_account": "acct-999",
                                          "amount": "10.00", "currency": "EUR", "memo": ""},
                               now=world.now)
    world.grant(proposal)
    return proposal


def pause(world: World, **scope: Any) -> Pause:
    found, _ = pause_set(actor=world.admin, tenant=world.admin.tenant, now=timezone.now(),
                         **scope)
    return found


def resume(world: World, **scope: Any) -> Pause:
    return pause_lift(actor=world.admin, tenant=world.admin.tenant, now=timezone.now(),
                      **scope)


def test_a_paused_tenant_refuses_every_claim_and_says_who_paused_it(world: World) -> None:
    proposal = approved_transfer(world)
    paused = pause(world, reason="suspicious transfers")
    denial = refused(world, proposal)
    assert (denial.code, denial.status) == (DenialCode.PAUSED, 403)
    assert denial.details == {"pause_id": paused.id, "scope": "the tenant",
                              "paused_by": "admin", "paused_at": paused.paused_at.isoformat(),
                              "reason": "suspicious transfers"}
    assert not Operation.objects.exists()
    assert Permit.objects.get(proposal=proposal).state == "issued"  # nothing consumed
    denied = AuditEvent.objects.get(kind="dispatch.denied", proposal_id=proposal.id)
    assert denied.details["code"] == "paused"
    # Another tenant goes on.
    outsider = world.outsider
    assert Tenant.objects.get(id=outsider.tenant_id).pauses == 0


def test_pending_approvals_stay_and_can_be_decided_while_paused(world: World) -> None:
    from dispatch.services.proposals import proposal_create
    from dispatch.services.runs import proposal_run_approved

    pause(world)
    proposal = proposal_create(principal=world.owner, operation="payments.transfer",
                               arguments={"from_account": "acct-001", "to_account": "acct-999",
                                          "amount": "10.00", "currency": "EUR", "memo": ""},
                               now=world.now, dispatch_on_approval=True)
    assert proposal.approval.state == "pending"
    permit = world.grant(proposal)  # the decision stands; the worker's claim is refused
    assert proposal_run_approved(proposal_id=proposal.id, principal_id=world.owner.id) is None
    assert Permit.objects.get(id=permit.id).state == "issued"
    assert not Operation.objects.exists()
    resume(world)
    assert dispatch(world, proposal).proposal_id == proposal.id


def test_a_paused_contract_refuses_only_its_own_claims(world: World) -> None:
    from tests.db.denials.support import propose_lookup

    transfer = approved_transfer(world)
    pause(world, operation="payments.transfer")
    assert refused(world, transfer).details["scope"] == "contract payments.transfer"
    dispatch(world, propose_lookup(world))  # crm.lookup is not paused


def test_a_paused_agent_refuses_only_its_own_claims(world: World) -> None:
    other = second_agent()
    mine, theirs = approved_transfer(world), approved_transfer(world, other)
    pause(world, agent=world.owner)
    assert refused(world, mine).details["scope"] == "agent owner"
    dispatch(world, theirs, other)


def test_an_attempt_start_is_refused_while_paused_and_the_operation_waits(
    world: World, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any,
) -> None:
    queued: list[str] = []
    monkeypatch.setattr("dispatch.queue.execute_now", queued.append)
    from tests.db.denials.support import propose_lookup

    operation = dispatch(world, propose_lookup(world))  # claimed, its worker not yet started
    pause(world, operation="crm.lookup")
    assert operation_execute(operation_id=operation.id).state == "claimed"
    operation.refresh_from_db()
    assert (operation.state, operation.attempts_made) == ("claimed", 0)
    assert not Attempt.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        resume(world, operation="crm.lookup")
    assert queued == [operation.id]  # handed back to the workers when the resume commits


def test_pause_and_resume_are_audited_and_resume_names_the_same_scope(world: World) -> None:
    paused = pause(world, operation="payments.transfer", agent=world.owner)
    assert pause(world, operation="payments.transfer", agent=world.owner) == paused  # once
    assert [view.pause for view in pauses_in_force(tenant_id=world.admin.tenant_id)] == [paused]
    with pytest.raises(Denial) as wrong:
        resume(world, operation="payments.transfer")  # not what was paused
    assert wrong.value.code is DenialCode.NOT_FOUND
    lifted = resume(world, operation="payments.transfer", agent=world.owner)
    assert lifted.lifted_by == "admin" and lifted.lifted_at is not None
    assert pauses_in_force(tenant_id=world.admin.tenant_id) == []
    assert Tenant.objects.get(id=world.admin.tenant_id).pauses == 0
    kinds = list(AuditEvent.objects.filter(kind__startswith="pause.").order_by("id")
                 .values_list("kind", "actor", "details__scope"))
    assert kinds == [("pause.set", "admin", "contract payments.transfer of agent owner"),
                     ("pause.lifted", "admin", "contract payments.transfer of agent owner")]


def test_only_an_admin_of_the_tenant_pauses(world: World) -> None:
    with pytest.raises(Denial) as operator:
        pause_set(actor=world.approver, tenant=world.admin.tenant, now=timezone.now())
    assert operator.value.code is DenialCode.ROLE_REQUIRED
    other = Tenant.objects.get(id=world.outsider.tenant_id)
    with pytest.raises(Denial) as outsider:
        pause_set(actor=world.admin, tenant=other, now=timezone.now())
    assert outsider.value.code is DenialCode.NOT_FOUND
    with pytest.raises(Denial) as foreign_agent:
        pause(world, agent=world.outsider)
    assert foreign_agent.value.code is DenialCode.NOT_FOUND
    with pytest.raises(Denial) as typo:
        pause(world, operation="payments.tranfser")
    assert typo.value.code is DenialCode.UNKNOWN_OPERATION
    assert not Pause.objects.exists()


def command(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().strip()


def test_the_commands_pause_and_resume(world: World) -> None:
    proposal = approved_transfer(world)
    said = command("pause", "--tenant", "acme", "--agent", "owner")
    assert said.startswith("paused agent owner since ") and said.endswith(" by manage.py")
    assert command("pause", "--tenant", "acme", "--agent", "owner").startswith("already paused")
    assert refused(world, proposal).code is DenialCode.PAUSED
    assert command("resume", "--tenant", "acme", "--agent", "owner").startswith(
        "resumed agent owner")
    dispatch(world, proposal)
    with pytest.raises(CommandError, match="not_found: Nothing is paused with exactly"):
        command("resume", "--tenant", "acme")
    with pytest.raises(CommandError, match="no tenant named 'nope'"):
        command("pause", "--tenant", "nope")
    with pytest.raises(CommandError, match="no agent named 'approver'"):
        command("pause", "--tenant", "acme", "--agent", "approver")
    with pytest.raises(CommandError, match=r"no registered contract is named 'x\.y'"):
        command("pause", "--tenant", "acme", "--operation", "x.y")
