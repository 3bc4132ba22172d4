"""The lifecycle model over whole workflows (docs/reliability.md#workflows): the state machine
of tests/model/machine.py, with every one of its rules and checks, and runs of workflows beside
its single actions.

A run is drawn whole: one to three `agent` steps, one after the other or as the lanes of a
`parallel`, each undelegated (the run's own agent loop) or delegated to a sub-agent under a
child grant; each agent's tool calls are drawn too (a transfer inside the workflow's declared
authority or outside it, a payment in euros, yen or dinars, small or large), and so are the
run's ceilings and its deadline. The runs go through the real `run_workflow` in `worker` mode:
an action waits for its approval and for a worker like any other, and the model's rules are
what moves them (the operators' votes, the workers, the resumption of a waiting run, a
cancellation, a deadline and its sweep, a pause of the agent, an operator deactivated between
two votes). Approval rules and spend caps are the deployment's (`RULES`): a large payment needs
two operators, and each currency has a cap of its own, or none.

New checks after every step, each reading the store and the destinations, never the runtime's
own bookkeeping:

- `effect_after_cancel`: no attempt starts after its run was cancelled, after its run's
  deadline, or after its proposal was cancelled;
- `scope_escape`: no effect outside the authority along its path (the workflow declares one
  account; the agent's grant covers two);
- `ceiling_exceeded`: no run's tree holds more actions, attempts or actions in flight than its
  ceilings, at any step;
- `quorum_short`: no permit is minted with fewer grants of still-active operators than the rules
  ask for its arguments;
- `cap_exceeded`: the effects of the agent's payments (its sub-agents' included: they spend for
  it) sum to at most the cap of their currency per day, and none is in a currency no cap sums.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

from django.db.models import Max
from django.test import override_settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from dispatch.models import AuditEvent, Execution, Operation, Permit, Proposal, Vote
from tests.model.destinations import CURRENT
from tests.model.extension import PAY, TRANSFER
from tests.model.machine import FIGURES, SCRIPTS, LifecycleModel, ProposalRef, model_runtime

T = TypeVar("T")

#: The account the workflows declare; the agent's grant also covers the second.
DECLARED = "acct-001"
OUTSIDE = "acct-002"
#: The deployment's rules: a large payment needs two operators, per currency; each currency
#: the agent may pay in has a daily cap of its own; dinars have neither.
LARGE = {"EUR": Decimal("100.00"), "JPY": Decimal("15000")}
CAPS = {"EUR": Decimal("250.00"), "JPY": Decimal("30000")}
RULES: list[dict[str, Any]] = [
    *({"operation": PAY, "quorum": 2,
       "when": {"amount": {"gte": str(amount)}, "currency": {"eq": currency}}}
      for currency, amount in LARGE.items()),
    *({"operation": PAY, "when": {"currency": {"eq": currency}},
       "cap": {"argument": "amount", "sum": str(cap), "per": "day", "scope": "agent"}}
      for currency, cap in CAPS.items()),
]
#: The tool calls an agent may draw: (operation, account, amount, currency).
CALLS = (
    (TRANSFER, DECLARED, "10.00", None), (TRANSFER, OUTSIDE, "10.00", None),
    (PAY, DECLARED, "60.00", "EUR"), (PAY, DECLARED, "150.00", "EUR"),
    (PAY, DECLARED, "9000", "JPY"), (PAY, DECLARED, "20000", "JPY"),
    (PAY, DECLARED, "50.000", "KWD"),
)
Call = tuple[str, str, str, str | None]
#: An agent step: delegated or not, and its agent's tool calls.
STEP = st.tuples(st.booleans(), st.lists(st.sampled_from(CALLS), min_size=1, max_size=2))
#: A run: its steps, and whether they are the lanes of a `parallel`.
SHAPE = st.tuples(st.lists(STEP, min_size=1, max_size=3), st.booleans())
#: A run's ceilings: tool calls, attempts, actions in flight.
CEILING = st.tuples(st.sampled_from((1, 2, 4, 20)), st.sampled_from((2, 20)),
                    st.sampled_from((1, 2, 4)))
#: A run's deadline in seconds (the `let_time_pass` rule moves 1, 16, 46 or 3601 s).
DEADLINE = st.sampled_from((None, 30))
MAX_LIVE_RUNS = 2
#: A delegated step's budget of tool calls (carved out of the run's calls).
DELEGATED_BUDGET = 2
VOTERS = ("operator", "operator2", "operator3")


def workflow_text(steps: list[tuple[bool, list[Call]]], parallel: bool) -> str:
    """The workflow of a drawn run: its agent steps in order, or as a `parallel`'s lanes."""
    bodies = []
    for index, (delegated, _) in enumerate(steps):
        body = [f"- agent: a{index}"]
        if delegated:
            body += ["  delegate:", f"    operations: [{TRANSFER}, {PAY}]",
                     f"    scope: {{account: [{DECLARED}]}}", "    expires_in: 86400",
                     f"    budget: {DELEGATED_BUDGET}"]
        else:
            body += [f"  tools: [{TRANSFER}, {PAY}]"]
        bodies.append(body)
    lines = ["version: 1", "name: model-run", "effects: [human, external_write, financial_write]",
             "authority:", f"  - operations: [{TRANSFER}, {PAY}]",
             f"    scope: {{account: [{DECLARED}]}}", "steps:"]
    if parallel and len(bodies) > 1:
        lines.append("  - parallel:")
        for index, body in enumerate(bodies):
            lines.append(f"      lane{index}:")
            lines += [f"        {line}" for line in body]
    else:
        lines += [f"  {line}" for body in bodies for line in body]
    return "\n".join(lines) + "\n"


