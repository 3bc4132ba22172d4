"""Every path to an effect stays inside its run (docs/design.md#run-trees): an agent step's loop
and a delegated sub-agent are executions of the run's tree, and each check that keeps the run's
promise walks the path to its root: a cancelled run leaves nothing of its tree to run (its
agent steps' pending approvals withdrawn, its delegated grants revoked), an agent step's call is
held to the workflow's declared authority, and its calls are charged to the run's ceilings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from django.utils import timezone

from demo.destinations.runner import list_all
from dispatch.agent import ScriptedAdapter
from dispatch.models import ApprovalRequest, Delegation, Execution, Operation, Permit, Proposal
from dispatch.runtime import get_runtime
from dispatch.services.ceilings import Ceiling
from dispatch.services.run_stops import execution_cancel
from dispatch.workflows import WorkflowRun, run_workflow
from protocols.denials import Denial, DenialCode
from protocols.jsontypes import JSONValue
from protocols.workflow import CheckedWorkflow, check_source
from tests.conftest import MAILBOX, World
from tests.support.delegation import delegated_workflow
from tests.support.destinations import Destinations
from tests.workflows.test_agent_steps import REPLY, SEND, SENDER

pytestmark = pytest.mark.django_db



def checked(text: str) -> CheckedWorkflow:
    result = check_source(text, get_runtime().registry, filename="tree.yaml")
    assert isinstance(result, CheckedWorkflow), result
    return result


def model(name: str, *steps: Mapping[str, JSONValue], final: JSONValue = "done") -> ScriptedAdapter:
    return ScriptedAdapter({"agent": name, "steps": [*steps, {"final": json.dumps(final)}]})


def run(world: World, text: str, agents: Mapping[str, ScriptedAdapter],
        ceiling: Ceiling | None = None, **inputs: Any) -> WorkflowRun:
    return run_workflow(checked(text), principal=world.owner, inputs=inputs or None,
                        agents=agents, now=timezone.now(), ceiling=ceiling)


def lookup(customer: str) -> dict[str, JSONValue]:
    return {"call": "crm.lookup", "arguments": {"customer_id": customer}}


def agent_calls(result: WorkflowRun) -> list[list[tuple[str, str | None]]]:
    return [[(c["status"], c["code"]) for c in o.detail["calls"]]
            for o in result.outcomes if o.step == "agent" and o.status == "completed"]




def _cancelled_leaves_nothing(live: World, destinations: Destinations, result: WorkflowRun,
                              proposal: Proposal) -> None:
    """Cancel the run waiting on `proposal` (made inside its tree): nothing of it runs."""
    approval_id = proposal.approval.id
    execution_cancel(actor=live.owner, execution_id=result.execution_id, now=timezone.now(),
                     reason="not needed any more")
    assert Proposal.objects.get(id=proposal.id).cancelled_at is not None
    assert ApprovalRequest.objects.get(id=approval_id).state == "revoked"
    with pytest.raises(Denial) as late:  # no operator can approve it any more
        live.grant(Proposal.objects.get(id=proposal.id))
    assert late.value.code in (DenialCode.APPROVAL_REVOKED, DenialCode.APPROVAL_DECIDED)
    assert not Permit.objects.filter(proposal_id=proposal.id).exists()
    assert not Operation.objects.filter(proposal_id=proposal.id).exists()
    # Every execution of the tree has ended with the run.
    tree = Execution.objects.filter(id=proposal.execution_id).get()
    assert tree.state == "cancelled" and tree.root_id == result.execution_id
    assert list_all(destinations.directory)["email"] == []


def test_a_cancelled_run_withdraws_its_agent_steps_pending_approval(
        live: World, destinations: Destinations) -> None:
    result = run(live, SENDER, {"sender": model("sender", REPLY, SEND, final="sent")})
    assert result.state == "waiting", result
    proposal = Proposal.objects.select_related("approval").get(operation="email.send")
    # The agent step's loop is its own execution, in the run's tree.
    assert proposal.execution_id != result.execution_id
    _cancelled_leaves_nothing(live, destinations, result, proposal)


def test_a_cancelled_run_revokes_its_delegated_grant_and_withdraws_the_sub_agents_approval(
        live: World, destinations: Destinations) -> None:
    text = delegated_workflow(
        operations="[email.send]", scope=f"{{mailbox: [{MAILBOX}]}}", budget=3,
        authority=f"[{{operations: [email.send], scope: {{mailbox: [{MAILBOX}]}}}}]",
        effects="[human, external_write]")
    result = run(live, text, {"researcher": model("researcher", REPLY, SEND)})
    assert result.state == "waiting", result
    delegation = Delegation.objects.select_related("grant").get()
    proposal = Proposal.objects.select_related("approval").get(operation="email.send")
    assert proposal.principal_id == delegation.principal_id
    _cancelled_leaves_nothing(live, destinations, result, proposal)
    delegation.refresh_from_db()
    delegation.grant.refresh_from_db()
    assert delegation.ended_at is not None and delegation.end_reason == "run_ended"
    assert delegation.grant.revoked_at is not None


LOOKUP_ONE = """version: 1
name: one-customer
effects: [read]
authority:
  - operations: [crm.lookup]
    scope: {customer: [cus-001]}
