"""The lifecycle model: a Hypothesis `RuleBasedStateMachine` that drives the real services and
store (proposals, approvals, the dispatcher, the worker, reconciliation, renewals,
cancellation, revocation, resolution) against the in-process destination models of
tests/model/destinations.py, and checks after every step what the runtime promises (docs/
reliability.md lists the rules and the invariants).

How the world outside the store is simulated, in one process:

- **Time** is the model's clock (`LifecycleModel.now`), passed as `now=`/`clock=` to every
  service; only the rules move it (and a worker's simulated backoff or pause). A late request
  lands at its destination when the clock passes its due time.
- **A crash** is `Crash`, a `BaseException` raised at a named failpoint (`dispatch.failpoints`,
  plus the handler's own `handler.during_effect` and the worker's `retry.backoff`): the
  transaction in progress rolls back, as a crash's uncommitted work does, and the process
  runs nothing more. The failpoint names are monkeypatched in the modules that call them.
- **Another process acting at a point** (a revocation during the backoff, a reconciliation
  pass while a worker is stalled, a cancellation while the handler sends) runs at that
  failpoint when it is outside a transaction, and right after the step when it is inside one
  (as a second process would wait on the first one's locks).
- **The store refusing an outcome's write** raises `DatabaseError` from the worker's write of
  its outcome, once (`store_fail`) or for both of its writes (`store_down`).
- **Celery** is replaced by nothing: an enqueued task is dropped, and the `run_worker` rule is
  the delivery of a task for an operation, at any time, any number of times (at least once,
  or lost).

Every violation raises its own `ModelViolation` subclass (so Hypothesis reports distinct ones
separately), or, in a long run (`LifecycleModel.record_only`), is counted in `FIGURES`.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.test import override_settings
from hypothesis import strategies as st
from hypothesis.errors import StopTest
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from dispatch.models import (
    ApprovalRequest,
    Attempt,
    AuditEvent,
    BudgetCounter,
    Operation,
    Permit,
    Resource,
)
from protocols.denials import Denial
from protocols.trace import TraceChecker
from protocols.trace_events import TraceEvent
from tests.model.destinations import BEHAVIOURS, CURRENT, DestinationModel
from tests.model.extension import NOTIFY, PUBLISH, TIMEOUT, TRANSFER

T = TypeVar("T")

EPOCH = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
MAILBOX = "support@acme.example"
CONTRACTS = ("transfer", "notify", "publish")
OPERATION = {"transfer": TRANSFER, "notify": NOTIFY, "publish": PUBLISH}
DESTINATION = {"transfer": ("model-bank", True), "notify": ("model-mail", False),
               "publish": ("model-publisher", True)}
SCOPE: dict[str, dict[str, Any]] = {"transfer": {"account": ["acct-001"]},
                                    "notify": {"channel": ["ops"]},
                                    "publish": {"mailbox": [MAILBOX]}}

NO_EFFECT = frozenset({"failed_no_effect", "reconciled_no_effect"})
EFFECT = frozenset({"completed", "reconciled_completed"})
#: The state the `email_draft` a publication acts on is in, for each state of its operation.
RESOURCE_STATE = {"claimed": "dispatching", "completed": "sent", "reconciled_completed": "sent",
                  "failed_no_effect": "failed_no_effect",
                  "reconciled_no_effect": "failed_no_effect", "unknown": "unknown"}

#: Where a worker may crash or be overtaken: the failpoints on its path, in order.
WORKER_POINTS = ("attempt.before_call", "handler.during_effect", "attempt.after_effect",
                 "attempt.before_outcome", "retry.backoff")
CLAIM_POINTS = ("dispatch.before_claim", "claim.before_commit", "claim.after_commit")
DECISION_POINTS = ("decision.before_transaction", *CLAIM_POINTS)
RENEWAL_POINTS = ("renewal.before_transaction",)
#: What happens at a point: the process dies, or another process acts there.
EVENTS = ("crash", "revoke", "cancel", "pause", "pause_reconcile")
#: How many actions the agent has on their way at most before it proposes another.
MAX_OPEN = 2
#: How far a pause moves the clock: past the contract timeout, so reconciliation may act.
PAUSE = timedelta(seconds=TIMEOUT + 1)


def interleavings(points: tuple[str, ...]) -> Any:
    """None (nothing happens), or (point, event)."""
    return st.none() | st.tuples(st.sampled_from(points), st.sampled_from(EVENTS))


#: What the destination does with each call of one worker run (`ok` once spent), or None: the
#: task did not reach a worker (lost, or late).
CALLS = st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=3).map(tuple)
SCRIPTS = st.none() | CALLS


class Crash(BaseException):
    """The process died at `point`: a BaseException, so no `except Exception` of the runtime
    stops it, and every transaction it crosses rolls back."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


class ModelViolation(AssertionError):
    """A broken invariant; each kind is a subclass of its own (`violation_type`)."""

    kind = "violation"


@functools.cache
def violation_type(kind: str) -> type[ModelViolation]:
    name = "".join(part.capitalize() for part in kind.split("_")) + "Violation"
    return type(name, (ModelViolation,), {"kind": kind})