def arguments(call: Call, memo: str) -> dict[str, Any]:
    operation, account, amount, currency = call
    if operation == TRANSFER:
        return {"from_account": account, "to_account": "acct-999", "amount": amount,
                "memo": memo}
    return {"from_account": account, "to_account": "acct-999", "amount": amount,
            "currency": currency}


def quorum_needed(operation: str, given: dict[str, Any]) -> int:
    """The grants a permit needs by `RULES`, worked out here: two for a large payment, and for
    one in a currency no quorum rule names (the largest quorum of its operation)."""
    if operation != PAY:
        return 1
    currency = given.get("currency")
    if currency not in LARGE:
        return 2
    return 2 if Decimal(given["amount"]) >= LARGE[currency] else 1


@dataclass(eq=False)
class RunRef:
    label: str
    execution_id: str
    checked: Any  # CheckedWorkflow
    scripts: dict[str, dict[str, Any]]
    limits: tuple[int, int, int]  # calls, attempts, concurrency
    deadline_at: datetime | None
    state: str  # the last result: waiting, finished, denied
    stopped_after: int | None = None  # the newest audit event when the model cancelled it

    def __repr__(self) -> str:
        return self.label


class WorkflowModel(LifecycleModel):
    """The lifecycle model with workflow runs, three operators and the deployment's rules."""

    GRANTS: ClassVar[dict[str, tuple[tuple[str, ...], dict[str, Any]]]] = {
        **LifecycleModel.GRANTS,
        "transfer": ((TRANSFER, PAY), {"account": [DECLARED, OUTSIDE]}),
    }

    def __init__(self) -> None:
        from dispatch.services.principals import human_create

        super().__init__()
        self.voters = {"operator": self.operator}
        for name in VOTERS[1:]:
            self.voters[name], _ = human_create(name=name, tenant="acme", role="operator",
                                                password="pw")
        self.runs: dict[str, RunRef] = {}
        self.adopted = 0
        self.attempts_seen = 0
        self.permits_seen: set[str] = set()
        self.deactivated = False
        self.paused = False

    # Runs.

    def _run(self, call: Callable[[], T]) -> T | None:
        """A run's call: a refusal is an answer."""
        from dispatch.workflows import WorkflowRefused

        try:
            return self._process(call)
        except WorkflowRefused as refused:
            FIGURES.denials[f"run refused: {refused.code.value}"] += 1
            return None

    def _agents(self, scripts: dict[str, dict[str, Any]]) -> dict[str, Any]:
        from dispatch.agent import ScriptedAdapter

        return {name: ScriptedAdapter(script) for name, script in scripts.items()}

    def _live_runs(self) -> list[RunRef]:
        live = set(Execution.objects.filter(id__in=list(self.runs)).exclude(
            state__in=("cancelled", "timed_out", "finished")).values_list("id", flat=True))
        return [run for run in self.runs.values() if run.execution_id in live]

    @initialize(shape=SHAPE, limits=CEILING, deadline=DEADLINE)
    def start_first_run(self, shape: tuple[list[tuple[bool, list[Call]]], bool],
                        limits: tuple[int, int, int], deadline: int | None) -> None:
        """Every example starts a run too."""
        self.start_run(shape, limits, deadline)

    @precondition(lambda self: len(self._live_runs()) < MAX_LIVE_RUNS)
    @rule(shape=SHAPE, limits=CEILING, deadline=DEADLINE)
    def start_run(self, shape: tuple[list[tuple[bool, list[Call]]], bool],
                  limits: tuple[int, int, int], deadline: int | None) -> None:
        """The agent starts a run of a drawn workflow, with drawn ceilings and deadline."""
        from dispatch.runtime import get_runtime
        from dispatch.services.ceilings import Ceiling
        from dispatch.workflows import run_workflow
        from protocols.workflow import CheckedWorkflow, check_source

        steps, parallel = shape
        label = f"run{len(self.runs) + 1}"
        scripts = {f"a{index}": {"agent": f"a{index}", "steps": [
            *({"call": call[0], "arguments": arguments(call, f"{label}/a{index}/{n}")}
              for n, call in enumerate(calls)),
            {"final": json.dumps("done")}]} for index, (_, calls) in enumerate(steps)}
        checked = check_source(workflow_text(steps, parallel), get_runtime().registry,
                               filename=f"{label}.yaml")
        assert isinstance(checked, CheckedWorkflow), checked
        self._note(f"start_run({label}: {steps}, parallel={parallel}, ceiling={limits}, "
                   f"deadline={deadline})")
        result = self._run(lambda: run_workflow(
            checked, principal=self.agent, agents=self._agents(scripts), mode="worker",
            now=self._now, ceiling=Ceiling(*limits), deadline_s=deadline))
        if result is None:
            return
        FIGURES.outcomes[f"run started, {result.state}"] += 1
        self.runs[result.execution_id] = RunRef(
            label, result.execution_id, checked, scripts, limits,
            None if deadline is None else self._now + timedelta(seconds=deadline), result.state)

    def _waiting(self) -> list[RunRef]:
        return [run for run in self.runs.values() if run.state == "waiting"]

    @precondition(lambda self: self._waiting())
    @rule(pick=st.integers(0, 3))
    def resume_run(self, pick: int) -> None:
        """A wake-up reaches a waiting run (after a decision, an outcome, or none: a duplicate
        or the sweep's): it runs again from its journal."""
        run = self._pick(self._waiting(), pick)
        self._note(f"resume_run({run!r})")
        self._resume(run)

    def _resume(self, run: RunRef) -> None:
        from dispatch.workflows import run_workflow

        if run.state != "waiting":
            return
        result = self._run(lambda: run_workflow(
            run.checked, principal=self.agent, execution_id=run.execution_id,
            agents=self._agents(run.scripts), mode="worker", now=self._now))
        if result is not None:
            FIGURES.outcomes[f"run resumed, {result.state}"] += 1
            run.state = result.state

    @precondition(lambda self: self._waiting())
    @rule(pick=st.integers(0, 3), script=SCRIPTS, voters=st.sampled_from(((), VOTERS[:2])))
    def advance_run(self, pick: int, script: tuple[str, ...] | None,
                    voters: tuple[str, ...]) -> None:
        """A waiting run moves on: `voters` grant every approval its tree waits for, one after
        the other; it resumes, the tasks it enqueued reach a worker at once (the destination
        answering as `script` says), and their outcomes resume it again."""
        from dispatch.services.approvals import approval_decide

        run = self._pick(self._waiting(), pick)
        self._note(f"advance_run({run!r}, {script}, voters={voters})")
        tree = list(self._run_of())
        self._adopt()
        for proposal_id, approval_id in Proposal.objects.filter(
                execution_id__in=tree, approval__state="pending").values_list(
                "id", "approval__id"):
            digest = self.by_id[proposal_id].digest
            for voter in voters:
                self._process(functools.partial(
                    approval_decide, approver=self.voters[voter], approval_id=approval_id,
                    decision="grant", digest=digest, now=self._now))
        self._resume(run)
        tree = list(self._run_of())
        for proposal_id in Operation.objects.filter(
                execution_id__in=tree, state="claimed").values_list("proposal_id", flat=True):
            self._adopt()
            self._work(self.by_id[proposal_id], script)
        self._resume(run)

    @precondition(lambda self: self._live_runs())
    @rule(pick=st.integers(0, 3), by=st.sampled_from(("agent", "operator")))
    def cancel_run(self, pick: int, by: str) -> None:
        """The agent or an operator cancels a run, whatever its tree is doing."""
        from dispatch.services.run_stops import execution_cancel

        run = self._pick(self._live_runs(), pick)
        self._note(f"cancel_run({run!r}, by={by})")
        actor = self.agent if by == "agent" else self.operator
        if self._process(lambda: execution_cancel(actor=actor, execution_id=run.execution_id,
                                                  now=self._now, reason="model")) is not None:
            run.stopped_after = AuditEvent.objects.aggregate(last=Max("id"))["last"] or 0

    @precondition(lambda self: any(run.deadline_at is not None for run in self._live_runs()))
    @rule()
    def expire_runs(self) -> None:
        """The beat's sweep times out the runs whose deadline passed."""
        from dispatch.services.run_stops import executions_expire

        self._note("expire_runs()")
        self._process(lambda: executions_expire(now=self._now))

    @precondition(lambda self: self.runs)
    @rule()
    def pause_agent(self) -> None:
        """An admin pauses the agent (its sub-agents with it), or lifts the pause."""
        from dispatch.services.pauses import pause_lift, pause_set

        self.paused = not self.paused
        self._note(f"pause_agent({self.paused})")
        tenant = self.agent.tenant
        if self.paused:
            self._process(lambda: pause_set(actor=self.admin, tenant=tenant, agent=self.agent,
                                            now=self._now))
        else:
            self._process(lambda: pause_lift(actor=self.admin, tenant=tenant,
                                             agent=self.agent, now=self._now))

    @precondition(lambda self: self._awaiting())
    @rule(pick=st.integers(0, 3), voter=st.sampled_from(VOTERS),
          decision=st.sampled_from(("grant", "grant", "deny")))
    def vote(self, pick: int, voter: str, decision: str) -> None:
        """One of three operators votes on a pending approval (two grants for a large
        payment)."""
        from dispatch.services.approvals import approval_decide

        proposal = self._pick(self._awaiting(), pick)
        self._note(f"vote({proposal.label}, {voter}, {decision!r})")
        self._process(lambda: approval_decide(
            approver=self.voters[voter], approval_id=proposal.approval_id, decision=decision,
            digest=proposal.digest, now=self._now))

    @precondition(lambda self: not self.deactivated)
    @rule(voter=st.sampled_from(VOTERS[1:]))
    def deactivate(self, voter: str) -> None:
        """An admin deactivates an operator, perhaps between two votes of one approval."""
        from django.contrib.auth import get_user_model

        self._note(f"deactivate({voter})")
        get_user_model().objects.filter(id=self.voters[voter].user_id).update(is_active=False)
        self.deactivated = True

    def _sweep(self) -> None:
        """The beat's sweep of runs past their deadline runs in the drain too."""
        from dispatch.services.run_stops import executions_expire

        self._process(lambda: executions_expire(now=self._now))

    def _drain(self) -> None:
        """The drain, with the agent's pause lifted first: a paused agent's actions wait."""
        from dispatch.services.pauses import pause_lift

        if self.paused:
            self._process(lambda: pause_lift(actor=self.admin, tenant=self.agent.tenant,
                                             agent=self.agent, now=self._now))
        super()._drain()
        for principal_id, state in Operation.objects.filter(
                execution_id__in=list(self._run_of())).values_list("principal_id", "state"):
            where = "a run's" if principal_id == self.agent.id else "a sub-agent's"
            FIGURES.outcomes[f"{where} action {state}"] += 1
        from dispatch.models import TranscriptEntry

        for payload in TranscriptEntry.objects.filter(
                execution_id__in=list(self._run_of()), kind="tool_result").values_list(
                "payload", flat=True):
            if "message" not in payload:
                continue  # a workflow step's or a lane's end, not a call's outcome
            FIGURES.outcomes[f"an agent's call {payload.get('status')} "
                             f"{payload.get('code') or ''}".strip()] += 1
        for state in Execution.objects.filter(id__in=list(self.runs)).values_list(
                "state", flat=True):
            FIGURES.outcomes[f"run ended the example {state}"] += 1

    # Checks.

    @invariant()
    def invariants_hold(self) -> None:
        self._adopt()
        super().invariants_hold()
        self._check_attempt_starts()
        self._check_runs()
        self._check_permits()
        self._check_caps()

    def _adopt(self) -> None:
        """The proposals the runs' agents made become the model's to decide and dispatch."""
        for proposal_id, operation, given, digest in Proposal.objects.exclude(
                id__in=list(self.by_id)).values_list("id", "operation", "arguments", "digest"):
            self.adopted += 1
            label = f"transfer#w{self.adopted}:{operation.split('.')[1]}"
            approval = Proposal.objects.filter(id=proposal_id).values_list(
                "approval__id", flat=True).first()
            self.by_id[proposal_id] = ProposalRef(label, label, "transfer", proposal_id,
                                                  digest, approval, given, False)

    def _run_of(self) -> dict[str, RunRef]:
        """Each execution of a run's tree -> its run: the run, the loops its agent steps opened
        (named in its journal) and its sub-agents (their delegations), read from those records
        rather than from the tree the runtime keeps."""
        from dispatch.models import Delegation, TranscriptEntry

        found = dict(self.runs)
        for run_id, payload in TranscriptEntry.objects.filter(
                execution_id__in=list(self.runs), kind="tool_call").values_list(
                "execution_id", "payload"):
            if isinstance(payload, dict) and "agent_execution_id" in payload:
                found[str(payload["agent_execution_id"])] = self.runs[run_id]
        for run_id, execution_id in Delegation.objects.filter(
                execution_id__in=list(self.runs)).values_list("execution_id",
                                                              "agent_execution_id"):
            found[execution_id] = self.runs[run_id]
        return found

    def _check_attempt_starts(self) -> None:
        runs = self._run_of()
        for event_id, operation_id, proposal_id, at in AuditEvent.objects.filter(
                id__gt=self.attempts_seen, kind="attempt.started").order_by("id").values_list(
                "id", "operation_id", "proposal_id", "at"):
            self.attempts_seen = event_id
            ref = self.by_id[proposal_id]
            execution_id = Operation.objects.filter(id=operation_id).values_list(
                "execution_id", flat=True).first()
            run = runs.get(execution_id or "")
            cancelled = AuditEvent.objects.filter(kind="proposal.cancelled",
                                                  proposal_id=proposal_id, id__lt=event_id)
            if cancelled.exists():
                self.violated("effect_after_cancel",
                              f"an attempt of {ref.label} started after it was cancelled")
            if run is None:
                continue
            if run.stopped_after is not None and event_id > run.stopped_after:
                self.violated("effect_after_cancel", f"an attempt of {ref.label} started "
                              f"after its run {run.label} was cancelled")
            if run.deadline_at is not None and at > run.deadline_at:
                self.violated("effect_after_cancel", f"an attempt of {ref.label} started at "
                              f"{at:%H:%M:%S}, after its run {run.label}'s deadline "
                              f"{run.deadline_at:%H:%M:%S}")

    def _check_runs(self) -> None:
        runs = self._run_of()
        trees: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        for row in Operation.objects.filter(execution_id__in=list(runs)).values_list(
                "id", "proposal_id", "state", "attempts_made", "execution_id"):
            trees[runs[row[4]].execution_id].append(row)
        for root_id, operations in trees.items():
            run = self.runs[root_id]
            calls, attempts, concurrency = run.limits
            made = sum(row[3] for row in operations)
            in_flight = sum(1 for row in operations if row[2] == "claimed")
            if len(operations) > calls or made > attempts or in_flight > concurrency:
                self.violated("ceiling_exceeded", (
                    f"{run.label} (ceilings: {calls} calls, {attempts} attempts, {concurrency} "
                    f"in flight) holds {len(operations)} actions, {made} attempts, "
                    f"{in_flight} in flight"))
            for operation_id, proposal_id, *_ in operations:
                ref = self.by_id[proposal_id]
                if ref.arguments.get("from_account") != DECLARED and self._held(ref,
                                                                                operation_id):
                    self.violated("scope_escape", (
                        f"{ref.label} of {run.label} took effect from "
                        f"{ref.arguments.get('from_account')}, outside the workflow's "
                        f"authority ({DECLARED})"))

    def _check_permits(self) -> None:
        for permit_id, proposal_id, approval_id, operation in Permit.objects.exclude(
                id__in=list(self.permits_seen)).values_list(
                "id", "proposal_id", "approval_id", "operation"):
            self.permits_seen.add(permit_id)
            ref = self.by_id[proposal_id]
            needed = quorum_needed(operation, ref.arguments)
            live = Vote.objects.filter(approval_id=approval_id, outcome="grant",
                                       approver__user__is_active=True).count()
            if live < needed:
                self.violated("quorum_short", f"{ref.label} ({ref.arguments}) was permitted "
                              f"with {live} grants of active operators, not {needed}")

    def _check_caps(self) -> None:
        sums: dict[tuple[str, Any], Decimal] = defaultdict(Decimal)
        for operation_id, proposal_id, claimed_at in Operation.objects.filter(
                proposal__operation=PAY).values_list("id", "proposal_id", "claimed_at"):
            ref = self.by_id[proposal_id]
            if not self._held(ref, operation_id):
                continue
            currency = ref.arguments["currency"]
            if currency not in CAPS:
                self.violated("cap_exceeded", f"{ref.label} paid {ref.arguments['amount']} "
                              f"{currency}, a currency no cap sums")
                continue
            sums[currency, claimed_at.date()] += Decimal(ref.arguments["amount"])
        for (currency, day), total in sums.items():
            if total > CAPS[currency]:
                self.violated("cap_exceeded", f"the agent paid {total} {currency} on {day}, "
                              f"over its cap of {CAPS[currency]}")

    def _check_budgets_whole(self) -> None:
        """Each execution was charged at least once per action that made an attempt and at most
        once per attempt (at least the claim's); a run's agent steps hold several actions."""
        from dispatch.models import BudgetCounter

        counters = dict(BudgetCounter.objects.values_list("key", "used"))
        bounds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for principal_id, execution_id, attempts in Operation.objects.values_list(
                "principal_id", "execution_id", "attempts_made"):
            key = f"execution:{principal_id}:{execution_id}"
            bounds[key][0] += min(attempts, 1)
            bounds[key][1] += max(attempts, 1)
        for key, (low, high) in bounds.items():
            used = counters.get(key, 0)
            if not low <= used <= high:
                self.violated("budget_not_whole", f"{key} holds {used}, not in [{low}, {high}]")


@contextmanager
def workflow_runtime() -> Iterator[None]:
    """The model's runtime with the deployment's rules; a run's wake-up is the model's
    `resume_run` rule, never a task."""
    from dispatch.runtime import get_runtime
    from dispatch.services import delegations, wakeups
    from dispatch.workflows import deadlines, delegated

    saved: list[tuple[Any, str, Any]] = [(wakeups, "wake_now", wakeups.wake_now)]
    wakeups.wake_now = lambda **_: None
    # A delegation and a run's deadline read the wall clock: the model's, here.
    clock = SimpleNamespace(now=_now)
    for module in (delegations, delegated, deadlines):
        saved.append((module, "timezone", module.timezone))
        module.timezone = clock
    try:
        with override_settings(APPROVAL_RULES=RULES):
            get_runtime.cache_clear()
            with model_runtime():
                yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)
        get_runtime.cache_clear()


def _now() -> datetime:
    environment = CURRENT.environment
    assert environment is not None, "a workflow ran outside the model"
    return environment.now()
