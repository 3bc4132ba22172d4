"""`run_workflow`: the refusals before any step, the inputs, and starting or resuming a run.

A certificate is not authorization (docs/design.md#extensions). `run_workflow` takes only a
`CheckedWorkflow` (the type is the gate) and refuses to start unless the contracts it was checked
against are still the registered ones (`checked.binds(registry)`), deployment policy still allows
the operations and effects it uses, and the runtime supports every step kind. After that, every step
is a service call and the services decide at run time (`interpreter.py`, `steps.py`).

A run is an `Execution` whose journal opens with a header: the workflow's shape digest, its
contract fingerprints and the pinned inputs (a handle at its revision when the run started). A
resumed run must match the header, or it is refused before any step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from django.utils import timezone

from dispatch.agent.adapters import ModelAdapter
from dispatch.agent.loop import adapter_fingerprint
from dispatch.models import Execution, Principal, Resource, TranscriptEntry
from dispatch.runtime import Runtime, get_runtime
from dispatch.services.access import access_resource_by_id
from dispatch.services.ceilings import Ceiling, run_ceiling, scope_open
from dispatch.services.delegations import delegations_of
from dispatch.services.executions import execution_create, execution_declare
from dispatch.services.wakeups import WORKFLOW_ADAPTER
from dispatch.workflows.context import RunContext
from dispatch.workflows.deadlines import deadline_at
from dispatch.workflows.embedded import AGENT_EXECUTION
from dispatch.workflows.interpreter import Interpreter
from dispatch.workflows.journal import HEADER, Journal, run_from
from dispatch.workflows.race import refuse_protected_race
from dispatch.workflows.shape import shape_digest, walk
from dispatch.workflows.values import Mode, WorkflowRefused, WorkflowRun
from protocols.canonical import CanonicalizationError
from protocols.contracts import ContractRegistry
from protocols.denials import Denial, DenialCode
from protocols.grants import scope_as_json
from protocols.jsontypes import JSONObject, JSONValue
from protocols.lifecycle import RESOURCE_PROTOCOLS, protocol_tables
from protocols.workflow import CheckedWorkflow
from protocols.workflow.ir import AgentCall, Block, Workflow

ADAPTER_PREFIX = WORKFLOW_ADAPTER


def run_workflow(
    checked: CheckedWorkflow,
    *,
    principal: Principal,
    execution_id: str | None = None,
    inputs: Mapping[str, JSONValue] | None = None,
    now: datetime | None = None,
    mode: Mode = "inline",
    agents: Mapping[str, ModelAdapter] | None = None,
    source: tuple[str, str] | None = None,
    focus: tuple[tuple[str, str], ...] = (),
    deadline_s: float | None = None,
    ceiling: Ceiling | None = None,
) -> WorkflowRun:
    """Run (or resume) `checked` as `principal` until it finishes, waits or is denied.

    `inputs` maps each declared input to its value: a resource id (or a `Resource`) for a
    handle, a bool, or JSON. They are pinned on the first run (a handle at its current revision);
    resuming needs only `execution_id`. `mode="inline"` runs handlers in this process;
    `"worker"` enqueues them and waits like for a human. `agents` maps each agent name of an
    `agent` step to the model adapter that drives it: the sub-agent of a delegated step, the
    run principal's own agent loop of an undelegated one (the same configuration again on
    resume). `focus` runs one lane of each concurrent step it names, on a worker
    (`dispatch.workflows.branches`). `source` is the workflow's text and file name, as
    `check_source` checked them: kept with a new execution, so that a decision or an input
    resumes it on a worker (docs/workflows.md#waiting-steps); without it only its caller does.
    `deadline_s`: a new run times out that many seconds after it starts
    (docs/workflows.md#deadlines). `ceiling`: the tool calls, attempts and concurrency a new run
    may spend, its root scope (default: the deployment's, docs/design.md#budgets).
    """
    if not isinstance(checked, CheckedWorkflow):
        raise TypeError("run_workflow runs only a CheckedWorkflow: check the workflow first "
                        "(protocols.workflow.check_workflow)")
    if mode not in ("inline", "worker"):
        raise ValueError(f"mode must be 'inline' or 'worker', not {mode!r}")
    now = now or timezone.now()
    workflow = checked.workflow
    runtime = get_runtime()
    _refuse_moved_contracts(checked, runtime.registry)
    _refuse_outside_policy(checked, runtime)
    refuse_protected_race(workflow.steps)
    agents = dict(agents or {})
    _refuse_missing_agents(workflow.steps, agents)
    header = {"workflow": workflow.name, "shape": _shape_of(workflow),
              "contracts": dict(sorted(checked.contracts.items())),
              "protocols": _protocols_of(checked, runtime.registry)}
    execution: Execution | None
    if execution_id is None:
        pinned = _pin_inputs(workflow, principal, inputs)
        config: JSONObject = {} if source is None else {
            "source": source[0], "filename": source[1], "mode": mode}
        execution = execution_create(principal=principal, adapter_config=config,
                                     adapter=(ADAPTER_PREFIX + workflow.name)[:100], now=now,
                                     deadline_at=deadline_at(now, deadline_s),
                                     authority=declared_authority(workflow))
        scope_open(execution=execution, name="run", ceiling=ceiling or run_ceiling(), now=now)
        journal = Journal(execution.id)
        journal.put(HEADER, {**header, "inputs": pinned}, now, kind=TranscriptEntry.Kind.TOOL_CALL)
    else:
        execution = Execution.objects.filter(id=execution_id, principal=principal).first()
        if execution is None:
            raise WorkflowRefused(DenialCode.NOT_FOUND,
                                  f"no execution {execution_id} of this principal")
        journal = Journal(execution.id)
        recorded = journal.calls.get(HEADER)
        if recorded is None or {k: recorded.get(k) for k in header} != header:
            raise WorkflowRefused(
                DenialCode.EXECUTION_MISMATCH,
                f"execution {execution_id} did not run this workflow against these contracts; "
                "start a new execution (a changed contract needs a new proposal and approval)")
        pinned = recorded["inputs"]
        if inputs is not None and _raw_inputs(inputs) != {k: v["raw"] for k, v in pinned.items()}:
            raise WorkflowRefused(DenialCode.EXECUTION_MISMATCH,
                                  f"execution {execution_id} was started with other inputs")
        final = journal.finals.get(HEADER)
        if final is not None:
            return run_from(final, execution.id, workflow.name)
        execution_declare(execution, authority=declared_authority(workflow))
        _refuse_other_adapters(execution.id, journal, agents)
    ctx = RunContext(workflow=workflow, principal=principal, execution_id=execution.id,
                     journal=journal, now=now, mode=mode, agents=agents, focus=focus,
                     source_less="source" not in execution.adapter_config)
    return Interpreter(ctx).run(pinned)


def declared_authority(workflow: Workflow) -> JSONValue:
    """The workflow's `authority:` as its execution keeps it (docs/design.md#run-trees): every
    action of the run's tree, its agent steps' and sub-agents' included, must lie within it."""
    return [{"operations": sorted(entry.operations), "scope": scope_as_json(entry.scope)}
            for entry in workflow.authority]


# --- refusals before any step --------------------------------------------------------------------


def _refuse_moved_contracts(checked: CheckedWorkflow, registry: ContractRegistry) -> None:
    if checked.binds(registry):
        return
    moved = sorted(name for name, fp in checked.contracts.items()
                   if registry.by_fingerprint(fp) is None or _resolves_to(registry, name) != fp)
    raise WorkflowRefused(
        DenialCode.CONTRACT_MISMATCH,
        f"the registered contract(s) {', '.join(moved)} changed since the workflow was "
        "checked; check it again against the current contracts")


def _protocols_of(checked: CheckedWorkflow, registry: ContractRegistry) -> dict[str, object]:
    """The transition tables the workflow's contracts rest on, as the header pins them: a
    resumed run under a changed table is refused like one under a changed contract."""
    names: list[str] = []
    for fingerprint in checked.contracts.values():
        contract = registry.by_fingerprint(fingerprint)
        assert contract is not None  # bound: checked.binds() held
        names.extend(contract.protocol_preconditions.values())
    return protocol_tables(names)


def _resolves_to(registry: ContractRegistry, name: str) -> str | None:
    try:
        return str(registry.resolve(name).fingerprint)
    except Denial:
        return None


def _refuse_outside_policy(checked: CheckedWorkflow, runtime: Runtime) -> None:
    """The deployment binding: operations switched off here, or effects this deployment does
    not allow, refuse the run up front instead of half-way (docs/design.md#dispatcher steps 3-4,
    docs/design.md#extensions)."""
    for name, fingerprint in sorted(checked.contracts.items()):
        contract = runtime.registry.by_fingerprint(fingerprint)
        assert contract is not None  # bound: checked.binds() held
        effects = {e.value for e in contract.possible_effects}
        forbidden = sorted(effects - runtime.policy.allowed_effects)
        if name in runtime.policy.denied_operations or forbidden:
            what = (f"the effects {', '.join(forbidden)} of {name}" if forbidden
                    else f"the operation {name}")
            raise WorkflowRefused(DenialCode.EFFECT_NOT_PERMITTED,
                                  f"deployment policy does not allow {what} here")


def _refuse_missing_agents(block: Block, agents: Mapping[str, ModelAdapter]) -> None:
    for step in walk(block):
        if isinstance(step, AgentCall) and step.agent not in agents:
            raise WorkflowRefused(
                DenialCode.INPUT_INVALID, f"no model adapter for agent `{step.agent}` (at "
                f"{step.span.where()}): pass it in `agents`", path=step.span.path)


def _refuse_other_adapters(execution_id: str, journal: Journal,
                           agents: Mapping[str, ModelAdapter]) -> None:
    """A sub-agent, or an undelegated step's agent, resumes only under the adapter
    configuration it started with (docs/design.md#outcomes): another one would regenerate its
    actions, so the run is refused before any step."""
    for step, intent in sorted(journal.calls.items()):
        if AGENT_EXECUTION not in intent or step in journal.results:
            continue  # not an undelegated agent step, or settled (it replays without a model)
        name = str(intent.get("agent", ""))
        adapter = agents.get(name)
        run = Execution.objects.filter(id=intent[AGENT_EXECUTION]).first()
        if adapter is not None and run is not None and \
                adapter_fingerprint(adapter) != run.adapter_fingerprint:
            raise WorkflowRefused(
                DenialCode.EXECUTION_MISMATCH, f"the agent `{name}` of step {step} was started "
                f"with another {run.adapter} configuration; resume it with the one it started "
                "with", path=step)
    for delegation in delegations_of(execution_id=execution_id):
        adapter = agents.get(delegation.agent)
        started = delegation.agent_execution.adapter_fingerprint
        if adapter is not None and adapter_fingerprint(adapter) != started:
            raise WorkflowRefused(
                DenialCode.EXECUTION_MISMATCH, f"the sub-agent `{delegation.agent}` of step "
                f"{delegation.step} was started with another {delegation.agent_execution.adapter}"
                " configuration; resume it with the one it started with", path=delegation.step)


def _shape_of(workflow: Workflow) -> str:
    try:
        return shape_digest(workflow)
    except CanonicalizationError as exc:
        raise WorkflowRefused(
            DenialCode.MALFORMED_REQUEST,
            f"the workflow holds a value canon/1 cannot encode (at {exc.pointer or '/'} of its "
            f"shape: {exc.reason}); write it as JSON") from None


# --- inputs --------------------------------------------------------------------------------------


def _raw_inputs(inputs: Mapping[str, JSONValue]) -> JSONObject:
    return {name: value.id if isinstance(value, Resource) else value
            for name, value in inputs.items()}


def _pin_inputs(workflow: Workflow, principal: Principal,
                inputs: Mapping[str, JSONValue] | None) -> dict[str, JSONObject]:
    """Validate the inputs against their declarations; pin handles at their current revision."""
    raw = _raw_inputs(inputs or {})
    declared = {i.name: i for i in workflow.inputs}
    undeclared = sorted(set(raw) - set(declared))
    if undeclared:
        raise WorkflowRefused(DenialCode.INPUT_INVALID,
                              "undeclared inputs: " + ", ".join(undeclared))
    pinned: dict[str, JSONObject] = {}
    for name, spec in declared.items():
        if name not in raw:
            raise WorkflowRefused(DenialCode.INPUT_INVALID, f"input `{name}` is required")
        value = raw[name]
        if spec.kind == "handle":
            pinned[name] = _pin_handle(name, spec.resource or "", spec.state, principal, value)
            continue
        if spec.kind == "bool" and not isinstance(value, bool):
            raise WorkflowRefused(DenialCode.INPUT_INVALID, f"input `{name}` must be a bool")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise WorkflowRefused(DenialCode.INPUT_INVALID,
                                  f"input `{name}` must be JSON") from None
        pinned[name] = {"raw": value, "data": value}
    return pinned


def _pin_handle(name: str, kind: str, state: str | None, principal: Principal,
                value: JSONValue) -> JSONObject:
    """A handle comes from the trusted store, never from the caller's fields
    (docs/design.md#resources)."""
    try:
        resource = access_resource_by_id(principal, value)
    except Denial:
        raise WorkflowRefused(DenialCode.INPUT_INVALID,
                              f"input `{name}`: no resource {value!r} is visible") from None
    if resource.kind != kind:
        raise WorkflowRefused(DenialCode.INPUT_INVALID, f"input `{name}` must be a {kind}, "
                              f"{resource.id} is a {resource.kind}")
    expected = state or str(RESOURCE_PROTOCOLS[kind].initial)
    if resource.state != expected:
        # The certificate was issued for a handle in the declared state.
        raise WorkflowRefused(DenialCode.INPUT_INVALID,
                              f"input `{name}` must be in state {expected!r} as declared; "
                              f"{resource.id} is {resource.state!r}")
    return {"raw": resource.id, "handle": {"id": resource.id,
                                           "revision": resource.current_revision, "kind": kind}}
