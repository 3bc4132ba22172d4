"""agentbarrier's conformance harness, driving our runtime: `agentbarrier verify
tests.peers.agentbarrier_adapter:adapter --json report.json` (tests/peers/test_agentbarrier.py).

agentbarrier 1.1.0 (a dev dependency, never imported by the product) runs scenarios against an
`AgentAdapter`: `begin(run_id, actions, effect)` starts a logical run of harness actions whose
effect is its `EffectProbe` (a journalled fake destination), and the returned `RunHandle` is
asked for pending approvals, approves (optionally with reviewed arguments), rejects, cancels,
waits for the run's outcome, reconciles an unknown action, replays the run with the same action
identities, and lists its audit receipts. A scenario skips, as "adapter does not declare
'<capability>'", what the adapter's `capabilities` leave out.

Every answer here comes from our store, written by our services only. Each harness call, and
the services of ours that answer it:

- `begin`: `executions.execution_create` (the run) and `proposals.proposal_intake` per action:
  the harness's action id is the `call_id`, and an argument, so the approval binds it too;
- the run itself: `executions.proposal_drive(execute=True)` per action, which finds or claims
  (`dispatcher.proposal_dispatch`) and runs (`worker.operation_execute`) its operation;
- `wait_for_pending`: the proposals whose approval request is `pending`;
- `approve`, `reject`: `approvals.approval_decide` by an operator. Reviewed arguments are
  another proposal of the agent, which the operator grants; the original is denied;
- `cancel`: `cancellation.proposal_cancel` by the agent for each action of the run; it
  returns when the service does;
- `wait`: the run's outcome from its operations' states (below);
- `reconcile`: `reconciliation.operation_reconcile(enqueue=False)`, its lookup bounded by the
  harness's timeout; the answer is the operation's state and the evidence the pass recorded;
- `replay`: `begin` again. Intake answers the same proposals for the same call ids, and
  `proposal_drive` finds their operations and runs only one the store left `claimed` (a
  retry that reconciliation re-queued: this adapter is the worker);
- `audit_receipts`: the run's `Execution` (started, finished) and our audit events of its
  proposals.

An action's outcome: `completed`/`reconciled_completed` are completed; `unknown` unknown; an
action cancelled (the proposal's `cancelled_at`) that did not complete is cancelled; an approval
denied is no outcome of the run (a rejected action never runs); anything else failed. The run is
cancelled if any action was, else unknown if any was, else failed if any was, else completed.

Receipts, from the audit: `approval.requested`, `approval.granted`, `approval.denied`;
reconciliation starts with `operation.unknown` (an operation is reconciled because it is
unknown: our audit has no record of a lookup's start), and ends with `operation.reconciled`, a
reconciler's `operation.retried` (an authoritative absence) or an `operation.evidence` note (an
absence that allows no retry, a conflict, a lookup that did not answer in time).

Not claimed (the harness reports each scenario skipped, "adapter does not declare ..."):
- `parallel_barrier` under the run-wide profile (AB010): an approval holds its own action only,
  never its run's siblings. `per_action_adapter` declares it, for `--approval-profile
  per-action` (AB018, AB011).
- `timeout` (AB009): a run has no timeout of its own here; a contract's timeout is fixed at
  registration, and a call past it is `unknown` (its request may yet land), never fenced.
- `delegation` (AB014, AB015): an approval does not gate other actions that name it as their
  parent; our delegation narrows authority (grants), it does not carry approvals.

The store: `BARRIER_DATABASE_URL` (a SQLite file or a PostgreSQL database of its own, migrated
here), else a fresh SQLite file in a temporary folder. The runtime loads the extension
`tests.peers.barrier_extension` (its contracts and handler) and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from agentbarrier import (
    ActionRequest,
    AgentAdapter,
    AuditEvent,
    AuditReceipt,
    Capability,
    ReconciliationEvidence,
    ReconciliationStatus,
    RunHandle,
    RunOutcome,
    RunStatus,
    UnsupportedCapability,
    action_digest,
)
from agentbarrier.adapter import validate_actions, validate_timeout
from agentbarrier.errors import AdapterContractError
from agentbarrier.probe import EffectProbe

T = TypeVar("T")

ADAPTER = "agentbarrier"
TENANT = "agentbarrier"
AGENT = "barrier-agent"
OPERATOR = "barrier-operator"
#: How often a run waiting for a decision asks the store again (a decision also wakes it).
POLL = 0.02
#: How long `close` waits for a run it cancelled.
CLOSE_WAIT = 10.0

CLAIMED = frozenset({Capability.APPROVAL, Capability.REJECTION, Capability.ARGUMENT_BINDING,
                     Capability.REPLAY, Capability.OUTCOME_AMBIGUITY,
                     Capability.OUTCOME_RECONCILIATION, Capability.CANCELLATION,
                     Capability.AUDIT_RECEIPTS})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1) * 1000


def _configure() -> None:
    """Django settings for this process: our test settings, this module's store, only the
    barrier extension. Called before `django.setup()`, once."""
    url = os.environ.get("BARRIER_DATABASE_URL", "")
    if not url:
        folder = tempfile.mkdtemp(prefix="agentbarrier-store-")
        url = f"sqlite:///{folder}/store.sqlite3"
        os.environ.setdefault("APP_VAR_DIR", folder)
    os.environ["DATABASE_URL"] = url
    os.environ["DISPATCH_EXTENSIONS"] = "tests.peers.barrier_extension"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")


@dataclass
class Run:
    """What our store holds for one harness run: its execution and each action's proposal."""

    run_id: str
    execution_id: str
    proposals: dict[str, str]  # harness action id -> our proposal id (the reviewed one, if any)
    gated: frozenset[str]


