"""The embedded workflow runtime: runs a `CheckedWorkflow` through the same services and the
same dispatcher as every other caller (issue 8, item 4; spec §7, §10).

A certificate is not authorization. `run_workflow` takes only a `CheckedWorkflow` (the type is
the gate) and refuses to start unless the contracts it was checked against are still the
registered ones (`checked.binds(registry)`) and deployment policy still allows the operations
and effects it uses; after that, every step is a service call and the
services decide at run time: grants, expiry and revocation, tool sets, resource revisions and
states, approvals and permits, budgets and deployment policy. A refusal is recorded as a typed
outcome (`StepOutcome(status="denied", code=...)`) and ends the run (a `try` catches it).

Durability (spec §8). A run is an `Execution` of the embedded runtime whose transcript is the
run's journal: a header (the workflow's shape digest, its contract fingerprints and the pinned
inputs) and one entry per settled step, keyed by the step path (with loop iteration numbers).
Re-running the same execution replays the workflow from the top: a journaled step returns its
recorded result without calling anything; `propose` uses the step path as `call_id`, so a crash
between the proposal and its journal entry never proposes twice; `dispatch` finds the
operation the dispatcher already claimed for the proposal. A pending approval (or an operation
still running on a worker) makes the run return `waiting`; running it again resumes.

Supported steps: create, edit, let, propose, request_approval, dispatch, if, match, loop
(sequential, not `parallel: true`), try/catch. Not yet: receive, approve, agent, parallel, race
and parallel loops; a workflow containing one is refused before any step runs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal, NoReturn

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from dispatch.models import (
    ApprovalRequest,
    Attempt,
    Decision,
    Execution,
    Operation,
    Permit,
    Principal,
    Proposal,
    Resource,
    Revision,
    TranscriptEntry,
)
from dispatch.runtime import get_runtime
from dispatch.services.access import access_resource_by_id
from dispatch.services.admission import resolve_resources, validate_arguments
from dispatch.services.authority import select_authority
from dispatch.services.dispatcher import proposal_dispatch
from dispatch.services.execution import operation_execute
from dispatch.services.proposals import CALL_ID, proposal_create
from dispatch.services.resources import resource_create, revision_create
from protocols.canonical import CanonicalizationError, digest, digest_bytes, materialize_defaults
from protocols.denials import Denial, DenialCode
from protocols.lifecycle import RESOURCE_PROTOCOLS, ApprovalState, OperationState
from protocols.workflow import CheckedWorkflow
from protocols.workflow.authority import covers
from protocols.workflow.ir import (
    AgentCall,
    Approve,
    Arm,
    Block,
    Create,
    Dispatch,
    Edit,
    Expr,
    If,
    Let,
    Loop,
    Match,
    Parallel,
    Propose,
    Race,
    Receive,
    Ref,
    RequestApproval,
    Step,
    Try,
    Workflow,
)
from protocols.workflow.ir import Literal as Lit

RunState = Literal["waiting", "finished", "denied"]
Mode = Literal["inline", "worker"]

ADAPTER_PREFIX = "workflow:"
HEADER = "workflow"  # the call_id of the journal header; step keys start with `steps[`
_MAX_KEY = 80  # TranscriptEntry.call_id (Proposal.call_id holds 200)
_SETTLED = {
    OperationState.COMPLETED: "completed", OperationState.RECONCILED_COMPLETED: "completed",
    OperationState.FAILED_NO_EFFECT: "failed_no_effect",
    OperationState.RECONCILED_NO_EFFECT: "failed_no_effect",
    OperationState.UNKNOWN: "unknown",
}
_UNSUPPORTED: dict[type, str] = {Receive: "receive", Approve: "approve", AgentCall: "agent",
                                 Parallel: "parallel", Race: "race"}


# --- the public API -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StepOutcome:
    """What one step did, as recorded for this run.

    `status` by step: create/edit `created`/`edited`; propose `proposed`; request_approval
    `pending`, `granted` or `rejected` (denied by the approver, expired or revoked: the workflow's
    `Denied` arm runs); dispatch `completed`, `failed_no_effect`, `unknown` or `running` (claimed,
    not settled yet); if `then`/`else`; match the arm taken; try `caught`. Any step the runtime
    refused: `denied`, with the dispatcher's denial `code` (`authority_revoked`,
    `stale_revision`, ...) and message.
    """

    path: str
    step: str
    status: str
    code: str | None = None
    message: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowRun:
    """The state of one run: `waiting` (resume with the same execution id), `finished`, or
    `denied` (a refusal ended it; `denial` says which)."""

    execution_id: str
    workflow: str
    state: RunState
    outcomes: tuple[StepOutcome, ...]
    waiting_on: str | None = None
    denial: StepOutcome | None = None


class WorkflowRefused(Exception):
    """The runtime refused to start (or resume) the run: nothing ran, nothing was recorded.

    `code`: `contract_mismatch` (the registered contracts moved since checking),
    `unsupported_step`, `input_invalid`, `not_found` (no such execution of this principal) or
    `execution_mismatch` (the execution ran another workflow, contracts or inputs).
    """

    def __init__(self, code: str, message: str, *, path: str | None = None) -> None:
        self.code = code
        self.message = message
        self.path = path
        super().__init__(f"{code}: {message}")


def run_workflow(
    checked: CheckedWorkflow,
    *,
    principal: Principal,
    execution_id: str | None = None,
    inputs: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    mode: Mode = "inline",
) -> WorkflowRun:
    """Run (or resume) `checked` as `principal` until it finishes, waits or is denied.

    `inputs` maps each declared input to its value: a resource id (or a `Resource`) for a
    handle, a bool, or JSON. They are pinned on the first run (a handle at its current revision);
    resuming needs only `execution_id`. `mode="inline"` runs handlers in this process;
    `"worker"` enqueues them and waits like for a human.
    """
    if not isinstance(checked, CheckedWorkflow):
        raise TypeError("run_workflow runs only a CheckedWorkflow: check the workflow first "
                        "(protocols.workflow.check_workflow)")
    if mode not in ("inline", "worker"):
        raise ValueError(f"mode must be 'inline' or 'worker', not {mode!r}")
    now = now or timezone.now()
    workflow = checked.workflow
    registry = get_runtime().registry
    if not checked.binds(registry):
        moved = sorted(name for name, fp in checked.contracts.items()
                       if registry.by_fingerprint(fp) is None or _resolves_to(registry, name)
                       != fp)
        raise WorkflowRefused(
            DenialCode.CONTRACT_MISMATCH.value,
            f"the registered contract(s) {', '.join(moved)} changed since the workflow was "
            "checked; check it again against the current contracts")
    _refuse_outside_policy(checked, get_runtime())
    _refuse_unsupported(workflow.steps)
    header = {"workflow": workflow.name, "shape": shape_digest(workflow),
              "contracts": dict(sorted(checked.contracts.items()))}
    if execution_id is None:
        pinned = _pin_inputs(workflow, principal, inputs)
        execution = Execution.objects.create(
            tenant_id=principal.tenant_id, principal=principal,
            adapter=(ADAPTER_PREFIX + workflow.name)[:100], state=Execution.State.RUNNING,
            created_at=now, updated_at=now)
        journal = _Journal(execution)
        journal.put(HEADER, {**header, "inputs": pinned}, now, kind=TranscriptEntry.Kind.TOOL_CALL)
    else:
        execution = Execution.objects.filter(id=execution_id, principal=principal).first()
        if execution is None:
            raise WorkflowRefused("not_found", f"no execution {execution_id} of this principal")
        journal = _Journal(execution)
        recorded = journal.calls.get(HEADER)
        if recorded is None or {k: recorded.get(k) for k in header} != header:
            raise WorkflowRefused(
                "execution_mismatch", f"execution {execution_id} did not run this workflow "
                "against these contracts; start a new execution (a changed contract needs a "
                "new proposal and approval)")
        pinned = recorded["inputs"]
        if inputs is not None and _raw_inputs(inputs) != {k: v["raw"] for k, v in pinned.items()}:
            raise WorkflowRefused("execution_mismatch",
                                  f"execution {execution_id} was started with other inputs")
        final = journal.finals.get(HEADER)
        if final is not None:
            return _run_from(final, execution.id, workflow.name)
    return _Interpreter(checked, principal, execution, journal, now, mode).run(pinned)


# --- refusals before any step --------------------------------------------------------------------


def _resolves_to(registry: Any, name: str) -> str | None:
    try:
        return str(registry.resolve(name).fingerprint)
    except Denial:
        return None


def _refuse_outside_policy(checked: CheckedWorkflow, runtime: Any) -> None:
    """The deployment binding: operations switched off here, or effects this deployment does
    not allow, refuse the run up front instead of half-way (spec §7 steps 3-4, §10)."""
    for name, fingerprint in sorted(checked.contracts.items()):
        contract = runtime.registry.by_fingerprint(fingerprint)
        effects = {e.value for e in contract.possible_effects}
        forbidden = sorted(effects - runtime.policy.allowed_effects)
        if name in runtime.policy.denied_operations or forbidden:
            what = (f"the effects {', '.join(forbidden)} of {name}" if forbidden
                    else f"the operation {name}")
            raise WorkflowRefused(DenialCode.EFFECT_NOT_PERMITTED.value,
                                  f"deployment policy does not allow {what} here")


def _walk(steps: Block) -> Iterator[Step]:
    for step in steps:
        yield step
        if isinstance(step, If):
            yield from _walk(step.then)
            yield from _walk(step.orelse)
        elif isinstance(step, Match):
            for arm in step.arms:
                yield from _walk(arm.body)
        elif isinstance(step, Loop):
            yield from _walk(step.body)
        elif isinstance(step, Try):
            yield from _walk(step.body)
            yield from _walk(step.catch or ())
        elif isinstance(step, Parallel | Race):
            for branch in step.branches:
                yield from _walk(branch.body)


def _refuse_unsupported(steps: Block) -> None:
    for step in _walk(steps):
        kind = _UNSUPPORTED.get(type(step))
        if kind is None and isinstance(step, Loop) and step.parallel:
            kind = "loop (parallel: true)"
        if kind is not None:
            raise WorkflowRefused("unsupported_step",
                                  f"step kind {kind} is not supported by the runtime yet "
                                  f"(at {step.span.where()})", path=step.span.path)


def shape_digest(workflow: Workflow) -> str:
    """A digest of the workflow's IR without source positions: what a resumed run must match."""
    text = json.dumps(_shape(workflow), sort_keys=True, separators=(",", ":"), default=str)
    return digest_bytes(text.encode())