@dataclass
class Figures:
    """What runs of the model did, summed over examples (the long run prints them)."""

    examples: int = 0
    discarded: int = 0  # examples Hypothesis gave up (no rule it could draw was enabled)
    steps: int = 0
    rules: Counter[str] = field(default_factory=Counter)  # steps by rule
    tasks: int = 0  # tasks the runtime enqueued (the model delivers them by `run_worker`)
    faults: Counter[str] = field(default_factory=Counter)
    denials: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # what runs and actions came to
    violations: Counter[str] = field(default_factory=Counter)  # examples showing each kind
    first: dict[str, list[str]] = field(default_factory=dict)  # kind -> that example's steps
    on_example: Callable[[], None] | None = None


FIGURES = Figures()


@dataclass(eq=False)
class ProposalRef:
    label: str
    intent: str
    contract: str
    id: str
    digest: str
    approval_id: str | None
    arguments: dict[str, Any]
    on_approval: bool
    resource: str | None = None

    def __repr__(self) -> str:
        return self.label


@dataclass(eq=False)
class OperationRef:
    proposal: ProposalRef
    id: str

    def __repr__(self) -> str:
        return f"op({self.proposal.label})"


class LifecycleModel(RuleBasedStateMachine):
    """One tenant: an agent proposing the three model contracts, an operator deciding, an
    admin revoking, renewing and resolving; three destinations; a clock."""

    #: Count violations in `FIGURES` instead of raising them (the long run).
    record_only: ClassVar[bool] = False
    #: Raise only these kinds (None: all), count the others: to shrink one kind at a time.
    raise_kinds: ClassVar[frozenset[str] | None] = None

    proposals = Bundle("proposals")
    #: What each contract's grant to the agent covers: its operations and its scope.
    GRANTS: ClassVar[dict[str, tuple[tuple[str, ...], dict[str, Any]]]] = {
        contract: ((OPERATION[contract],), SCOPE[contract]) for contract in CONTRACTS}

    def __init__(self) -> None:
        super().__init__()
        from dispatch.services.principals import agent_create, human_create

        flush_database()
        self._now = EPOCH
        self.destinations = {name: DestinationModel(name, dedup)
                             for name, dedup in DESTINATION.values()}
        self.agent, _ = agent_create(name="agent", tenant="acme", tools=sorted(
            {name for operations, _ in self.GRANTS.values() for name in operations}))
        self.operator, _ = human_create(name="operator", tenant="acme", role="operator",
                                        password="pw")
        self.admin, _ = human_create(name="admin", tenant="acme", role="admin", password="pw")
        self.grants: dict[str, str] = {}  # contract -> its live grant's id
        self.grant_contract: dict[str, str] = {}
        for contract in CONTRACTS:
            self._issue(contract, self._now - timedelta(minutes=1))
        self.by_id: dict[str, ProposalRef] = {}
        self.intents: dict[str, list[ProposalRef]] = {}
        self.latest_on_resource: dict[str, ProposalRef] = {}
        self.operations: dict[str, OperationRef] = {}  # proposal id -> its operation
        self.armed: tuple[str, str, ProposalRef] | None = None
        self.deferred: list[tuple[str, ProposalRef]] = []
        self.store_failures = 0
        self.states: dict[str, str] = {}  # proposal id -> its operation's state
        self.approval_states: dict[str, str] = {}  # proposal id -> its approval's state
        self.permit_states: dict[str, str] = {}  # proposal id -> its permit's state
        self.audit_seen = 0
        self.revoked: set[str] = set()  # contracts whose grant the audit shows revoked
        self.trace = TraceChecker()
        self.found: set[str] = set()
        self.log: list[str] = []
        self.steps = 0
        CURRENT.environment = self

    # The environment the handlers see (tests.model.destinations.Environment).

    def now(self) -> datetime:
        return self._now

    def destination(self, name: str) -> DestinationModel:
        return self.destinations[name]

    def reached(self, point: str) -> None:
        """A failpoint: fire the interleaving armed for it, if any."""
        if self.armed is None or self.armed[0] != point:
            return
        _, event, target = self.armed
        self.armed = None
        FIGURES.faults[f"{event} at {point}"] += 1
        if event == "crash":
            raise Crash(point)
        if connection.in_atomic_block:
            self.deferred.append((event, target))  # waits on this transaction's locks
            return
        self._fire(event, target)

    def _fire(self, event: str, target: ProposalRef) -> None:
        from dispatch.services.cancellation import proposal_cancel
        from dispatch.services.reconciliation import reconcile_operations

        if event == "revoke":
            self._revoke(target.contract)
        elif event == "cancel":
            self._call(lambda: proposal_cancel(actor=self.agent, proposal_id=target.id,
                                               now=self._now))
        elif event == "pause":
            self.advance(PAUSE)
        elif event == "pause_reconcile":
            self.advance(PAUSE)
            reconcile_operations(now=self._now, enqueue=False)
        elif event == "store_fail":
            self.store_failures = 1
        elif event == "store_down":
            self.store_failures = 2

    def advance(self, delta: timedelta) -> None:
        """Time passes: late requests due by then land at their destinations."""
        self._now += delta
        for destination in self.destinations.values():
            FIGURES.faults["late request landed"] += len(destination.deliver(self._now))

    def _call(self, call: Callable[[], T]) -> T | None:
        """A service call: a denial is an answer like any other."""
        try:
            return call()
        except Denial as denial:
            FIGURES.denials[denial.code.value] += 1
            return None

    @contextmanager
    def _interleaved(self, interleave: tuple[str, str] | None,
                     target: ProposalRef) -> Iterator[None]:
        """Arm what happens at a point for the processes of one step; a deferred event (one
        due inside a transaction) acts once the step is over."""
        if interleave is not None:
            self.armed = (interleave[0], interleave[1], target)
        try:
            yield
        finally:
            self.armed = None
            self.store_failures = 0
            deferred, self.deferred = self.deferred, []
            for event, on in deferred:
                self._fire(event, on)

    def _process(self, call: Callable[[], T]) -> T | None:
        """One process's service call: None if it was refused or the process died."""
        try:
            return self._call(call)
        except Crash:
            return None

    def _work(self, proposal: ProposalRef, script: tuple[str, ...] | None) -> None:
        """A worker runs the task of the proposal's operation, if it is claimed and `script`
        is not None (None: the task was lost, or is late); the destination answers its calls
        as `script` says."""
        from dispatch.services.worker import operation_execute

        if script is None:
            return
        found = Operation.objects.filter(proposal_id=proposal.id, state="claimed").values_list(
            "id", flat=True).first()
        if found is None:
            return
        destination = self.destinations[DESTINATION[proposal.contract][0]]
        destination.script = deque(script)
        try:
            self._process(lambda: operation_execute(operation_id=found, clock=self.now))
        finally:
            for behaviour in script[:len(script) - len(destination.script)]:
                FIGURES.faults[f"destination {behaviour}"] += 1
            destination.script.clear()

    def _note(self, text: str) -> None:
        self.log.append(text)
        FIGURES.rules[text.split("(")[0]] += 1

    def _pick(self, eligible: list[T], pick: int) -> T:
        return eligible[pick % len(eligible)]

    def _awaiting(self) -> list[ProposalRef]:
        """Proposals whose approval waits for its decision."""
        return [p for p in self.by_id.values() if self.approval_states.get(p.id) == "pending"]

    def _approved(self) -> list[ProposalRef]:
        """Proposals holding an unclaimed permit: the agent's to dispatch."""
        return [p for p in self.by_id.values() if self.permit_states.get(p.id) == "issued"]

    def _operations_in(self, state: str) -> list[OperationRef]:
        return [op for op in self.operations.values()
                if self.states.get(op.proposal.id) == state]

    # Rules: the agent.

    def _arguments(self, contract: str, intent: str) -> tuple[dict[str, Any], str | None]:
        from dispatch.services.resources import resource_create

        if contract == "transfer":
            return {"from_account": "acct-001", "to_account": "acct-999", "amount": "10.00",
                    "memo": intent}, None
        if contract == "notify":
            return {"channel": "ops", "text": intent}, None
        resource, _ = resource_create(principal=self.agent, kind="email_draft", payload={
            "from": MAILBOX, "to": ["reader@example.com"], "subject": intent,
            "body": "model"}, now=self._now)
        return {"doc": {"id": resource.id, "revision": resource.current_revision}}, resource.id

    def _propose(self, *, label: str, intent: str, contract: str, arguments: dict[str, Any],
                 on_approval: bool, resource: str | None) -> Any:
        from dispatch.services.proposals import proposal_create

        proposal = self._process(lambda: proposal_create(
            principal=self.agent, operation=OPERATION[contract], arguments=arguments,
            dispatch_on_approval=on_approval, now=self._now))
        if proposal is None:
            return multiple()
        approval = ApprovalRequest.objects.filter(proposal_id=proposal.id).values_list(
            "id", flat=True).first()
        ref = ProposalRef(label, intent, contract, proposal.id, proposal.digest, approval,
                          arguments, on_approval, resource)
        self.by_id[ref.id] = ref
        self.intents.setdefault(intent, []).append(ref)
        if resource is not None:
            self.latest_on_resource[resource] = ref
        return ref

    def _start(self, contract: str, on_approval: bool, decision: str | None,
               script: tuple[str, ...] | None) -> Any:
        from dispatch.services.approvals import approval_decide

        proposal = self.propose(contract, on_approval)
        if decision is None or not isinstance(proposal, ProposalRef):
            return proposal
        self._note(f"decide({proposal.label}, {decision!r}, {script}, None)")
        if self._process(lambda: approval_decide(
                approver=self.operator, approval_id=proposal.approval_id, decision=decision,
                digest=proposal.digest, now=self._now)) is not None:
            self._work(proposal, script)
        return proposal

    @initialize(target=proposals, contract=st.sampled_from(CONTRACTS),
                on_approval=st.booleans(), decision=st.sampled_from(("grant", None, "deny")),
                script=SCRIPTS)
    def start(self, contract: str, on_approval: bool, decision: str | None,
              script: tuple[str, ...] | None) -> Any:
        """Every example starts with an action proposed, which the operator may decide at
        once (and a grant with `dispatch_on_approval` runs at once, or not)."""
        return self._start(contract, on_approval, decision, script)

    @initialize(target=proposals, contract=st.sampled_from(CONTRACTS),
                on_approval=st.booleans(), decision=st.sampled_from(("grant", None, "deny")),
                script=SCRIPTS)
    def start_another(self, contract: str, on_approval: bool, decision: str | None,
                      script: tuple[str, ...] | None) -> Any:
        """And with a second one, in the same way."""
        return self._start(contract, on_approval, decision, script)

    def _open(self) -> list[ProposalRef]:
        """Proposals on their way: awaiting a decision or a dispatch, claimed or unknown."""
        return [p for p in self.by_id.values() if self.states.get(p.id) in (
            "claimed", "unknown") or (p.id not in self.states and self.approval_states.get(
                p.id) in ("pending", "granted"))]

    @precondition(lambda self: len(self._open()) < MAX_OPEN)
    @rule(target=proposals, contract=st.sampled_from(CONTRACTS), on_approval=st.booleans())
    def propose(self, contract: str, on_approval: bool) -> Any:
        """The agent proposes a new action while fewer than `MAX_OPEN` are on their way (an
        agent works on a few at a time); with `on_approval`, a grant dispatches it at once."""
        intent = f"{contract}#{len(self.intents) + 1}"
        self._note(f"propose({contract!r}, on_approval={on_approval}) -> {intent}")
        arguments, resource = self._arguments(contract, intent)
        return self._propose(label=intent, intent=intent, contract=contract,
                             arguments=arguments, on_approval=on_approval, resource=resource)

    def _told_no_effect(self) -> list[ProposalRef]:
        """The latest proposal of each intent whose operation ended without effect."""
        return [refs[-1] for refs in self.intents.values()
                if self.states.get(refs[-1].id) in NO_EFFECT]

    @precondition(lambda self: self._told_no_effect())
    @rule(target=proposals, pick=st.integers(0, 3))
    def propose_again(self, pick: int) -> Any:
        """Told "no effect", the agent asks for the same action again: a new proposal, so a
        new operation id (a new idempotency key), as real agents do."""
        proposal = self._pick(self._told_no_effect(), pick)
        label = f"{proposal.intent}/{len(self.intents[proposal.intent]) + 1}"
        self._note(f"propose_again({proposal.label}) -> {label}")
        arguments = proposal.arguments
        if proposal.resource is not None:
            current = Resource.objects.get(id=proposal.resource).current_revision
            arguments = {"doc": {"id": proposal.resource, "revision": current}}
        return self._propose(label=label, intent=proposal.intent, contract=proposal.contract,
                             arguments=arguments, on_approval=proposal.on_approval,
                             resource=proposal.resource)

    @precondition(lambda self: self._approved())
    @rule(pick=st.integers(0, 3), script=SCRIPTS,
          interleave=interleavings(CLAIM_POINTS + WORKER_POINTS))
    def dispatch(self, pick: int, script: tuple[str, ...] | None,
                 interleave: tuple[str, str] | None) -> None:
        """The agent dispatches an approved proposal; its task reaches a worker at once, or
        (`script` None) is lost or late."""
        from dispatch.services.dispatcher import proposal_dispatch

        proposal = self._pick(self._approved(), pick)
        self._note(f"dispatch({proposal.label}, {script}, {interleave})")
        with self._interleaved(interleave, proposal):
            if self._process(lambda: proposal_dispatch(
                    principal=self.agent, proposal_id=proposal.id, now=self._now,
                    enqueue=False)) is not None:
                self._work(proposal, script)

    @rule(proposal=consumes(proposals), by=st.sampled_from(("agent", "operator")))
    def cancel(self, proposal: ProposalRef, by: str) -> None:
        """The agent or an operator cancels an action, at whatever point it is (once)."""
        from dispatch.services.cancellation import proposal_cancel

        self._note(f"cancel({proposal.label}, by={by})")
        actor = self.agent if by == "agent" else self.operator
        self._process(lambda: proposal_cancel(actor=actor, proposal_id=proposal.id,
                                              now=self._now))

    # Rules: the operator and the admin.

    @precondition(lambda self: self._awaiting())
    @rule(pick=st.integers(0, 3), decision=st.sampled_from(("grant", "deny")), script=SCRIPTS,
          interleave=interleavings(DECISION_POINTS + WORKER_POINTS))
    def decide(self, pick: int, decision: str, script: tuple[str, ...] | None,
               interleave: tuple[str, str] | None) -> None:
        """The operator decides a pending approval; a grant of a proposal made with
        `dispatch_on_approval` claims it too, and its task reaches a worker (or not)."""
        from dispatch.services.approvals import approval_decide

        proposal = self._pick(self._awaiting(), pick)
        self._note(f"decide({proposal.label}, {decision!r}, {script}, {interleave})")
        with self._interleaved(interleave, proposal):
            if self._process(lambda: approval_decide(
                    approver=self.operator, approval_id=proposal.approval_id,
                    decision=decision, digest=proposal.digest, now=self._now)) is not None:
                self._work(proposal, script)

    def _issue(self, contract: str, now: datetime) -> None:
        from dispatch.services.authority import grant_issue

        operations, scope = self.GRANTS[contract]
        grant = grant_issue(issuer=self.admin, subject=self.agent, operations=list(operations),
                            scope=scope, now=now)
        self.grants[contract] = grant.id
        self.grant_contract[grant.id] = contract

    def _revoke(self, contract: str) -> None:
        from dispatch.services.authority import grant_revoke

        grant_id = self.grants.pop(contract, None)
        if grant_id is not None:
            grant_revoke(actor=self.admin, grant_id=grant_id, now=self._now)

    @precondition(lambda self: self.grants and self.operations)
    @rule(contract=st.sampled_from(CONTRACTS))
    def revoke(self, contract: str) -> None:
        self._note(f"revoke({contract!r})")
        self._process(lambda: self._revoke(contract))

    @precondition(lambda self: len(self.grants) < len(CONTRACTS))
    @rule(contract=st.sampled_from(CONTRACTS))
    def issue_again(self, contract: str) -> None:
        if contract in self.grants:
            return
        self._note(f"issue_again({contract!r})")
        self._issue(contract, self._now)

    @precondition(lambda self: self._operations_in("unknown"))
    @rule(pick=st.integers(0, 3), by=st.sampled_from(("agent", "admin")),
          decision=st.sampled_from(("grant", "deny")), script=SCRIPTS,
          interleave=interleavings(RENEWAL_POINTS + WORKER_POINTS))
    def renew(self, pick: int, by: str, decision: str, script: tuple[str, ...] | None,
              interleave: tuple[str, str] | None) -> None:
        """The agent or an admin asks for a renewed approval of an unknown operation's next
        attempt (the same operation id), an operator decides it, and the task of a granted
        one reaches a worker (or not)."""
        from dispatch.services.renewals import operation_reauthorize, renewal_decide

        operation = self._pick(self._operations_in("unknown"), pick)
        self._note(f"renew({operation!r}, by={by}, {decision!r}, {script}, {interleave})")
        actor = self.agent if by == "agent" else self.admin
        renewal = self._process(lambda: operation_reauthorize(
            actor=actor, operation_id=operation.id, now=self._now, reason="model"))
        if renewal is None:
            return
        with self._interleaved(interleave, operation.proposal):
            if self._process(lambda: renewal_decide(
                    approver=self.operator, renewal_id=renewal.id, decision=decision,
                    digest=renewal.digest, now=self._now)) is not None:
                self._work(operation.proposal, script)

    @precondition(lambda self: self._operations_in("unknown"))
    @rule(pick=st.integers(0, 3))
    def resolve(self, pick: int) -> None:
        """The admin settles an unknown as a careful person would: by asking the destination
        out of band, and waiting while a request may still be on its way."""
        from dispatch.services.reconciliation import operation_resolve

        operation = self._pick(self._operations_in("unknown"), pick)
        destination = self.destinations[DESTINATION[operation.proposal.contract][0]]
        if destination.pending(operation.id):
            return
        outcome = "completed" if destination.held(operation.id) else "no_effect"
        self._note(f"resolve({operation!r}) as {outcome}")
        self._process(lambda: operation_resolve(admin=self.admin, operation_id=operation.id,
                                                outcome=outcome, evidence="checked by hand",
                                                now=self._now))

    # Rules: the workers, the clock, reconciliation, the destinations.

    @precondition(lambda self: self._operations_in("claimed"))
    @rule(pick=st.integers(0, 3), script=CALLS, interleave=interleavings(WORKER_POINTS))
    def run_worker(self, pick: int, script: tuple[str, ...],
                   interleave: tuple[str, str] | None) -> None:
        """A task for a claimed operation reaches a worker: late, again (at-least-once
        delivery), or after reconciliation or a renewal moved it back to claimed."""
        operation = self._pick(self._operations_in("claimed"), pick)
        self._note(f"run_worker({operation!r}, {script}, {interleave})")
        with self._interleaved(interleave, operation.proposal):
            self._work(operation.proposal, script)

    @precondition(lambda self: self._operations_in("claimed"))
    @rule(pick=st.integers(0, 3), script=CALLS, point=st.sampled_from(WORKER_POINTS))
    def crash_worker(self, pick: int, script: tuple[str, ...], point: str) -> None:
        """A worker runs a claimed operation's task and dies at `point`."""
        operation = self._pick(self._operations_in("claimed"), pick)
        self._note(f"crash_worker({operation!r}, {script}, {point!r})")
        with self._interleaved((point, "crash"), operation.proposal):
            self._work(operation.proposal, script)

    @precondition(lambda self: self._operations_in("claimed"))
    @rule(pick=st.integers(0, 3), script=CALLS, writes=st.sampled_from((1, 2)))
    def fail_outcome_write(self, pick: int, script: tuple[str, ...], writes: int) -> None:
        """A worker runs a claimed operation's task and the store refuses its write of the
        outcome (`writes` 2: the write of `unknown` that follows too)."""
        operation = self._pick(self._operations_in("claimed"), pick)
        self._note(f"fail_outcome_write({operation!r}, {script}, {writes})")
        event = "store_fail" if writes == 1 else "store_down"
        with self._interleaved(("attempt.before_outcome", event), operation.proposal):
            self._work(operation.proposal, script)

    @precondition(lambda self: self._open() or any(
        d.in_flight for d in self.destinations.values()))
    @rule(seconds=st.sampled_from((1, 16, 46, 3601)))
    def let_time_pass(self, seconds: int) -> None:
        """1 s; past the contract timeout; past the renewal fence; past the approval window.
        The periodic sweep then expires what lapsed."""
        from dispatch.services.approvals import approvals_expire_stale

        self._note(f"let_time_pass({seconds})")
        self.advance(timedelta(seconds=seconds))
        self._process(lambda: approvals_expire_stale(now=self._now))

    @precondition(lambda self: self.operations)
    @rule(lookups=st.sampled_from(("answer", "fail")))
    def reconcile(self, lookups: str) -> None:
        """A reconciliation pass; the destinations' lookups answer, or fail, from now on."""
        from dispatch.services.reconciliation import reconcile_operations

        self._note(f"reconcile(lookups={lookups!r})")
        for destination in self.destinations.values():
            destination.lookups = lookups
        self._process(lambda: reconcile_operations(now=self._now, enqueue=False))

    # Invariants.

    def violated(self, kind: str, message: str) -> None:
        if kind not in self.found:
            self.found.add(kind)
            FIGURES.violations[kind] += 1
            FIGURES.first.setdefault(kind, [*self.log, f"!! {kind}: {message}"])
        if self.record_only or (self.raise_kinds is not None and kind not in self.raise_kinds):
            return
        steps = "\n".join(f"    {step}" for step in self.log)
        raise violation_type(kind)(f"{kind}: {message}\n  the model's steps, by label:\n{steps}")

    @invariant()
    def invariants_hold(self) -> None:
        self.steps += 1
        operations = list(Operation.objects.values_list(
            "id", "proposal_id", "state", "attempts_made", "principal_id", "execution_id"))
        self.states = {proposal: state for _, proposal, state, *_ in operations}
        for operation_id, proposal_id, *_ in operations:
            if proposal_id not in self.operations:
                self.operations[proposal_id] = OperationRef(self.by_id[proposal_id],
                                                            operation_id)
        self.approval_states = dict(ApprovalRequest.objects.values_list("proposal_id", "state"))
        self.permit_states = dict(Permit.objects.values_list("proposal_id", "state"))
        self._check_effects(operations)
        self._check_audit()
        self._check_budget_bounds()
        self._check_resources(operations)

    def _held(self, proposal: ProposalRef, operation_id: str) -> int:
        return self.destinations[DESTINATION[proposal.contract][0]].held(operation_id)

    def _check_effects(self, operations: list[tuple[Any, ...]]) -> None:
        per_intent: Counter[str] = Counter()
        for operation_id, proposal_id, state, *_ in operations:
            ref = self.by_id[proposal_id]
            held = self._held(ref, operation_id)
            per_intent[ref.intent] += held
            where = DESTINATION[ref.contract][0]
            if held > 1:
                self.violated("effect_twice_per_key",
                              f"{where} holds {held} effects of {ref.label}'s one operation")
            if state in NO_EFFECT and held:
                self.violated("effect_after_no_effect",
                              f"{ref.label} is {state} but {where} holds its effect")
            if state in EFFECT and held != 1:
                self.violated("completed_without_one_effect",
                              f"{ref.label} is {state} but {where} holds {held} effects")
        for intent, held in per_intent.items():
            if held > 1:
                self.violated("double_effect",
                              f"the agent's one action {intent} holds {held} effects at "
                              f"{DESTINATION[intent.split('#')[0]][0]}, one per operation id "
                              f"it was proposed under ({len(self.intents[intent])})")

    def _check_audit(self) -> None:
        """The audit written since the last step replays through the transition tables
        (`audit_check`, fed incrementally; the whole audit is replayed again at the end), and
        no claim, nor any attempt after the first, began after the revocation of the grant it
        rests on committed (spec: a further attempt requires current authorization)."""
        rows = AuditEvent.objects.filter(id__gt=self.audit_seen).order_by("id").values_list(
            "id", "kind", "operation_id", "proposal_id", "details")
        for event_id, kind, operation_id, proposal_id, details in rows:
            self.audit_seen = event_id
            self.trace.feed(TraceEvent(id=event_id, kind=kind, operation_id=operation_id,
                                       proposal_id=proposal_id, details=details or {}))
            if kind == "grant.issued":
                self.revoked.discard(self.grant_contract.get(details["grant_id"], ""))
            elif kind == "grant.revoked":
                self.revoked.update(self.grant_contract.get(g, "") for g in details["revoked"])
            elif kind == "permit.claimed" or (kind == "attempt.started"
                                               and details.get("attempt", 1) > 1):
                ref = self.by_id[proposal_id]
                if ref.contract in self.revoked:
                    what = ("claimed" if kind == "permit.claimed"
                            else f"attempt {details['attempt']} started")
                    self.violated("attempt_after_revocation",
                                  f"{ref.label}: {what} after its grant was revoked")
        self._trace_violations(self.trace.report().violations)

    def _trace_violations(self, found: list[Any]) -> None:
        if found:
            self.violated("audit_trace", "; ".join(
                f"{v.kind}: {v.code.value}: {v.message}" for v in found[:3]))

    def _check_budget_bounds(self) -> None:
        wrong = list(BudgetCounter.objects.filter(
            Q(used__lt=0) | Q(used__gt=F("limit"))).values_list("key", "used", "limit"))
        if wrong:
            self.violated("budget_out_of_bounds", f"counters out of [0, limit]: {wrong}")

    def _check_resources(self, operations: list[tuple[Any, ...]]) -> None:
        states = dict(Resource.objects.values_list("id", "state"))
        for _, proposal_id, state, *_ in operations:
            ref = self.by_id[proposal_id]
            if ref.resource is None or self.latest_on_resource[ref.resource] is not ref:
                continue
            if states[ref.resource] != RESOURCE_STATE[state]:
                self.violated("resource_out_of_step",
                              f"{ref.label} is {state} but its draft is "
                              f"{states[ref.resource]}, not {RESOURCE_STATE[state]}")

    # The end of an example: a final drain.

    def teardown(self) -> None:
        failed = sys.exc_info()[1]
        try:
            if failed is None:  # not after a failed step
                self._drain()
        finally:
            CURRENT.environment = None
            FIGURES.steps += max(0, self.steps - 1)
            if isinstance(failed, StopTest):  # Hypothesis gave the example up (no rule left)
                FIGURES.discarded += 1
            else:
                FIGURES.examples += 1
            if FIGURES.on_example is not None:
                FIGURES.on_example()

    def _sweep(self) -> None:
        """What the beat sweeps in the drain besides reconciliation: nothing here."""

    def _drain(self) -> None:
        """Everything settles: the destinations heal, time passes beyond every timeout and
        the renewal fence (late requests land), reconciliation passes and a worker runs
        every claimed operation, three times over. Then nothing may be `claimed` (which no
        worker is running), and the budgets must be whole."""
        from dispatch.services.audit import audit_replay
        from dispatch.services.reconciliation import reconcile_operations
        from dispatch.services.worker import operation_execute

        self._note("-- drain")
        for destination in self.destinations.values():
            destination.script.clear()
            destination.lookups = "answer"
        for _ in range(3):
            self.advance(timedelta(seconds=3 * TIMEOUT + 1))
            self._sweep()
            self._process(lambda: reconcile_operations(now=self._now, enqueue=False))
            for operation_id in Operation.objects.filter(state="claimed").values_list(
                    "id", flat=True):
                self._process(lambda op=operation_id: operation_execute(operation_id=op,
                                                                        clock=self.now))
        self.invariants_hold()
        self._trace_violations(audit_replay().violations)  # the whole audit, as audit_check
        for operation_id, proposal_id, attempts in Operation.objects.filter(
                state="claimed").values_list("id", "proposal_id", "attempts_made"):
            open_attempt = Attempt.objects.filter(operation_id=operation_id,
                                                  ended_at__isnull=True).exists()
            self.violated("stuck_claimed", (
                f"{self.by_id[proposal_id].label} is still claimed after the drain, "
                f"attempt {attempts} {'open' if open_attempt else 'never started'}"))
        self._check_budgets_whole()

    def _check_budgets_whole(self) -> None:
        """Each action was charged for its claim or its attempts, never twice for one: its
        execution's counter holds between 1 (if it made any attempt) and one unit per
        attempt (at least the claim's); the per-principal counters hold the same total."""
        counters = dict(BudgetCounter.objects.values_list("key", "used"))
        by_execution = 0
        for proposal_id, principal_id, execution_id, attempts in Operation.objects.values_list(
                "proposal_id", "principal_id", "execution_id", "attempts_made"):
            used = counters.get(f"execution:{principal_id}:{execution_id}", 0)
            by_execution += used
            if not min(attempts, 1) <= used <= max(attempts, 1):
                self.violated("budget_not_whole",
                              f"{self.by_id[proposal_id].label} made {attempts} attempts and "
                              f"its execution's counter holds {used}")
        by_principal = sum(used for key, used in counters.items()
                           if key.startswith("principal:"))
        if by_principal != by_execution:
            self.violated("budget_not_whole", f"per-principal counters hold {by_principal}, "
                          f"per-execution counters {by_execution}")