class Store:
    """Our side: one tenant, an agent that proposes, an operator that decides. Synchronous;
    the run handles call it from worker threads (each has its own database connection)."""

    def __init__(self) -> None:
        _configure()
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from django.utils import timezone

        from dispatch.models import Principal
        from dispatch.runtime import get_runtime
        from dispatch.services.authority import grant_issue
        from dispatch.services.principals import agent_create, human_create
        from tests.peers.barrier_extension import CONTRACTS

        operations = sorted(CONTRACTS.values())
        get_runtime().require_operations(operations)  # the extension is the one loaded
        found = {p.name: p for p in Principal.objects.filter(tenant__name=TENANT)}
        if AGENT not in found:
            found[AGENT], _ = agent_create(name=AGENT, tenant=TENANT, tools=operations)
            grant_issue(issuer="admin", subject=found[AGENT], operations=operations,
                        scope={"recipient": "*"}, now=timezone.now() - timedelta(minutes=1))
        if OPERATOR not in found:
            found[OPERATOR], _ = human_create(name=OPERATOR, tenant=TENANT, role="operator",
                                              password=os.urandom(16).hex())
        self.agent, self.operator = found[AGENT], found[OPERATOR]

    # --- begin ------------------------------------------------------------------------------

    def open_run(self, run_id: str, actions: Sequence[ActionRequest]) -> Run:
        """The run's execution (found again on a replay) and one proposal per action, made by
        intake with the action id as the call id: a replay gets the same proposals."""
        from django.utils import timezone

        from dispatch.models import Execution, Proposal
        from dispatch.services.executions import execution_create
        from dispatch.services.proposals import proposal_intake
        from tests.peers.barrier_extension import CONTRACTS, IDENTITY, TOOL

        execution = Execution.objects.filter(principal=self.agent, adapter=ADAPTER,
                                             adapter_config__run_id=run_id).first()
        if execution is None:
            execution = execution_create(principal=self.agent, adapter=ADAPTER,
                                         now=timezone.now(), adapter_config={"run_id": run_id})
        proposals = {}
        for action in actions:
            if action.tool_name != TOOL:
                raise AdapterContractError(f"no contract of ours serves {action.tool_name!r}")
            intake = proposal_intake(
                principal=self.agent, operation=CONTRACTS[action.requires_approval],
                arguments={IDENTITY: action.action_id, **action.arguments},
                execution_id=execution.id, call_id=action.action_id, now=timezone.now())
            proposal_id = intake.proposal.id
            # A replay follows the proposal an operator granted with reviewed arguments.
            reviewed = Proposal.objects.filter(
                principal=self.agent, call_scope=execution.id,
                call_id__startswith=f"{action.action_id}#reviewed-").order_by(
                "-created_at").values_list("id", flat=True).first()
            proposals[action.action_id] = reviewed or proposal_id
        return Run(run_id=run_id, execution_id=execution.id, proposals=proposals,
                   gated=frozenset(a.action_id for a in actions if a.requires_approval))

    # --- approvals ------------------------------------------------------------------------

    def pending(self, proposal_ids: Sequence[str]) -> list[ActionRequest]:
        """The actions whose approval request is pending, as the store holds them."""
        from django.utils import timezone

        from dispatch.models import ApprovalRequest
        from protocols.approvals import effective_approval_state
        from protocols.lifecycle import ApprovalState
        from tests.peers.barrier_extension import action_of

        now = timezone.now()
        found = []
        for request in ApprovalRequest.objects.filter(
                proposal_id__in=proposal_ids).select_related("proposal"):
            if effective_approval_state(request.state, request.expires_at,
                                        now) is ApprovalState.PENDING:
                stored = action_of(request.proposal.arguments)
                found.append(ActionRequest(action_id=stored.action_id,
                                           tool_name=stored.tool_name,
                                           arguments=stored.arguments, requires_approval=True))
        return found

    def decide(self, proposal_id: str, decision: str, reason: str = "") -> None:
        """The operator decides the exact proposal they are shown (its digest)."""
        from django.utils import timezone

        from dispatch.models import Proposal
        from dispatch.services.approvals import approval_decide

        proposal = Proposal.objects.select_related("approval").get(id=proposal_id)
        approval_decide(approver=self.operator, approval_id=proposal.approval.id,
                        decision=decision, digest=proposal.digest, reason=reason,
                        now=timezone.now())

    def propose_reviewed(self, proposal_id: str, arguments: dict[str, Any]) -> str:
        """Reviewed arguments are another action: the agent proposes them (same identity, a
        call id of their own), for the operator to grant that exact snapshot."""
        from django.utils import timezone

        from dispatch.models import Proposal
        from dispatch.services.proposals import proposal_intake
        from tests.peers.barrier_extension import IDENTITY

        original = Proposal.objects.get(id=proposal_id)
        identity = original.arguments[IDENTITY]
        reviewed = {IDENTITY: identity, **arguments}
        tag = hashlib.sha256(json.dumps(reviewed, sort_keys=True).encode()).hexdigest()[:16]
        intake = proposal_intake(principal=self.agent, operation=original.operation,
                                 arguments=reviewed, execution_id=original.execution_id,
                                 call_id=f"{identity}#reviewed-{tag}", now=timezone.now())
        return str(intake.proposal.id)

    def arguments(self, proposal_id: str) -> dict[str, Any]:
        from dispatch.models import Proposal
        from tests.peers.barrier_extension import action_of

        return dict(action_of(Proposal.objects.get(id=proposal_id).arguments).arguments)

    # --- the run --------------------------------------------------------------------------

    def drive(self, proposal_id: str) -> str:
        """One step of `proposal_drive`, running the handler here: 'pending' while the
        approval waits, else 'done' (settled, refused, or left for reconciliation)."""
        from django.utils import timezone

        from dispatch.services.executions import Pending, proposal_drive
        from protocols.denials import Denial

        try:
            step = proposal_drive(principal=self.agent, proposal_id=proposal_id,
                                  now=timezone.now(), execute=True)
        except Denial:
            return "done"  # denied, withdrawn, or unsafe to repeat: the store says which
        return "pending" if isinstance(step, Pending) else "done"

    def cancel(self, proposal_ids: Sequence[str]) -> None:
        """The agent cancels each action of its run (`POST operations/{id}/cancel/`)."""
        from django.utils import timezone

        from dispatch.services.cancellation import proposal_cancel
        from protocols.denials import Denial

        for proposal_id in proposal_ids:
            with contextlib.suppress(Denial):  # already settled or cancelled: nothing to stop
                proposal_cancel(actor=self.agent, proposal_id=proposal_id, now=timezone.now())

    def outcome(self, run: Run) -> RunOutcome:
        """The run's outcome from its operations (module doc); the first one finishes its
        execution (`execution_move`)."""
        from django.utils import timezone

        from dispatch.models import ApprovalRequest, Execution, Operation, Proposal
        from dispatch.services.executions import execution_move
        from protocols.lifecycle import ApprovalState, OperationState
        from protocols.lifecycle_runs import ExecutionEvent

        proposals = {p.id: p for p in Proposal.objects.filter(id__in=run.proposals.values())}
        operations = {o.proposal_id: o for o in Operation.objects.filter(
            proposal_id__in=proposals)}
        denied = set(ApprovalRequest.objects.filter(
            proposal_id__in=proposals, state=ApprovalState.DENIED).values_list(
            "proposal_id", flat=True))
        statuses: dict[str, RunStatus] = {}
        for action_id, proposal_id in run.proposals.items():
            proposal, operation = proposals[proposal_id], operations.get(proposal_id)
            state = operation.state if operation else None
            if state in (OperationState.COMPLETED, OperationState.RECONCILED_COMPLETED):
                continue
            if proposal.cancelled_at is not None:
                statuses[action_id] = RunStatus.CANCELLED
            elif state == OperationState.UNKNOWN:
                statuses[action_id] = RunStatus.UNKNOWN
            elif operation is None and proposal_id in denied:
                continue  # rejected: it never runs, and the run goes on without it
            else:
                statuses[action_id] = RunStatus.FAILED
        status = next((s for s in (RunStatus.CANCELLED, RunStatus.UNKNOWN, RunStatus.FAILED)
                       if s in statuses.values()), RunStatus.COMPLETED)
        detail = "; ".join(
            f"{action_id.rsplit(':', 1)[-1]}: {_state_of(operations.get(proposal_id))}"
            for action_id, proposal_id in run.proposals.items())
        if Execution.objects.filter(id=run.execution_id).exclude(
                state=Execution.State.FINISHED).exists():
            execution_move(Execution.objects.get(id=run.execution_id), ExecutionEvent.FINISH,
                           now=timezone.now(), actor="agentbarrier", final=status.value)
        return RunOutcome(status, detail)

    # --- reconciliation -------------------------------------------------------------------

    def reconcile(self, proposal_id: str, timeout: float) -> ReconciliationEvidence:
        """One reconciliation of the action's operation, its lookup bounded by `timeout`;
        the evidence is what the store then holds."""
        from django.test.utils import override_settings
        from django.utils import timezone

        from dispatch.models import Operation
        from dispatch.services.reconciliation import operation_reconcile
        from protocols.lifecycle import OperationState
        from tests.peers.barrier_extension import (
            ABSENT,
            CONFLICT,
            DIGEST,
            PRESENT,
            STILL_IN_FLIGHT,
            TIMEOUT,
            action_of,
        )

        operation = Operation.objects.select_related("proposal").get(proposal_id=proposal_id)
        # As the periodic reconciler would: an absence found while an attempt's request may
        # still arrive (within the delivery fence) is asked again once it cannot.
        deadline = time.monotonic() + 3 * TIMEOUT + 1
        while True:
            with override_settings(RECONCILE_LOOKUP_TIMEOUT=timeout):
                operation_reconcile(operation_id=operation.id, now=timezone.now(),
                                    enqueue=False)
            operation.refresh_from_db()
            if STILL_IN_FLIGHT not in operation.evidence or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        action = action_of(operation.proposal.arguments)
        evidence, digests = operation.evidence, tuple(DIGEST.findall(operation.evidence))
        if operation.state == OperationState.RECONCILED_COMPLETED or PRESENT in evidence:
            status = ReconciliationStatus.COMMITTED
        elif operation.state == OperationState.RECONCILED_NO_EFFECT or ABSENT in evidence:
            status = ReconciliationStatus.NOT_COMMITTED
        elif CONFLICT in evidence:
            status = ReconciliationStatus.CONFLICT
        else:
            status = ReconciliationStatus.UNAVAILABLE
            if "gave no answer within" in evidence:
                evidence = f"reconciliation timed out: {evidence}"
        return ReconciliationEvidence(
            action_id=action.action_id, status=status,
            expected_action_digest=action_digest(action), observed_action_digests=digests,
            detail=f"{operation.state}: {evidence or 'no lookup was recorded'}")

    # --- receipts -------------------------------------------------------------------------

    def receipts(self, run: Run) -> tuple[AuditReceipt, ...]:
        from dispatch.models import AuditEvent as Event
        from dispatch.models import Execution, Proposal
        from tests.peers.barrier_extension import action_of

        execution = Execution.objects.get(id=run.execution_id)
        proposals = {p.id: p for p in Proposal.objects.filter(
            principal=self.agent, execution_id=run.execution_id)}
        rows: list[tuple[int, int, int, AuditEvent, str | None, str | None, str | None]] = [
            (_ns(execution.created_at), 0, 0, AuditEvent.RUN_STARTED, None, None, None)]
        for event in Event.objects.filter(proposal_id__in=proposals).order_by("id"):
            mapped = _receipt_event(event.kind, event.actor, event.details)
            if mapped is None:
                continue
            action = action_of(proposals[event.proposal_id].arguments)
            rows.append((_ns(event.at), 1, event.id, mapped, action.action_id,
                         action_digest(action), event.kind))
        if execution.state == Execution.State.FINISHED:
            rows.append((_ns(execution.updated_at), 2, 0, _RUN_ENDS[execution.final], None,
                         None, f"execution {execution.id} finished: {execution.final}"))
        rows.sort(key=lambda row: row[:3])
        return tuple(
            AuditReceipt(sequence=number, run_id=run.run_id, event=event, timestamp_ns=at,
                         action_id=action_id, action_digest=digest, detail=detail)
            for number, (at, _, _, event, action_id, digest, detail) in enumerate(rows, 1))