steps:
  - agent: researcher
    tools: [crm.lookup]
    bind: notes
"""


def test_an_agent_steps_call_outside_the_workflows_authority_is_a_scope_violation(
        world: World) -> None:
    # The principal's grant covers every customer; the workflow declares one.
    result = run(world, LOOKUP_ONE,
                 {"researcher": model("researcher", lookup("cus-002"), lookup("cus-001"))})
    assert result.state == "finished", result
    assert agent_calls(result) == [[("denied", "scope_violation"), ("completed", None)]]
    assert list(Operation.objects.values_list("proposal__arguments__customer_id", flat=True)) \
        == ["cus-001"]
    assert not Proposal.objects.filter(arguments__customer_id="cus-002").exists()


THREE_AGENTS = """version: 1
name: three-agents
effects: [read]
authority:
  - operations: [crm.lookup]
    scope: {customer: "*"}
steps:
  - agent: first
    tools: [crm.lookup]
  - agent: second
    tools: [crm.lookup]
  - agent: third
    tools: [crm.lookup]
"""


def test_agent_steps_past_the_runs_calls_ceiling_are_budget_exhausted_naming_the_scope(
        world: World) -> None:
    agents = {name: model(name, lookup("cus-001")) for name in ("first", "second", "third")}
    result = run(world, THREE_AGENTS, agents, ceiling=Ceiling(calls=1, attempts=10,
                                                              concurrency=4))
    assert result.state == "finished", result
    assert agent_calls(result) == [[("completed", None)], [("denied", "budget_exhausted")],
                                   [("denied", "budget_exhausted")]]
    assert Operation.objects.filter(state="completed").count() == 1
    refusals = [c for o in result.outcomes if o.step == "agent" for c in o.detail["calls"]
                if c["code"] == "budget_exhausted"]
    assert len(refusals) == 2


def test_pausing_the_runs_agent_pauses_its_sub_agents_claims(world: World) -> None:
    from dispatch.services.pauses import pause_set

    pause_set(actor=world.admin, tenant=world.admin.tenant, now=timezone.now(),
              agent=world.owner)
    result = run(world, delegated_workflow(budget=3),
                 {"researcher": model("researcher", lookup("cus-001"))})
    assert result.state == "finished", result
    delegation = Delegation.objects.get()
    assert delegation.principal_id != world.owner.id  # the sub-agent is a principal of its own
    assert agent_calls(result) == [[("denied", "paused")]]
    assert not Operation.objects.exists()


def test_a_retry_waking_after_its_run_ended_is_refused(
        world: World, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop ends the run, then withdraws its actions one by one: a retry that wakes from
    its backoff in between finds the run ended and starts nothing."""
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.executions import execution_create
    from dispatch.services.run_stops import _end
    from dispatch.services.worker import operation_execute
    from protocols.lifecycle_runs import ExecutionEvent
    from tests.support.standins import bank_standin, bank_url

    with bank_standin() as bank:
        settings.DESTINATIONS = {**settings.DESTINATIONS, "bank_url": bank_url(bank)}
        get_runtime.cache_clear()
        bank.outage = 60.0  # every attempt is answered 503: uncertain, retried under one key
        run_ = execution_create(principal=world.owner, adapter="workflow:test", now=world.now)
        proposal = world.propose_transfer("25.00", execution_id=run_.id)
        world.grant(proposal)
        operation = proposal_dispatch(principal=world.owner, proposal_id=proposal.id,
                                      now=world.now, enqueue=False)

        def the_run_ends(name: str) -> None:
            if name == "attempt.before_retry":  # once: a second call finds it ended
                _end(run_, ExecutionEvent.CANCEL, actor="test", now=timezone.now(),
                     reason="cancelled during the backoff")

        monkeypatch.setattr("dispatch.services.worker.failpoint", the_run_ends)
        operation_execute(operation_id=operation.id)
    get_runtime.cache_clear()
    operation.refresh_from_db()
    assert len(bank.keys) == 1  # no attempt after the run ended
    assert operation.state == "unknown"  # the first attempt was uncertain: sticky