# Outside the machine: the store, the runtime and the seams the model replaces.


@functools.cache
def _tables() -> tuple[str, ...]:
    keep = {"django_content_type", "auth_permission"}
    return tuple(sorted(t for t in connection.introspection.django_table_names(
        only_existing=True, include_views=False) if t not in keep))


def flush_database() -> None:
    """Empty every table the runtime writes, in one transaction (foreign keys are checked at
    its commit), so that each example starts from nothing."""
    quote = connection.ops.quote_name
    with transaction.atomic(), connection.cursor() as cursor:
        for table in _tables():
            cursor.execute(f"DELETE FROM {quote(table)}")


def _failpoint(name: str) -> None:
    environment = CURRENT.environment
    if environment is not None:
        environment.reached(name)


def _enqueue(operation_id: str) -> None:
    """A task handed to Celery: dropped; the model's `run_worker` rule is its delivery."""
    FIGURES.tasks += 1


def _monotonic() -> float:
    """The model's clock in seconds: a handler's cancellation probe and deadline see the
    time the model lets pass, as a worker sees real time pass while it sleeps."""
    environment = CURRENT.environment
    if environment is None:
        return 0.0
    return (environment.now() - EPOCH).total_seconds()


def _sleep(seconds: float) -> None:
    """The worker's backoff before a same-key retry: model time passes, and another process
    may act meanwhile (the `retry.backoff` point)."""
    environment = CURRENT.environment
    if isinstance(environment, LifecycleModel):
        environment.advance(timedelta(seconds=seconds))
        environment.reached("retry.backoff")