def _state_of(operation: Any) -> str:
    return str(operation.state) if operation is not None else "not dispatched"


_RUN_ENDS = {RunStatus.COMPLETED.value: AuditEvent.RUN_COMPLETED,
             RunStatus.CANCELLED.value: AuditEvent.RUN_CANCELLED,
             RunStatus.UNKNOWN.value: AuditEvent.RUN_UNKNOWN,
             RunStatus.FAILED.value: AuditEvent.RUN_FAILED,
             RunStatus.TIMED_OUT.value: AuditEvent.RUN_TIMED_OUT}
_DECISIONS = {"approval.requested": AuditEvent.APPROVAL_REQUESTED,
              "approval.granted": AuditEvent.APPROVED,
              "approval.denied": AuditEvent.REJECTED,
              "operation.unknown": AuditEvent.RECONCILIATION_STARTED}


def _receipt_event(kind: str, actor: str, details: dict[str, Any]) -> AuditEvent | None:
    """The harness's receipt for one of our audit events, or None (module doc)."""
    from tests.peers.barrier_extension import ABSENT, CONFLICT

    if kind in _DECISIONS:
        return _DECISIONS[kind]
    if kind == "operation.reconciled":
        return (AuditEvent.RECONCILIATION_COMMITTED
                if details.get("outcome") == "reconciled_completed"
                else AuditEvent.RECONCILIATION_NOT_COMMITTED)
    if kind == "operation.retried" and actor == "reconciler":
        return AuditEvent.RECONCILIATION_NOT_COMMITTED
    if kind == "operation.evidence":
        note = str(details.get("evidence", ""))
        if ABSENT in note:
            return AuditEvent.RECONCILIATION_NOT_COMMITTED
        if CONFLICT in note:
            return AuditEvent.RECONCILIATION_CONFLICT
        if "gave no answer within" in note:
            return AuditEvent.RECONCILIATION_TIMED_OUT
        return AuditEvent.RECONCILIATION_UNAVAILABLE
    return None