def test_another_principal_naming_a_runs_execution_id_joins_nothing_of_it(
        world: World) -> None:
    """An execution id is the caller's word: another agent naming a run's id gets no share of
    its ceilings, its stop or its canceller, exactly as with a fresh id (nothing leaks)."""
    from dispatch.services.authority import grant_issue
    from dispatch.services.ceilings import scope_open, scope_remaining
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.executions import execution_create
    from dispatch.services.principals import agent_create
    from dispatch.services.proposals import proposal_create
    from dispatch.services.run_stops import _end
    from dispatch.services.worker import operation_execute
    from protocols.lifecycle_runs import ExecutionEvent
    from tests.conftest import ALL_TOOLS

    run_ = execution_create(principal=world.owner, adapter="workflow:test", now=world.now)
    root = scope_open(execution=run_, name="run", ceiling=Ceiling(1, 1, 1), now=world.now)
    other, _ = agent_create(name="other", tenant="acme", tools=ALL_TOOLS)
    grant_issue(issuer="admin", subject=other, operations=["crm.lookup"],
                scope={"customer": "*"}, now=world.now)

    def lookup_by_other() -> Operation:
        proposal = proposal_create(principal=other, operation="crm.lookup",
                                   arguments={"customer_id": "cus-001"},
                                   execution_id=run_.id, now=timezone.now())
        claimed = proposal_dispatch(principal=other, proposal_id=proposal.id,
                                    now=timezone.now(), enqueue=False)
        return operation_execute(operation_id=claimed.id)

    assert [lookup_by_other().state for _ in range(2)] == ["completed", "completed"]
    assert scope_remaining(root.id) == {"calls": 1, "attempts": 1, "concurrency": 1}
    assert _end(run_, ExecutionEvent.CANCEL, actor="test", now=timezone.now(), reason="done")
    assert lookup_by_other().state == "completed"  # the owner's run ended, not theirs


def test_a_run_past_its_deadline_claims_and_starts_nothing_before_the_sweep(
        world: World) -> None:
    """A deadline is a stop even before the beat's sweep times the run out: a permit of the run
    is not claimed past it, and an action claimed before it does not start its attempt after
    it. The lifecycle model over workflows found the first: a permitted action dispatched 16 s
    after its run's deadline ran (docs/reliability.md#workflows)."""
    from datetime import timedelta

    from dispatch.models import Attempt
    from dispatch.services.dispatcher import proposal_dispatch
    from dispatch.services.executions import execution_create
    from dispatch.services.run_stops import executions_expire
    from dispatch.services.worker import operation_execute

    deadline = world.now + timedelta(seconds=30)
    run_ = execution_create(principal=world.owner, adapter="workflow:test", now=world.now,
                            deadline_at=deadline)
    late, early = (world.propose_transfer(memo=memo, execution_id=run_.id)
                   for memo in ("late", "early"))
    for proposal in (late, early):
        world.grant(proposal)
    after = deadline + timedelta(seconds=16)
    with pytest.raises(Denial) as refused:
        proposal_dispatch(principal=world.owner, proposal_id=late.id, now=after, enqueue=False)
    assert refused.value.code is DenialCode.PROTOCOL_STATE_INVALID
    assert "deadline" in refused.value.message
    claimed = proposal_dispatch(principal=world.owner, proposal_id=early.id, now=world.now,
                                enqueue=False)
    assert operation_execute(operation_id=claimed.id, clock=lambda: after).state == "claimed"
    assert not Attempt.objects.filter(operation_id=claimed.id).exists()
    # The sweep then ends the run and its actions, without effect.
    assert executions_expire(now=after) == 1
    claimed.refresh_from_db()
    assert claimed.state == "failed_no_effect"  # cancelled before any attempt
    assert not Attempt.objects.exists()