def _shape(node: Any) -> Any:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {"_": type(node).__name__, **{f.name: _shape(getattr(node, f.name))
                                             for f in dataclasses.fields(node)
                                             if f.name != "span"}}
    if isinstance(node, list | tuple):
        return [_shape(item) for item in node]
    if isinstance(node, frozenset | set):
        return sorted((_shape(item) for item in node), key=lambda v: json.dumps(v, default=str))
    if isinstance(node, Mapping):
        return {str(key): _shape(value) for key, value in node.items()}
    return node


def _raw_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value.id if isinstance(value, Resource) else value
            for name, value in inputs.items()}


def _pin_inputs(workflow: Workflow, principal: Principal,
                inputs: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Validate the inputs against their declarations; pin handles at their current revision."""
    raw = _raw_inputs(inputs or {})
    declared = {i.name: i for i in workflow.inputs}
    undeclared = sorted(set(raw) - set(declared))
    if undeclared:
        raise WorkflowRefused("input_invalid", "undeclared inputs: " + ", ".join(undeclared))
    pinned: dict[str, dict[str, Any]] = {}
    for name, spec in declared.items():
        if name not in raw:
            raise WorkflowRefused("input_invalid", f"input `{name}` is required")
        value = raw[name]
        if spec.kind == "handle":
            pinned[name] = _pin_handle(name, spec.resource or "", spec.state, principal, value)
            continue
        if spec.kind == "bool" and not isinstance(value, bool):
            raise WorkflowRefused("input_invalid", f"input `{name}` must be a bool")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise WorkflowRefused("input_invalid", f"input `{name}` must be JSON") from None
        pinned[name] = {"raw": value, "data": value}
    return pinned


def _pin_handle(name: str, kind: str, state: str | None, principal: Principal,
                value: Any) -> dict[str, Any]:
    """A handle comes from the trusted store, never from the caller's fields (spec §5.1)."""
    try:
        resource = access_resource_by_id(principal, value)
    except Denial:
        raise WorkflowRefused("input_invalid",
                              f"input `{name}`: no resource {value!r} is visible") from None
    if resource.kind != kind:
        raise WorkflowRefused("input_invalid", f"input `{name}` must be a {kind}, "
                              f"{resource.id} is a {resource.kind}")
    expected = state or RESOURCE_PROTOCOLS[kind].initial.value
    if resource.state != expected:
        # The certificate was issued for a handle in the declared state.
        raise WorkflowRefused("input_invalid", f"input `{name}` must be in state {expected!r} "
                              f"as declared; {resource.id} is {resource.state!r}")
    return {"raw": resource.id, "handle": {"id": resource.id,
                                           "revision": resource.current_revision, "kind": kind}}


def _run_from(final: dict[str, Any], execution_id: str, name: str) -> WorkflowRun:
    outcomes = tuple(StepOutcome(**o) for o in final["outcomes"])
    denial = StepOutcome(**final["denial"]) if final.get("denial") else None
    return WorkflowRun(execution_id, name, final["state"], outcomes, denial=denial)


# --- runtime values -----------------------------------------------------------------------------
# Data is plain JSON. Only the steps below mint these; no JSON value is ever one of them.


@dataclass(frozen=True)
class HandleValue:
    id: str
    revision: int
    kind: str


@dataclass(frozen=True)
class ProposalValue:
    id: str
    operation: str


@dataclass(frozen=True)
class DecisionValue:
    proposal_id: str
    tag: Literal["granted", "denied"]
    reason: str = ""


@dataclass(frozen=True)
class PermitValue:
    proposal_id: str
    permit_id: str


@dataclass(frozen=True)
class OutcomeValue:
    tag: str
    result: Any = None
    error: str = ""


_TRUSTED = (HandleValue, ProposalValue, DecisionValue, PermitValue, OutcomeValue)


class _Wait(Exception):
    def __init__(self, path: str) -> None:
        self.path = path


class _Denied(Exception):
    def __init__(self, outcome: StepOutcome) -> None:
        self.outcome = outcome


# --- the journal ----------------------------------------------------------------------------------


class _Journal:
    """The execution's transcript as the run's journal; the first write of a key wins."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        self.calls: dict[str, dict[str, Any]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.finals: dict[str, dict[str, Any]] = {}
        tables = {TranscriptEntry.Kind.TOOL_CALL: self.calls,
                  TranscriptEntry.Kind.TOOL_RESULT: self.results,
                  TranscriptEntry.Kind.FINAL: self.finals}
        for kind, call_id, payload in execution.entries.order_by("seq").values_list(
                "kind", "call_id", "payload"):
            tables[kind][call_id] = payload
        self._tables = tables

    def put(self, key: str, payload: dict[str, Any], now: datetime, *,
            kind: str = TranscriptEntry.Kind.TOOL_RESULT) -> dict[str, Any]:
        for _ in range(5):
            try:
                with transaction.atomic():
                    last = self.execution.entries.aggregate(m=Max("seq"))["m"] or 0
                    TranscriptEntry.objects.create(execution=self.execution, seq=last + 1,
                                                   kind=kind, call_id=key, payload=payload, at=now)
                    Execution.objects.filter(id=self.execution.id).update(updated_at=now)
            except IntegrityError:
                # Another run of this execution wrote first: its entry is the record.
                found = TranscriptEntry.objects.filter(execution=self.execution, call_id=key,
                                                       kind=kind).first()
                if found is not None:
                    payload = found.payload
                    break
                continue
            break
        else:
            raise RuntimeError(f"could not journal {key} of execution {self.execution.id}")
        self._tables[kind][key] = payload
        return payload


def _key(path: str, loops: tuple[int, ...]) -> str:
    """The step's identity in this run: its path, and its iteration in each enclosing loop."""
    key = path + ("@" + ".".join(map(str, loops)) if loops else "")
    # A key is also the proposal's call id: printable ASCII (a match tag may be any text).
    if len(key) <= _MAX_KEY and CALL_ID.fullmatch(key):
        return key
    return "h:" + hashlib.sha256(key.encode()).hexdigest()[:60]


# --- the interpreter ----------------------------------------------------------------------------


class _Interpreter:
    def __init__(self, checked: CheckedWorkflow, principal: Principal, execution: Execution,
                 journal: _Journal, now: datetime, mode: Mode) -> None:
        self.workflow = checked.workflow
        self.principal = principal
        self.execution = execution
        self.journal = journal
        self.now = now
        self.mode = mode
        self.outcomes: list[StepOutcome] = []
        self.expires = _approval_windows(self.workflow.steps)

    def run(self, pinned: dict[str, dict[str, Any]]) -> WorkflowRun:
        env: dict[str, Any] = {}
        for name, value in pinned.items():
            handle = value.get("handle")
            env[name] = HandleValue(**handle) if handle else copy.deepcopy(value["data"])
        state: RunState = "finished"
        waiting_on = denial = None
        try:
            self.block(self.workflow.steps, env, ())
        except _Wait as wait:
            state, waiting_on = "waiting", wait.path
        except _Denied as denied:
            state, denial = "denied", denied.outcome
        run = WorkflowRun(self.execution.id, self.workflow.name, state, tuple(self.outcomes),
                          waiting_on=waiting_on, denial=denial)
        if state == "waiting":
            Execution.objects.filter(id=self.execution.id).update(
                state=Execution.State.WAITING, updated_at=self.now)
            return run
        final = {"state": state, "outcomes": [asdict(o) for o in self.outcomes],
                 "denial": asdict(denial) if denial else None}
        recorded = self.journal.put(HEADER, final, self.now, kind=TranscriptEntry.Kind.FINAL)
        text = "finished" if state == "finished" else f"denied: {denial.code if denial else ''}"
        Execution.objects.filter(id=self.execution.id).update(
            state=Execution.State.FINISHED, final=text, updated_at=self.now)
        return _run_from(recorded, self.execution.id, self.workflow.name)

    # -- blocks and control flow

    def block(self, steps: Block, env: dict[str, Any], loops: tuple[int, ...]) -> None:
        for step in steps:
            self.step(step, env, loops)

    def step(self, step: Step, env: dict[str, Any], loops: tuple[int, ...]) -> None:
        key = _key(step.span.path, loops)
        if isinstance(step, Create):
            self.create(step, env, key)
        elif isinstance(step, Edit):
            self.edit(step, env, key)
        elif isinstance(step, Let):
            env[step.bind] = self.guard(key, "let", lambda: self.value(env, step.value))
        elif isinstance(step, Propose):
            self.propose(step, env, key)
        elif isinstance(step, RequestApproval):
            self.request_approval(step, env, key)
        elif isinstance(step, Dispatch):
            self.dispatch(step, env, key)
        elif isinstance(step, If):
            self.if_(step, env, key, loops)
        elif isinstance(step, Match):
            self.match(step, env, key, loops)
        elif isinstance(step, Loop):
            self.loop(step, env, key, loops)
        elif isinstance(step, Try):
            self.try_(step, env, key, loops)
        else:  # refused before the run started; kept as a guard
            raise WorkflowRefused("unsupported_step", f"step kind {type(step).__name__} is not "
                                  "supported by the runtime yet", path=step.span.path)

    def if_(self, step: If, env: dict[str, Any], key: str, loops: tuple[int, ...]) -> None:
        condition = self.guard(key, "if", lambda: self.value(env, step.condition))
        if not isinstance(condition, bool):
            self.deny(key, "if", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                "pointer": f"/{step.condition}", "message": "an `if` condition must be a bool"}]),
                journal=False)
        branch = "then" if condition else "else"
        self.record(key, "if", branch)
        self.block(step.then if condition else step.orelse, env, loops)

    def match(self, step: Match, env: dict[str, Any], key: str, loops: tuple[int, ...]) -> None:
        subject = self.guard(key, "match", lambda: self.value(env, step.subject))
        fields: dict[str, Any]
        if isinstance(subject, DecisionValue):
            tag = subject.tag
            if tag == "granted":
                permit = Permit.objects.filter(proposal_id=subject.proposal_id).first()
                fields = {"permit": PermitValue(subject.proposal_id, permit.id if permit else "")}
            else:
                fields = {"reason": subject.reason}
        elif isinstance(subject, OutcomeValue):
            tag = subject.tag
            fields = {"result": subject.result} if tag == "completed" else {"error": subject.error}
        elif isinstance(subject, _TRUSTED):
            self.deny(key, "match", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                "pointer": f"/{step.subject}", "message": "cannot match on this value"}]),
                journal=False)
        else:
            # JSON data: a string is its own tag, an object carries it in `tag`.
            raw = subject.get("tag") if isinstance(subject, dict) else subject
            tag = raw.lower() if isinstance(raw, str) else "_"
            fields = subject if isinstance(subject, dict) else {}
        arm = _arm(step.arms, tag)
        self.record(key, "match", tag if arm is None or arm.tag != "_" else f"_ ({tag})")
        if arm is None:
            return
        for field_name, name in arm.bindings:
            if field_name not in fields:
                self.deny(key, "match", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                    "pointer": f"/{step.subject}/{field_name}",
                    "message": f"the `{tag}` value has no field `{field_name}`"}]), journal=False)
            value = fields[field_name]
            env[name] = value if isinstance(value, _TRUSTED) else copy.deepcopy(value)
        self.block(arm.body, env, loops)

    def loop(self, step: Loop, env: dict[str, Any], key: str, loops: tuple[int, ...]) -> None:
        items: list[Any]
        if step.over is not None:
            over_expr = step.over
            over = self.guard(key, "loop", lambda: self.value(env, over_expr))
            if not isinstance(over, list):
                self.deny(key, "loop", Denial(DenialCode.SCHEMA_INVALID, errors=[{
                    "pointer": f"/{step.over}", "message": "a loop runs over a JSON list"}]),
                    journal=False)
            items = over
        else:
            items = [None] * (step.times or 0)
        for number, item in enumerate(items, start=1):
            body = dict(env)
            if step.over is not None:
                body[step.item or "item"] = copy.deepcopy(item)
            self.block(step.body, body, (*loops, number))
            for name in env:  # the body may rebind outer names (the checker keeps them equal)
                env[name] = body[name]

    def try_(self, step: Try, env: dict[str, Any], key: str, loops: tuple[int, ...]) -> None:
        body = dict(env)
        try:
            self.block(step.body, body, loops)
        except _Denied as denied:
            self.record(key, "try", "caught", code=denied.outcome.code,
                        message=denied.outcome.message, detail={"at": denied.outcome.path})
            catch = dict(env)
            if step.catch is not None:
                self.block(step.catch, catch, loops)
            if step.bind is not None and step.fallback is not None:
                catch[step.bind] = self.value(catch, step.fallback)
            env.update(catch)
            return
        if step.bind is not None and step.result is not None:
            body[step.bind] = self.value(body, step.result)
        env.update(body)

    # -- the exact-action steps

    def create(self, step: Create, env: dict[str, Any], key: str) -> None:
        done = self.replay(key)
        if done is None:
            payload = self.guard(key, "create", lambda: self.data(env, step.payload))
            try:
                resource, revision = resource_create(principal=self.principal, kind=step.kind,
                                                     payload=payload, now=self.now)
            except Denial as denial:
                self.deny(key, "create", denial)
            done = self.settle(key, StepOutcome(key, "create", "created", detail={
                "resource_id": resource.id, "revision": revision.number, "kind": resource.kind}))
        if step.bind is not None:
            env[step.bind] = HandleValue(done["resource_id"], done["revision"], done["kind"])

    def edit(self, step: Edit, env: dict[str, Any], key: str) -> None:
        done = self.replay(key)
        if done is None:
            handle = self.guard(key, "edit", lambda: self.trusted(env, step.handle, HandleValue))
            payload = self.guard(key, "edit", lambda: self.data(env, step.payload))
            revision = self._adopt_edit(key, handle, payload)
            if revision is None:
                self.journal.put(key, {"resource_id": handle.id, "base": handle.revision},
                                 self.now, kind=TranscriptEntry.Kind.TOOL_CALL)
                try:
                    _, made = revision_create(principal=self.principal, resource_id=handle.id,
                                              base_revision=handle.revision, payload=payload,
                                              now=self.now)
                except Denial as denial:
                    self.deny(key, "edit", denial)
                revision = made.number
            done = self.settle(key, StepOutcome(key, "edit", "edited", detail={
                "resource_id": handle.id, "revision": revision, "kind": handle.kind}))
        name = step.bind or (step.handle.name if isinstance(step.handle, Ref) else None)
        if name is not None:
            env[name] = HandleValue(done["resource_id"], done["revision"], done["kind"])

    def _adopt_edit(self, key: str, handle: HandleValue, payload: Any) -> int | None:
        """After a crash between an edit and its journal entry, the revision the run made."""
        if key not in self.journal.calls:
            return None
        made = Revision.objects.filter(resource_id=handle.id, number=handle.revision + 1,
                                       created_by=self.principal).first()
        if made is None:
            return None
        try:
            full = materialize_defaults(get_runtime().resource_kinds[handle.kind].payload_schema,
                                        payload)
            same = digest(full) == made.digest
        except (CanonicalizationError, KeyError, TypeError, ValueError):
            same = False
        return made.number if same else None

    def propose(self, step: Propose, env: dict[str, Any], key: str) -> None:
        done = self.replay(key)
        if done is None:
            arguments = self.guard(key, "propose", lambda: {
                name: self.argument(env, expr) for name, expr in step.args})
            existing = Proposal.objects.filter(principal=self.principal,
                                               execution_id=self.execution.id,
                                               call_id=key).exists()
            try:
                if not existing:
                    self._within_declared_authority(step.operation, arguments)
                # The step path is the call id: proposing this step again returns this proposal.
                proposal = proposal_create(
                    principal=self.principal, operation=step.operation, arguments=arguments,
                    execution_id=self.execution.id, call_id=key,
                    approval_expires_in=self.expires.get(step.bind or ""), now=self.now)
            except Denial as denial:
                self.deny(key, "propose", denial)
            done = self.settle(key, StepOutcome(key, "propose", "proposed", detail={
                "proposal_id": proposal.id, "operation": proposal.operation,
                "digest": proposal.digest}))
        if step.bind is not None:
            env[step.bind] = ProposalValue(done["proposal_id"], done["operation"])

    def _within_declared_authority(self, operation: str, arguments: dict[str, Any]) -> None:
        """Effective authority is the intersection of the workflow's declared authority, the
        principal's grants and deployment policy (spec §4.3): values the checker could not see
        (a handle's sender, a JSON input) must lie within what the workflow declares too."""
        contract = get_runtime().contract(operation)
        full = validate_arguments(contract, arguments)
        resolved = resolve_resources(contract, self.principal, full, event=None)
        selected = select_authority(contract, resolved.arguments)
        if not any(covers(a.operations, a.scope, contract.qualified_name, selected)
                   for a in self.workflow.authority):
            raise Denial(DenialCode.SCOPE_VIOLATION,
                         f"{operation} with {selected} is outside the authority the workflow "
                         "declares; declare it under `authority:` and check the workflow again.",
                         selected=selected)

    def request_approval(self, step: RequestApproval, env: dict[str, Any], key: str) -> None:
        done = self.replay(key)
        if done is None:
            proposal = self.guard(key, "request_approval",
                                  lambda: self.trusted(env, step.proposal, ProposalValue))
            # The approval request was opened with the proposal; its state is the decision.
            approval = ApprovalRequest.objects.filter(proposal_id=proposal.id).first()
            if approval is None:
                self.deny(key, "request_approval", Denial(
                    DenialCode.PROTOCOL_STATE_INVALID,
                    f"{proposal.operation} takes no approval: no approval request exists.",
                    proposal_id=proposal.id), journal=False)
            detail = {"proposal_id": proposal.id, "approval_id": approval.id,
                      "approval_state": approval.state}
            if approval.state == ApprovalState.PENDING and self.now < approval.expires_at:
                self.record(key, "request_approval", "pending", detail=detail)
                raise _Wait(key)
            if approval.state == ApprovalState.GRANTED:
                outcome = StepOutcome(key, "request_approval", "granted", detail=detail)
            else:
                decision = Decision.objects.filter(approval_id=approval.id).first()
                reason = (decision.reason or "denied") if decision is not None else (
                    "expired" if approval.state == ApprovalState.PENDING else approval.state)
                outcome = StepOutcome(key, "request_approval", "rejected",
                                      detail={**detail, "reason": reason})
            done = self.settle(key, outcome)
        if step.bind is not None:
            tag: Literal["granted", "denied"] = (
                "granted" if done["_status"] == "granted" else "denied")
            env[step.bind] = DecisionValue(done["proposal_id"], tag, done.get("reason", ""))

    def dispatch(self, step: Dispatch, env: dict[str, Any], key: str) -> None:
        done = self.replay(key)
        if done is None:
            proposal = self.guard(key, "dispatch",
                                  lambda: self.trusted(env, step.proposal, ProposalValue))
            permit = None if step.permit is None else self.guard(
                key, "dispatch", lambda: self.trusted(env, step.permit, PermitValue))
            operation = Operation.objects.filter(proposal_id=proposal.id).first()
            if operation is None:
                try:
                    operation = proposal_dispatch(
                        principal=self.principal, proposal_id=proposal.id,
                        permit_id=permit.permit_id if permit else None, now=self.now,
                        enqueue=self.mode == "worker")
                except Denial as denial:
                    # A concurrent run of this execution may have claimed it first.
                    operation = Operation.objects.filter(proposal_id=proposal.id).first()
                    if operation is None:
                        self.deny(key, "dispatch", denial)
            if operation.state == OperationState.CLAIMED and self.mode == "inline":
                operation = operation_execute(operation_id=operation.id)
            detail: dict[str, Any] = {"proposal_id": proposal.id, "operation_id": operation.id,
                                      "operation_state": operation.state}
            tag = _SETTLED.get(OperationState(operation.state))
            if tag is None:
                self.record(key, "dispatch", "running", detail=detail)
                raise _Wait(key)
            if tag == "completed":
                detail["result"] = operation.result
            else:
                last = Attempt.objects.filter(operation_id=operation.id).order_by(
                    "-number").first()
                detail["error"] = operation.evidence or (last.error if last else "")
            done = self.settle(key, StepOutcome(key, "dispatch", tag, detail=detail))
        if step.bind is not None:
            env[step.bind] = OutcomeValue(done["_status"], done.get("result"),
                                          done.get("error", ""))

    # -- outcomes, journal and denials

    def record(self, key: str, step: str, status: str, *, code: str | None = None,
               message: str = "", detail: dict[str, Any] | None = None) -> None:
        self.outcomes.append(StepOutcome(key, step, status, code, message, detail or {}))

    def settle(self, key: str, outcome: StepOutcome) -> dict[str, Any]:
        """Journal a settled step; a re-run replays it without calling anything."""
        stored = self.journal.put(key, {"outcome": asdict(outcome)}, self.now)
        return self._replayed(stored)

    def replay(self, key: str) -> dict[str, Any] | None:
        stored = self.journal.results.get(key)
        return None if stored is None else self._replayed(stored)

    def _replayed(self, stored: dict[str, Any]) -> dict[str, Any]:
        outcome = StepOutcome(**stored["outcome"])
        self.outcomes.append(outcome)
        if outcome.status == "denied":
            raise _Denied(outcome)
        return {**outcome.detail, "_status": outcome.status}

    def deny(self, key: str, step: str, denial: Denial, *, journal: bool = True) -> NoReturn:
        """Record a refusal as a typed outcome and stop (up to the nearest `try`)."""
        outcome = StepOutcome(key, step, "denied", denial.code.value, denial.message,
                              _jsonable(denial.details))
        if journal:
            self.settle(key, outcome)  # raises _Denied, unless another run recorded first
            raise RuntimeError(f"{key}: another run of execution {self.execution.id} recorded "
                               "this step first; run the execution again to replay it")
        self.outcomes.append(outcome)
        raise _Denied(outcome)

    def guard(self, key: str, step: str, thunk: Any) -> Any:
        """Evaluate values of a step; a value the runtime refuses is that step's denial."""
        try:
            return thunk()
        except Denial as denial:
            self.deny(key, step, denial, journal=False)

    # -- values

    def value(self, env: dict[str, Any], expr: Expr) -> Any:
        if isinstance(expr, Lit):
            return copy.deepcopy(expr.value)
        if expr.name not in env:
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": f"/{expr.name}", "message": f"`{expr}` is not bound on this path"}])
        value = env[expr.name]
        for name in expr.fields:
            if isinstance(value, dict) and name in value:
                value = value[name]
            elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
                value = value[int(name)]
            else:
                raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                    {"pointer": "/" + "/".join((expr.name, *expr.fields)),
                     "message": f"`{expr}`: no field `{name}` in the data"}])
        return value

    def data(self, env: dict[str, Any], expr: Expr) -> Any:
        value = self.value(env, expr)
        if isinstance(value, _TRUSTED):
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": f"/{expr}", "message": "JSON data is required here"}])
        return copy.deepcopy(value)

    def trusted(self, env: dict[str, Any], expr: Expr, kind: type) -> Any:
        value = self.value(env, expr)
        if not isinstance(value, kind):
            # Only trusted steps mint handles, proposals and permits; data never stands in.
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": f"/{expr}", "message": f"`{expr}` is not a {kind.__name__[:-5]}"}])
        return value

    def argument(self, env: dict[str, Any], expr: Expr) -> Any:
        value = self.value(env, expr)
        if isinstance(value, HandleValue):
            return {"id": value.id, "revision": value.revision}
        if isinstance(value, _TRUSTED):
            raise Denial(DenialCode.SCHEMA_INVALID, errors=[
                {"pointer": f"/{expr}", "message": "an argument is data or a resource handle"}])
        return copy.deepcopy(value)


def _arm(arms: tuple[Arm, ...], tag: str) -> Arm | None:
    return next((a for a in arms if a.tag == tag), None) or next(
        (a for a in arms if a.tag == "_"), None)


def _approval_windows(steps: Block) -> dict[str, int]:
    """`expires:` of each `request_approval`, by the proposal's binding: the approval request
    is opened with the proposal, so its window is set when proposing (never lengthened)."""
    windows: dict[str, int] = {}
    for step in _walk(steps):
        if isinstance(step, RequestApproval) and step.expires is not None \
                and isinstance(step.proposal, Ref) and not step.proposal.fields:
            name = step.proposal.name
            windows[name] = min(step.expires, windows.get(name, step.expires))
    return windows


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


__all__ = ["StepOutcome", "WorkflowRefused", "WorkflowRun", "run_workflow", "shape_digest"]