class ConsoleAdapter(AgentAdapter):
    """Our runtime behind the harness's adapter contract (module doc)."""

    def __init__(self, *, per_action: bool = False) -> None:
        self.name = "agent-console" + (" (per-action barrier)" if per_action else "")
        self.capabilities = CLAIMED | (
            {Capability.PARALLEL_BARRIER} if per_action else frozenset())
        self.store = Store()
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="store")

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def begin(self, *, run_id: str, actions: Sequence[ActionRequest], effect: EffectProbe,
                    timeout_seconds: float | None = None) -> RunHandle:
        normalized = validate_actions(actions)
        if validate_timeout(timeout_seconds) is not None:
            raise UnsupportedCapability("a run has no timeout of its own: a contract's timeout "
                                        "is fixed at registration")
        from tests.peers.barrier_extension import connect

        connect([a.action_id for a in normalized], effect, asyncio.get_running_loop())
        run = await self.call(self.store.open_run, run_id, normalized)
        return ConsoleRun(self, run, normalized, effect)


class ConsoleRun(RunHandle):
    def __init__(self, adapter: ConsoleAdapter, run: Run, actions: tuple[ActionRequest, ...],
                 effect: EffectProbe) -> None:
        self._adapter, self._store, self._run = adapter, adapter.store, run
        self._actions, self._effect = actions, effect
        self._changed = {a.action_id: asyncio.Event() for a in actions}
        self._task = asyncio.create_task(self._drive(), name=f"agent-console:{run.run_id}")

    async def _drive(self) -> RunOutcome:
        try:
            await asyncio.gather(*(self._drive_one(a.action_id) for a in self._actions))
            return await self._adapter.call(self._store.outcome, self._run)
        except Exception as exc:  # an adapter or store error is evidence, not a hang
            traceback.print_exc()  # on the harness's console, beside the finding it causes
            return RunOutcome(RunStatus.FAILED, f"{type(exc).__name__}: {exc}")

    async def _drive_one(self, action_id: str) -> None:
        changed = self._changed[action_id]
        while True:
            changed.clear()
            step = await self._adapter.call(self._store.drive, self._run.proposals[action_id])
            if step != "pending":
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), POLL)

    def _proposal(self, action_id: str) -> str:
        if action_id not in self._run.gated:
            raise AdapterContractError(f"{action_id!r} is not pending approval")
        return self._run.proposals[action_id]

    async def wait_for_pending(self, timeout_seconds: float) -> tuple[ActionRequest, ...]:
        if not self._run.gated:
            raise AdapterContractError("this run contains no approval-gated actions")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            pending = await self._adapter.call(self._store.pending,
                                               list(self._run.proposals.values()))
            if pending:
                order = [a.action_id for a in self._actions]
                return tuple(sorted(pending, key=lambda a: order.index(a.action_id)))
            if self._task.done():
                raise AdapterContractError(f"the run ended before any approval was pending: "
                                           f"{self._task.result()}")
            if loop.time() >= deadline:
                raise TimeoutError
            await asyncio.sleep(POLL)

    async def approve(self, action_id: str, replacement: ActionRequest | None = None) -> None:
        proposal_id = self._proposal(action_id)
        if replacement is not None:
            if (replacement.action_id, replacement.tool_name) != (action_id, self._tool(action_id)):
                raise AdapterContractError("a replacement keeps the action id and the tool")
            current = await self._adapter.call(self._store.arguments, proposal_id)
            if dict(replacement.arguments) != current:
                # The run follows the reviewed proposal before the original is denied.
                reviewed = await self._adapter.call(self._store.propose_reviewed, proposal_id,
                                                    dict(replacement.arguments))
                self._run.proposals[action_id] = reviewed
                await self._adapter.call(self._store.decide, reviewed, "grant")
                await self._adapter.call(self._store.decide, proposal_id, "deny",
                                         "replaced by the reviewed arguments")
                self._changed[action_id].set()
                return
        await self._adapter.call(self._store.decide, proposal_id, "grant")
        self._changed[action_id].set()

    def _tool(self, action_id: str) -> str:
        return next(a.tool_name for a in self._actions if a.action_id == action_id)

    async def reject(self, action_id: str, reason: str | None = None) -> None:
        await self._adapter.call(self._store.decide, self._proposal(action_id), "deny",
                                 reason or "")
        self._changed[action_id].set()

    async def cancel(self) -> None:
        if self._task.done():
            return
        await self._adapter.call(self._store.cancel, list(self._run.proposals.values()))
        for changed in self._changed.values():
            changed.set()

    async def wait(self, timeout_seconds: float) -> RunOutcome:
        try:
            return await asyncio.wait_for(asyncio.shield(self._task), timeout=timeout_seconds)
        except TimeoutError:
            return RunOutcome(RunStatus.FAILED, "the run did not settle in time")

    async def reconcile(self, action_id: str, timeout_seconds: float) -> ReconciliationEvidence:
        if not self._task.done():
            raise AdapterContractError("cannot reconcile before the run has settled")
        if action_id not in self._run.proposals:
            raise AdapterContractError(f"{action_id!r} is no action of this run")
        bound = validate_timeout(timeout_seconds)
        assert bound is not None
        return await self._adapter.call(self._store.reconcile, self._run.proposals[action_id],
                                        bound)

    async def replay(self) -> RunHandle:
        if not self._task.done():
            raise AdapterContractError("cannot replay a run before it has settled")
        return await self._adapter.begin(run_id=self._run.run_id, actions=self._actions,
                                         effect=self._effect)

    async def audit_receipts(self) -> tuple[AuditReceipt, ...]:
        return await self._adapter.call(self._store.receipts, self._run)

    async def close(self) -> None:
        if self._task.done():
            return
        await self.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_WAIT)


def adapter() -> ConsoleAdapter:
    """`agentbarrier verify tests.peers.agentbarrier_adapter:adapter` (run-wide profile)."""
    return ConsoleAdapter()


def per_action_adapter() -> ConsoleAdapter:
    """The same, declaring the parallel barrier: for `--approval-profile per-action`."""
    return ConsoleAdapter(per_action=True)