_TIME = SimpleNamespace(monotonic=_monotonic, sleep=_sleep)


def _settle_or_fail(settle: Callable[..., None]) -> Callable[..., None]:
    def settled(*args: Any, **kwargs: Any) -> None:
        environment = CURRENT.environment
        if isinstance(environment, LifecycleModel) and environment.store_failures > 0:
            environment.store_failures -= 1
            FIGURES.faults["outcome write refused by the store"] += 1
            raise DatabaseError("the store refused the write (model)")
        settle(*args, **kwargs)
    return settled


def _commits_unsynced() -> None:
    """Commits not waiting for the disk: the model's crashes are a process's (its
    uncommitted work rolls back), never a power loss, so no example needs a synced commit,
    and each step commits several times."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous=OFF" if connection.vendor == "sqlite"
                       else "SET synchronous_commit TO OFF")


@contextmanager
def model_runtime() -> Iterator[None]:
    """The runtime with the model's extension, and the model's seams in place of the
    failpoints, the queue, the worker's sleep and clock and its outcome write."""
    import dispatch.handlers as handlers
    from dispatch import queue
    from dispatch.runtime import get_runtime
    from dispatch.services import (
        approvals,
        claims,
        dispatcher,
        reconciliation,
        renewals,
        worker,
    )

    saved: list[tuple[Any, str, Any]] = []

    def patch(module: Any, name: str, value: Any) -> None:
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    for module in (approvals, claims, dispatcher, renewals, worker):
        patch(module, "failpoint", _failpoint)
    patch(queue, "execute_now", _enqueue)
    patch(reconciliation, "execute_now", _enqueue)
    patch(worker, "time", _TIME)
    patch(handlers, "time", _TIME)
    patch(worker, "_settle_attempt", _settle_or_fail(worker._settle_attempt))
    extensions = [*settings.DISPATCH_EXTENSIONS, "tests.model.extension"]
    # A production-like backoff (it is simulated: nothing sleeps), longer than the
    # cancellation probe's interval, as in production.
    with override_settings(DISPATCH_EXTENSIONS=extensions, RETRY_BACKOFF_SECONDS=0.5):
        get_runtime.cache_clear()
        _commits_unsynced()
        try:
            yield
        finally:
            for module, name, value in reversed(saved):
                setattr(module, name, value)
            get_runtime.cache_clear()


def run_model(machine: type[LifecycleModel], runtime: Callable[[], Any], examples: int) -> None:
    """Run `machine` as a test inside `runtime`: `examples` examples of at most `MODEL_STEPS`
    steps (default 30) from the fixed seed `MODEL_SEED` (default 21, no example database), or
    from a fresh seed with Hypothesis's example database when `MODEL_RANDOM=1`."""
    import os

    from hypothesis import HealthCheck, seed
    from hypothesis import settings as hypothesis_settings
    from hypothesis.stateful import run_state_machine_as_test

    fresh = os.environ.get("MODEL_RANDOM") == "1"
    factory: Callable[[], LifecycleModel] = machine
    if not fresh:
        factory = seed(int(os.environ.get("MODEL_SEED", "21")))(machine)
    with runtime():
        run_state_machine_as_test(factory, settings=hypothesis_settings(
            max_examples=examples, stateful_step_count=int(os.environ.get("MODEL_STEPS", "30")),
            deadline=None, database=hypothesis_settings.default.database if fresh else None,
            suppress_health_check=list(HealthCheck), print_blob=True))
